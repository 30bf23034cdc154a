package transport

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/codes"
	"github.com/kievrpc/kiev/internal/wire"
	"github.com/kievrpc/kiev/shed"
)

// ServerConfig is what a server's connections share: its settings, and
// the ServerHandler they hand their calls to. It must not change once a
// connection uses it.
type ServerConfig struct {
	Handler ServerHandler
	// Compress is the server's compression (WithCompression); nil for
	// none.
	Compress *Compressor

	HeartbeatInterval, HeartbeatTimeout time.Duration
	MaxFrame                            int
	// MaxCalls bounds the calls a connection has unanswered
	// (WithMaxConcurrentCalls); 0: no bound.
	MaxCalls int
	// Partial bounds the bytes the server's readers hold for large
	// frames in progress; its Max is WithMaxPartialFrameBytes.
	Partial *Budget
	// MaxQueued is the bytes of replies the server's connections may
	// have waiting for their clients to read them
	// (WithMaxQueuedBytes); Conns counts the server's connections, which
	// share it (see Share).
	MaxQueued int
	Conns     *atomic.Int64
	// Settings is the server's Settings frame, sent after its preface;
	// nil for none.
	Settings []byte
	// TLS, if not nil, makes the TLS connection over a socket and
	// handshakes; it returns the connection's state.
	TLS func(net.Conn) (net.Conn, *tls.ConnectionState, error)
	// Warn logs what went wrong with a connection, within the server's
	// rate limit.
	Warn func(msg string, args ...any)
	// Inline bounds what runs on a connection's reader, its zero fields
	// the defaults; Watch is the
	// server's watchdog over its readers lent to calls (inline.go).
	Inline InlineTuning
	Watch  *InlineWatch
	// Readers counts the goroutines that take a reader over.
	Readers *sync.WaitGroup
	// MaxStreams bounds the streams a connection has open at once, and
	// StreamBudget what its streams may hold received and not yet taken
	// by their handlers, in all; 0 for DefaultMaxStreams and
	// DefaultStreamBudget.
	MaxStreams, StreamBudget int
}

// Bounds of a connection's share of ServerConfig.MaxQueued.
const (
	minConnShare = 64 << 10
	maxConnShare = 16 << 20
)

// Share is how many reply bytes one connection may have queued before
// its reader stops taking calls: an equal share of MaxQueued, within
// [minConnShare, maxConnShare].
func (cfg *ServerConfig) Share() int {
	n := max(cfg.Conns.Load(), 1)
	return int(min(max(int64(cfg.MaxQueued)/n, minConnShare), maxConnShare))
}

// ServerConn serves one client connection. It owns two goroutines, the
// reader (Serve) and the link's writer, and its calls run on scheduler
// workers, or on the reader (inline.go). Its methods are safe for
// concurrent use.
type ServerConn struct {
	cfg      *ServerConfig
	nc       net.Conn // the socket, then its TLS conn: set by Serve under mu, read by others under mu
	link     *Link
	base     context.Context // parent of every handler ctx
	stopBase func() bool     // stops the watch on base

	// Lending the reader to a call (inline.go).
	reader     *wire.Reader
	lent       atomic.Uint64 // the lendSeq of the call the reader runs; 0 while it reads
	lendSeq    atomic.Uint64
	watched    atomic.Bool   // the server's InlineWatch watches this connection
	readerDone chan struct{} // closed when the last reader has closed the connection

	flow    shed.Flow    // the connection's calls, for the scheduler's fairness
	inline  InlineTuning // cfg.Inline, filled
	streams streamOwner  // the connection's streams

	// From the client's Settings: the first of the server's compression
	// algorithms that the client accepts, a kiev.Compression.
	replyAlg atomic.Uint32

	mu     sync.Mutex      // guards the fields below
	calls  map[uint64]Call // calls in flight, by id
	active atomic.Int32    // len(calls), read without mu
	// held counts the calls read and not yet answered, against
	// WithMaxConcurrentCalls and MaxUnanswered, and the room they hold
	// (room.go): an answered call may linger in calls until its handler's
	// goroutine is done, and the client, which has its answer, may send
	// the next already.
	held      Held
	closing   atomic.Bool          // draining || dead, read without mu
	draining  bool                 // GoAway sent: refuse new calls, close when idle
	tls       *tls.ConnectionState // set once the TLS handshake is done; nil without TLS
	dead      bool
	started   bool   // the handshake is done and the writer runs
	lingering bool   // drained and half-closed: the reader drops what still comes
	lastID    uint64 // the highest Request id of a call taken (not refused)
}

// NewServerConn returns the connection of nc, not yet served; its calls'
// contexts take their values from base, and are canceled when it ends.
func NewServerConn(cfg *ServerConfig, nc net.Conn, base context.Context) *ServerConn {
	c := &ServerConn{cfg: cfg, nc: nc, base: base, calls: make(map[uint64]Call), readerDone: make(chan struct{}), inline: cfg.Inline.filled()}
	c.stopBase = context.AfterFunc(base, func() { c.cancelCalls(base.Err(), false) })
	c.link = NewLink(nc, Config{
		HeartbeatInterval: cfg.HeartbeatInterval, HeartbeatTimeout: cfg.HeartbeatTimeout, MaxFrame: cfg.MaxFrame,
		OnDead: c.Close,
	})
	c.streams.init(c.link, cfg.MaxFrame, cmp.Or(cfg.StreamBudget, DefaultStreamBudget), cfg.Share)
	return c
}

// Flow is the connection's calls, for the scheduler's fairness; it makes
// a ServerConn the Sink of its calls, with Reply, Fail, Done and
// Backlogged.
func (c *ServerConn) Flow() *shed.Flow { return &c.flow }

// Serve runs the connection until it ends, then waits for its writer.
func (c *ServerConn) Serve() {
	defer c.stopBase()
	if c.cfg.TLS != nil {
		tc, st, err := c.cfg.TLS(c.nc)
		if err != nil {
			c.handshakeFailed("kiev: TLS handshake failed; closing connection", err)
			return
		}
		// close, on another goroutine, reads nc under mu.
		c.mu.Lock()
		c.nc, c.tls = tc, st
		dead := c.dead
		c.mu.Unlock()
		if dead { // closed during the handshake: the socket is closed
			return
		}
		c.link.SetConn(tc)
	}
	r := wire.NewReader(c.link.Reader(c.nc), ReadBufSize, c.cfg.MaxFrame)
	r.SetBudget(c.cfg.Partial)
	defer r.Release()
	if err := c.handshake(r); err != nil {
		c.handshakeFailed("kiev: handshake failed; closing connection", err)
		return
	}
	c.mu.Lock()
	if c.dead { // closed during the handshake
		c.mu.Unlock()
		return
	}
	c.started = true
	c.mu.Unlock()
	c.reader = r
	go c.link.Run()
	c.read(r)
	<-c.readerDone
	<-c.link.Done()
	c.Close(io.EOF) // after the client's end of stream: the replies are out
}

// handshakeFailed closes a connection whose handshake failed, and says so
// unless the server closed it meanwhile, or the peer closed it before
// sending a byte (io.EOF): a load balancer's TCP check does, and so does
// a client that gives up, neither of which is a failure to warn of.
func (c *ServerConn) handshakeFailed(msg string, err error) {
	c.mu.Lock()
	dead := c.dead
	c.dead = true
	c.closing.Store(true)
	c.mu.Unlock()
	if !dead && !errors.Is(err, io.EOF) {
		c.cfg.Warn(msg, "peer", c.nc.RemoteAddr(), "err", err)
	}
	c.nc.Close()
}

// read reads calls until the connection fails, then closes it; or until
// the watchdog gives the reading to another goroutine while this one runs
// a call (inline.go). At the client's clean end of stream it lets the
// calls in flight finish instead (peerDone).
func (c *ServerConn) read(r *wire.Reader) {
	err := c.readLoop(r)
	if err == errReaderTaken {
		return
	}
	if err == io.EOF {
		c.peerDone()
	} else {
		c.Close(err)
	}
	close(c.readerDone)
}

// peerDone handles the client's clean end of stream, between frames: it
// has half-closed the connection (CloseWrite), as net/rpc clients may, or
// closed it. As net/rpc's server does, the calls in flight finish and send
// their replies; then the writer stops and Serve closes the connection.
// A kiev client that closes with calls in flight cancels them first
// (ClientConn.Close), and a client that is gone fails the first
// reply written to it, which closes the connection and cancels the rest.
func (c *ServerConn) peerDone() {
	c.mu.Lock()
	if c.dead || c.draining { // closing already, or drain closes it
		c.mu.Unlock()
		return
	}
	c.draining = true
	c.closing.Store(true)
	idle := len(c.calls) == 0
	c.mu.Unlock()
	if idle {
		c.link.FlushAndStop()
	}
}

// handshake reads the client's preface and answers with the version both
// sides speak, within the heartbeat timeout, and the server's Settings if
// it has any to announce.
func (c *ServerConn) handshake(r *wire.Reader) error {
	_ = c.nc.SetReadDeadline(time.Now().Add(c.cfg.HeartbeatTimeout))
	v, err := wire.ReadPreface(r)
	if err != nil {
		return err
	}
	_ = c.nc.SetReadDeadline(time.Time{})
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.cfg.HeartbeatTimeout))
	_, err = c.nc.Write(append(wire.AppendPreface(nil, min(v, wire.Version)), c.cfg.Settings...))
	return err
}

func (c *ServerConn) readLoop(r *wire.Reader) error {
	var (
		h  wire.Header
		hd = Head{Origin: Origin{Addr: c.nc.RemoteAddr(), TLS: c.tls, Conn: true}} // here, not in the loop: Open's pointer to it escapes
		b  burst
	)
	for {
		// Take no more calls while the client leaves its replies unread:
		// backpressure, so a client that does not read holds no more than
		// its share of memory.
		if !r.Buffered() || !c.link.HasRoom(c.cfg.Share(), &c.held, MaxUnanswered) {
			c.streams.flushWakes() // the reader may wait: for the client, or for room
		}
		if err := c.link.WaitRoom(c.cfg.Share(), &c.held, MaxUnanswered); err != nil {
			return err
		}
		if !r.More() {
			b.end(c.link) // what is read is answered: send before waiting
		}
		f, err := r.Next()
		if err != nil {
			if errors.Is(err, wire.ErrBudget) {
				return fmt.Errorf("kiev: the server holds its limit of %d MiB for frames in progress from all clients (WithMaxPartialFrameBytes); closing this connection, whose frame would pass it", c.cfg.Partial.Max>>20)
			}
			return err
		}
		c.link.FrameRead()
		switch f.Type {
		case wire.TypeRequest:
			if err := wire.ParseHeader(f.Header, &h); err != nil {
				return err
			}
			hd.Read(&f, &h)
			c.streams.flushWakes() // the call may run on this goroutine
			taken, err := c.request(&hd, r.More(), &b)
			if err != nil {
				return err
			}
			if taken {
				return errReaderTaken
			}
		case wire.TypeSettings:
			if err := wire.ParseHeader(f.Header, &h); err != nil {
				return err
			}
			if cp := c.cfg.Compress; cp != nil {
				c.replyAlg.Store(uint32(cp.First(SetOf(h.Accept))))
			}
		case wire.TypeCancel:
			c.mu.Lock()
			sc := c.calls[f.ID]
			c.mu.Unlock()
			if sc != nil {
				sc.State().CallerGone.Store(true)
				sc.Cancel(context.Canceled)
			}
			if s, _ := c.streams.get(f.ID); s != nil {
				s.Abort(errStreamCanceled)
			}
		case wire.TypeMessage, wire.TypeCredit, wire.TypeEnd:
			if err := wire.ParseHeader(f.Header, &h); err != nil {
				return err
			}
			if err := c.streams.frame(&f, &h); err != nil {
				return err
			}
		case wire.TypePing:
			c.streams.flushWakes()
			b := wire.BeginFrame(make([]byte, 0, wire.HeaderSize), wire.TypePong, f.ID)
			_ = wire.EndFrame(b, 0, c.cfg.MaxFrame)
			_ = c.link.Send(b)
		}
		// Pong needs nothing beyond readSeen; unknown types are skipped
		// so that newer clients can add frame types.
	}
}

// request starts one call; more says frames follow it in the read
// buffer, and b is the burst they belong to. Failures known before the
// handler runs are answered from here, without a goroutine. It reports
// whether the reading passed to another goroutine while the call ran on
// this one. A Request that reuses the id of a call still in flight is a
// protocol error, which closes the connection: answering it would leave
// the first call running with no way to cancel it, and let one connection
// start calls past WithMaxConcurrentCalls.
//
// Admission comes first: a call refused as the connection drains, or at
// WithMaxConcurrentCalls, is refused before Open copies or decompresses
// its args. Only this goroutine adds to held, so the limit read
// here holds until the call is taken; draining is checked again under
// mu, where the call is taken.
func (c *ServerConn) request(hd *Head, more bool, b *burst) (taken bool, err error) {
	if hd.IsStream {
		c.streams.seen(hd.ID) // refused or not: frames for it are dropped from now on
	}
	if c.closing.Load() {
		c.replyError(hd.ID, codes.Shutdown, errDraining)
		return false, nil
	}
	if _, n := c.held.Load(); c.cfg.MaxCalls > 0 && !hd.IsStream && n >= c.cfg.MaxCalls {
		code, msg := c.cfg.Handler.Refuse(hd.Method, "on this connection")
		c.replyError(hd.ID, code, msg)
		return false, nil
	}
	var s *Stream
	if hd.IsStream {
		if s, err = c.openStream(hd); err != nil {
			return false, err
		}
		if s == nil {
			return false, nil // refused
		}
	} else if s, _ := c.streams.get(hd.ID); s != nil {
		return false, fmt.Errorf("kiev: protocol error: the client sent a Request with id %d while its stream of that id was open; an id must be unique among a connection's calls and streams in flight (PROTOCOL.md)", hd.ID)
	}
	if hd.Compression != 0 {
		if code, msg := c.cfg.Compress.decompressArgs(hd, c.cfg.MaxFrame); code != codes.OK {
			c.refuseStream(hd)
			c.replyError(hd.ID, code, msg)
			return false, nil
		}
	}
	sc, code, msg := c.cfg.Handler.Open(hd, c.base, c)
	if sc == nil {
		c.refuseStream(hd)
		c.replyError(hd.ID, code, msg)
		return false, nil
	}
	if s != nil {
		sc.State().Stream = s
	}
	if hd.ReplyAsked {
		st := sc.State()
		st.ReplyAsk, st.ReplyAsked = hd.ReplyAsk, true
	}
	c.mu.Lock()
	if c.draining || c.dead {
		c.mu.Unlock()
		sc.Release()
		c.refuseStream(hd)
		c.replyError(hd.ID, codes.Shutdown, errDraining)
		return false, nil
	}
	// An answered call (its Response queued) or one the client canceled
	// may linger here until its handler returns; its id is free again.
	if old := c.calls[hd.ID]; old != nil && !old.State().Answered.Load() && !old.State().CallerGone.Load() {
		c.mu.Unlock()
		sc.Release()
		c.refuseStream(hd)
		return false, fmt.Errorf("kiev: protocol error: the client sent a Request with id %d while its call %s of that id was in flight; an id must be unique among a connection's calls in flight (PROTOCOL.md)", hd.ID, old.Name())
	}
	// Only a call taken counts in the last GoAway's LastID: the answer
	// of one refused as the connection drains may find the writer
	// stopped, and the client must then know that it did not run.
	c.lastID = max(c.lastID, hd.ID)
	c.calls[hd.ID] = sc
	c.active.Store(int32(len(c.calls)))
	if s != nil {
		// A stream counts against WithMaxStreams, not as a call in flight
		// for its whole life.
		sc.State().Answered.Store(true)
	} else {
		c.reserve(sc.State(), sc.ReplySize(), len(hd.Body))
	}
	c.mu.Unlock()
	if ran, taken := c.runInline(sc, more, b); ran {
		return taken, nil
	}
	sc.Submit(c.base)
	return false, nil
}

// errDraining answers a call on a connection that is closing.
const errDraining = "kiev: server is shutting down; retry on another connection"

func (c *ServerConn) replyError(id uint64, code codes.Code, msg string) {
	buf := GetBuf(0)
	b := AppendError((*buf)[:0], id, code, msg, false)
	if err := wire.EndFrame(b, 0, c.cfg.MaxFrame); err == nil {
		_ = c.link.Send(b)
	}
	*buf = b
	PutBuf(buf)
}

// finish forgets a call, unless a new call has taken its id; the last
// call of a draining connection closes it.
func (c *ServerConn) finish(sc Call) {
	st := sc.State()
	c.answered(st, 0) // if it was not: the caller is gone, or its deadline passed
	c.mu.Lock()
	if c.calls[st.ID] == sc {
		delete(c.calls, st.ID)
	}
	c.active.Store(int32(len(c.calls)))
	idle := c.draining && len(c.calls) == 0
	c.mu.Unlock()
	if idle {
		c.endDrain()
	}
}

// endDrain ends a draining connection whose calls have all been answered:
// a last GoAway says the highest Request id taken (every one answered, so
// a call the client still waits for was never read, and did not run),
// then the writer flushes and stops.
func (c *ServerConn) endDrain() {
	c.mu.Lock()
	last := c.lastID
	c.mu.Unlock()
	b := wire.BeginFrame(nil, wire.TypeGoAway, 0)
	b = wire.AppendUvarint(b, wire.KeyLastID, last)
	_ = wire.EndHeader(b, 0)
	_ = wire.EndFrame(b, 0, c.cfg.MaxFrame)
	_ = c.link.Send(b)
	c.link.FlushAndStop()
}

// Drain sends GoAway and closes the connection once its calls are done.
func (c *ServerConn) Drain() {
	c.mu.Lock()
	if c.draining || c.dead {
		c.mu.Unlock()
		return
	}
	if !c.started { // still handshaking: nothing to drain
		c.mu.Unlock()
		c.Close(ErrServerClosed)
		return
	}
	c.draining = true
	c.closing.Store(true)
	idle := len(c.calls) == 0
	c.mu.Unlock()
	b := wire.BeginFrame(nil, wire.TypeGoAway, 0)
	_ = wire.EndFrame(b, 0, c.cfg.MaxFrame)
	_ = c.link.Send(b)
	if idle {
		c.endDrain()
	}
	go func() {
		// Once the writer has flushed the last reply, half-close: the
		// client reads every reply, then the end of the stream. Requests
		// it sent before it saw the GoAway are still read, and dropped
		// unanswered (they did not run, and the client retries them
		// elsewhere), for a heartbeat interval at most: closing with
		// them unread would send a reset, which can destroy replies the
		// client has not read yet. The reader then closes the socket.
		<-c.link.Done()
		c.mu.Lock()
		nc := c.nc
		c.mu.Unlock()
		if hc, ok := nc.(interface{ CloseWrite() error }); ok && hc.CloseWrite() == nil {
			c.mu.Lock()
			c.lingering = true
			c.mu.Unlock()
			_ = c.nc.SetReadDeadline(time.Now().Add(c.cfg.HeartbeatInterval))
			return
		}
		c.Close(ErrServerClosed)
	}()
}

// Close ends the connection at once, with err. It is safe to call many times.
func (c *ServerConn) Close(err error) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead = true
	c.closing.Store(true)
	lingering := c.lingering
	nc := c.nc // the socket, or its TLS conn once Serve has it
	c.mu.Unlock()
	if err != nil && !lingering && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, ErrServerClosed) {
		c.cfg.Warn("kiev: closing connection", "peer", nc.RemoteAddr(), "err", err)
	}
	c.link.Stop(err)
	nc.Close()
	c.streams.failAll(connLost(err))
	c.cancelCalls(context.Canceled, true)
}

// CancelStreams cancels every open stream's call with err.
func (c *ServerConn) CancelStreams(err error) {
	c.mu.Lock()
	var streams []Call
	for _, sc := range c.calls {
		if sc.State().Stream != nil {
			streams = append(streams, sc)
		}
	}
	c.mu.Unlock()
	for _, sc := range streams {
		sc.Cancel(err)
	}
}

// cancelCalls cancels the context of every call in flight. With
// callerGone set, their replies are not sent.
func (c *ServerConn) cancelCalls(err error, callerGone bool) {
	c.mu.Lock()
	calls := make([]Call, 0, len(c.calls))
	for _, sc := range c.calls {
		calls = append(calls, sc)
	}
	c.mu.Unlock()
	for _, sc := range calls {
		if callerGone {
			sc.State().CallerGone.Store(true)
		}
		sc.Cancel(err)
	}
}

// Reply, Fail, Done and Backlogged make a ServerConn the Sink of its
// calls.
func (c *ServerConn) Reply(sc Call, cd codec.Codec, v any) error {
	st := sc.State()
	buf := GetBuf(0)
	defer PutBuf(buf)
	b, err := AppendResponse((*buf)[:0], st.ID, cd, v)
	if cp, alg := c.cfg.Compress, uint8(c.replyAlg.Load()); err == nil && cp != nil && st.Stream == nil && (alg != NoCompression || st.ReplyAsked) {
		b = cp.compressReply(st, b, alg, c.cfg.MaxFrame)
	}
	*buf = b
	if err != nil {
		return err
	}
	return c.answer(st, b, true)
}

func (c *ServerConn) Fail(sc Call, code codes.Code, msg string, limited bool) error {
	st := sc.State()
	buf := GetBuf(0)
	defer PutBuf(buf)
	b := AppendError((*buf)[:0], st.ID, code, msg, limited)
	*buf = b
	return c.answer(st, b, false)
}

// answer sends the Response frame b of the call st is of, unless it is
// too large, or too large to add to the replies the client has left
// unread. isReply says b carries a reply, whose size its method's next
// calls are expected to make; an error is no guide.
func (c *ServerConn) answer(st *CallState, b []byte, isReply bool) error {
	if err := wire.EndFrame(b, 0, c.cfg.MaxFrame); err != nil {
		return fmt.Errorf("%w; return less or raise WithMaxFrameSize on both sides", err)
	}
	if len(b) > maxBackloggedFrame {
		if n, over := c.Backlogged(); over {
			return &BacklogError{Queued: n}
		}
	}
	size := 0
	if isReply {
		size = len(b)
	}
	c.answered(st, size)
	if s := st.Stream; s != nil {
		// After the stream's messages; the stream is over once it is
		// written.
		_ = s.Finish(b, nil)
		return nil
	}
	_ = c.link.SendAlone(b, c.active.Load() == 1)
	return nil
}

// answered marks a call answered, with a reply of replyBytes (0 for
// none): the client may reuse its id, and it holds no more room nor
// counts against WithMaxConcurrentCalls.
func (c *ServerConn) answered(st *CallState, replyBytes int) {
	if !st.Answered.Swap(true) {
		c.unreserve(st, replyBytes)
	}
}

// maxBackloggedFrame is the largest frame still queued for a client past
// twice its share of WithMaxQueuedBytes: error replies, not payloads.
const maxBackloggedFrame = 1 << 10

func (c *ServerConn) Done(sc Call) { c.finish(sc) }

// Stream is the call's stream, if it opened one.
func (c *ServerConn) Stream(sc Call) HandlerStream {
	if s := sc.State().Stream; s != nil {
		return s
	}
	return nil
}

func (c *ServerConn) Backlogged() (int, bool) {
	n := int(c.link.Backlog())
	return n, n > 2*c.cfg.Share()
}

// errStreamCanceled is what a stream's handler sees once its client
// canceled the stream (Cancel), or closed it.
var errStreamCanceled = errors.New("kiev: the client closed the stream (or its context ended); stop sending")

// openStream makes the stream a Request opens, and sets hd.Stream to it;
// or refuses it, answered, and returns nil, when the connection has its
// limit of streams open. A Request that reuses the id of a stream still
// open is a protocol error.
func (c *ServerConn) openStream(hd *Head) (*Stream, error) {
	if old, _ := c.streams.get(hd.ID); old != nil {
		return nil, fmt.Errorf("kiev: protocol error: the client opened stream %d while its stream of that id was open; an id must be unique among a connection's calls and streams in flight (PROTOCOL.md)", hd.ID)
	}
	if max := cmp.Or(c.cfg.MaxStreams, DefaultMaxStreams); c.streams.count() >= max {
		c.replyError(hd.ID, codes.Overloaded, fmt.Sprintf("kiev: %s refused: %d streams are already open on this connection, the server's limit (WithMaxStreams); close streams you no longer read, or open this one on another connection", hd.Method, max))
		return nil, nil
	}
	prio := uint8(5)
	if hd.HasPriority {
		prio = hd.Priority
	}
	s := newStream(&c.streams, hd.ID, prio)
	s.credit = hd.StreamCredit
	if err := c.streams.add(s); err != nil {
		return nil, err
	}
	hd.Stream = s
	return s, nil
}

// refuseStream forgets the stream of a Request refused before it opened.
func (c *ServerConn) refuseStream(hd *Head) {
	if hd.Stream != nil {
		hd.Stream.Abort(errStreamCanceled)
		hd.Stream = nil
	}
}

// connLost is the error a connection's streams fail with as it ends of
// err.
func connLost(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: the connection closed", ErrShutdown)
	}
	return fmt.Errorf("%w: %w", ErrShutdown, err)
}

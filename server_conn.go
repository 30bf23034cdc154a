package kiev

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/transport"
	"github.com/kievrpc/kiev/internal/wire"
	"github.com/kievrpc/kiev/shed"
)

// serverConn serves one client connection. It owns two goroutines, the
// reader (serve) and the link's writer, and its calls run on scheduler
// workers, or on the reader (inline.go).
type serverConn struct {
	srv      *Server
	nc       net.Conn // the socket, then its TLS conn: set by serve under mu, read by others under mu
	link     *transport.Link
	base     context.Context // parent of every handler ctx
	stopBase func() bool     // stops the watch on base

	// Lending the reader to a call (inline.go).
	reader     *wire.Reader
	lent       atomic.Uint64 // the lendSeq of the call the reader runs; 0 while it reads
	lendSeq    atomic.Uint64
	watched    atomic.Bool   // the server's inlineWatch watches this connection
	readerDone chan struct{} // closed when the last reader has closed the connection

	flow shed.Flow // the connection's calls, for the scheduler's fairness

	// From the client's Settings: the first of the server's compression
	// algorithms that the client accepts, a Compression.
	replyAlg atomic.Uint32

	mu     sync.Mutex             // guards the fields below
	calls  map[uint64]*serverCall // calls in flight, by id
	active atomic.Int32           // len(calls), read without mu
	// unanswered counts the calls read and not yet answered, against
	// WithMaxConcurrentCalls (kept only with a limit): an answered call
	// may linger in calls until its handler's goroutine is done, and
	// the client, which has its answer, may send the next already.
	unanswered atomic.Int32
	draining   bool                 // GoAway sent: refuse new calls, close when idle
	tls        *tls.ConnectionState // set once the TLS handshake is done; nil without TLS
	dead       bool
	started    bool   // the handshake is done and the writer runs
	lingering  bool   // drained and half-closed: the reader drops what still comes
	lastID     uint64 // the highest Request id of a call taken (not refused)
}

func newServerConn(s *Server, nc net.Conn, base context.Context) *serverConn {
	c := &serverConn{srv: s, nc: nc, base: base, calls: make(map[uint64]*serverCall), readerDone: make(chan struct{})}
	c.stopBase = context.AfterFunc(base, func() { c.cancelCalls(base.Err(), false) })
	o := &s.opts.connOptions
	c.link = transport.NewLink(nc, transport.Config{
		HeartbeatInterval: o.heartbeatInterval, HeartbeatTimeout: o.heartbeatTimeout, MaxFrame: o.maxFrame,
		Share:  s.connShare,
		Closed: ErrShutdown,
		OnDead: c.close,
	})
	return c
}

// serve runs the connection until it ends, then waits for its writer.
func (c *serverConn) serve() {
	defer c.stopBase()
	if c.srv.opts.tls != nil {
		tc, st, err := c.srv.tlsServer(c.nc)
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
	r := wire.NewReader(c.link.Reader(c.nc), transport.ReadBufSize, c.srv.opts.maxFrame)
	r.SetBudget(&c.srv.partial)
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
	c.close(io.EOF) // after the client's end of stream: the replies are out
}

// handshakeFailed closes a connection whose handshake failed, and says so
// unless the server closed it meanwhile.
func (c *serverConn) handshakeFailed(msg string, err error) {
	c.mu.Lock()
	dead := c.dead
	c.dead = true
	c.mu.Unlock()
	if !dead {
		c.srv.warn(msg, "peer", c.nc.RemoteAddr(), "err", err)
	}
	c.nc.Close()
}

// read reads calls until the connection fails, then closes it; or until
// the watchdog gives the reading to another goroutine while this one runs
// a call (inline.go). At the client's clean end of stream it lets the
// calls in flight finish instead (peerDone).
func (c *serverConn) read(r *wire.Reader) {
	err := c.readLoop(r)
	if err == errReaderTaken {
		return
	}
	if err == io.EOF {
		c.peerDone()
	} else {
		c.close(err)
	}
	close(c.readerDone)
}

// peerDone handles the client's clean end of stream, between frames: it
// has half-closed the connection (CloseWrite), as net/rpc clients may, or
// closed it. As net/rpc's server does, the calls in flight finish and send
// their replies; then the writer stops and serve closes the connection.
// A kiev client that closes with calls in flight cancels them first
// (clientConn.cancelPending), and a client that is gone fails the first
// reply written to it, which closes the connection and cancels the rest.
func (c *serverConn) peerDone() {
	c.mu.Lock()
	if c.dead || c.draining { // closing already, or drain closes it
		c.mu.Unlock()
		return
	}
	c.draining = true
	idle := len(c.calls) == 0
	c.mu.Unlock()
	if idle {
		c.link.FlushAndStop()
	}
}

// handshake reads the client's preface and answers with the version both
// sides speak, within the heartbeat timeout, and the server's Settings if
// it has any to announce.
func (c *serverConn) handshake(r *wire.Reader) error {
	_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.opts.heartbeatTimeout))
	v, err := wire.ReadPreface(r.Buffered())
	if err != nil {
		return err
	}
	_ = c.nc.SetReadDeadline(time.Time{})
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.srv.opts.heartbeatTimeout))
	_, err = c.nc.Write(append(wire.AppendPreface(nil, min(v, wire.Version)), c.srv.opts.compress.settings...))
	return err
}

func (c *serverConn) readLoop(r *wire.Reader) error {
	var h wire.Header
	var b burst
	for {
		// Take no more calls while the client leaves its replies unread:
		// backpressure, so a client that does not read holds no more than
		// its share of memory.
		if err := c.link.WaitRoom(c.srv.connShare()); err != nil {
			return err
		}
		if !r.More() {
			b.end(c.link) // what is read is answered: send before waiting
		}
		f, err := r.Next()
		if err != nil {
			if errors.Is(err, wire.ErrBudget) {
				return fmt.Errorf("kiev: the server holds its limit of %d MiB for frames in progress from all clients (WithMaxPartialFrameBytes); closing this connection, whose frame would pass it", c.srv.opts.maxPartial>>20)
			}
			return err
		}
		c.link.FrameRead()
		switch f.Type {
		case wire.TypeRequest:
			if err := wire.ParseHeader(f.Header, &h); err != nil {
				return err
			}
			taken, err := c.request(&f, &h, r.More(), &b)
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
			c.replyAlg.Store(uint32(c.srv.opts.compress.first(setOf(h.Accept))))
		case wire.TypeCancel:
			c.mu.Lock()
			sc := c.calls[f.ID]
			c.mu.Unlock()
			if sc != nil {
				sc.callerGone.Store(true)
				sc.ctx.cancel(context.Canceled)
			}
		case wire.TypePing:
			b := wire.BeginFrame(make([]byte, 0, wire.HeaderSize), wire.TypePong, f.ID)
			_ = wire.EndFrame(b, 0, c.srv.opts.maxFrame)
			_ = c.link.Send(b)
		}
		// Pong needs nothing beyond readSeen; unknown types are skipped
		// so that newer clients can add frame types.
	}
}

// maxTimeoutMicros caps a wire timeout so that it cannot overflow a
// time.Duration (about 292 years).
const maxTimeoutMicros = math.MaxInt64 / 1000

// request starts one call; more says frames follow it in the read
// buffer, and b is the burst they belong to. Failures known before the
// handler runs are answered from here, without a goroutine. It reports
// whether the reading passed to another goroutine while the call ran on
// this one. A Request that reuses the id of a call still in flight is a
// protocol error, which closes the connection: answering it would leave
// the first call running with no way to cancel it, and let one connection
// start calls past WithMaxConcurrentCalls.
func (c *serverConn) request(f *wire.Frame, h *wire.Header, more bool, b *burst) (taken bool, err error) {
	sc, code, msg := c.srv.newCall(f, h, c.nc.RemoteAddr(), c.base, c)
	if sc == nil {
		c.replyError(f.ID, code, msg)
		return false, nil
	}
	sc.req.TLS = c.tls
	c.mu.Lock()
	if c.draining || c.dead {
		c.mu.Unlock()
		sc.release()
		c.replyError(f.ID, CodeShutdown, "kiev: server is shutting down; retry on another connection")
		return false, nil
	}
	if max := c.srv.opts.maxCalls; max > 0 && int(c.unanswered.Load()) >= max {
		c.mu.Unlock()
		sc.release()
		code, msg := c.srv.refuseAtLimit(sc.m, "on this connection")
		c.replyError(f.ID, code, msg)
		return false, nil
	}
	// An answered call (its Response queued) or one the client canceled
	// may linger here until its handler returns; its id is free again.
	if old := c.calls[f.ID]; old != nil && !old.answered.Load() && !old.callerGone.Load() {
		c.mu.Unlock()
		sc.release()
		return false, fmt.Errorf("kiev: protocol error: the client sent a Request with id %d while its call %s of that id was in flight; an id must be unique among a connection's calls in flight (PROTOCOL.md)", f.ID, old.m.name)
	}
	// Only a call taken counts in the last GoAway's LastID: the answer
	// of one refused as the connection drains may find the writer
	// stopped, and the client must then know that it did not run.
	c.lastID = max(c.lastID, f.ID)
	c.calls[f.ID] = sc
	c.active.Store(int32(len(c.calls)))
	if c.srv.opts.maxCalls > 0 {
		c.unanswered.Add(1)
	}
	c.mu.Unlock()
	if ran, taken := c.runInline(sc, more, b); ran {
		return taken, nil
	}
	c.srv.submit(sc, c.base)
	return false, nil
}

func (c *serverConn) replyError(id uint64, code Code, msg string) {
	buf := transport.GetBuf(0)
	b := appendError((*buf)[:0], id, code, msg, false)
	if err := wire.EndFrame(b, 0, c.srv.opts.maxFrame); err == nil {
		_ = c.link.Send(b)
	}
	*buf = b
	transport.PutBuf(buf)
}

// finish forgets a call, unless a new call has taken its id; the last
// call of a draining connection closes it.
func (c *serverConn) finish(sc *serverCall) {
	c.answered(sc) // if it was not: the caller is gone, or its deadline passed
	c.mu.Lock()
	if c.calls[sc.id] == sc {
		delete(c.calls, sc.id)
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
func (c *serverConn) endDrain() {
	c.mu.Lock()
	last := c.lastID
	c.mu.Unlock()
	b := wire.BeginFrame(nil, wire.TypeGoAway, 0)
	b = wire.AppendUvarint(b, wire.KeyLastID, last)
	_ = wire.EndHeader(b, 0)
	_ = wire.EndFrame(b, 0, c.srv.opts.maxFrame)
	_ = c.link.Send(b)
	c.link.FlushAndStop()
}

// drain sends GoAway and closes the connection once its calls are done.
func (c *serverConn) drain() {
	c.mu.Lock()
	if c.draining || c.dead {
		c.mu.Unlock()
		return
	}
	if !c.started { // still handshaking: nothing to drain
		c.mu.Unlock()
		c.close(ErrServerClosed)
		return
	}
	c.draining = true
	idle := len(c.calls) == 0
	c.mu.Unlock()
	b := wire.BeginFrame(nil, wire.TypeGoAway, 0)
	_ = wire.EndFrame(b, 0, c.srv.opts.maxFrame)
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
			_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.opts.heartbeatInterval))
			return
		}
		c.close(ErrServerClosed)
	}()
}

// close ends the connection at once. It is safe to call many times.
func (c *serverConn) close(err error) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead = true
	lingering := c.lingering
	nc := c.nc // the socket, or its TLS conn once serve has it
	c.mu.Unlock()
	if err != nil && !lingering && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, ErrServerClosed) {
		c.srv.warn("kiev: closing connection", "peer", nc.RemoteAddr(), "err", err)
	}
	c.link.Stop(err)
	nc.Close()
	c.cancelCalls(context.Canceled, true)
}

// cancelCalls cancels the context of every call in flight. With
// callerGone set, their replies are not sent.
func (c *serverConn) cancelCalls(err error, callerGone bool) {
	c.mu.Lock()
	calls := make([]*serverCall, 0, len(c.calls))
	for _, sc := range c.calls {
		calls = append(calls, sc)
	}
	c.mu.Unlock()
	for _, sc := range calls {
		if callerGone {
			sc.callerGone.Store(true)
		}
		sc.ctx.cancel(err)
	}
}

// reply, fail, done and backlogged make a serverConn the callSink of its
// calls.
func (c *serverConn) reply(sc *serverCall, cd codec.Codec, v any) error {
	buf := transport.GetBuf(0)
	defer transport.PutBuf(buf)
	b, err := appendResponse((*buf)[:0], sc.id, cd, v)
	if err == nil {
		b = c.compressReply(sc, b)
	}
	*buf = b
	if err != nil {
		return err
	}
	return c.answer(sc, b)
}

// compressReply compresses the reply frame b of sc as the client's
// Settings allow, or as its Request asked (ReplyCompression): asked for
// none, none; asked for an algorithm the server uses, that one, whatever
// the reply's size. A reply too large to send is left for answer to
// refuse.
func (c *serverConn) compressReply(sc *serverCall, b []byte) []byte {
	alg := Compression(c.replyAlg.Load())
	if alg == NoCompression && !sc.ctx.replyAsked {
		return b // the common case: no compression on this connection
	}
	o := &c.srv.opts.compress
	least := o.threshold
	if ask := sc.ctx.replyAsk; sc.ctx.replyAsked && (ask == NoCompression || o.set.has(ask)) {
		alg, least = ask, 0
	}
	if alg == NoCompression || len(b)-4 > c.srv.opts.maxFrame {
		return b
	}
	return compressFrame(b, 0, alg, least)
}

func (c *serverConn) fail(sc *serverCall, code Code, msg string, limited bool) error {
	buf := transport.GetBuf(0)
	defer transport.PutBuf(buf)
	b := appendError((*buf)[:0], sc.id, code, msg, limited)
	*buf = b
	return c.answer(sc, b)
}

// answer sends sc's Response frame b, unless it is too large, or too
// large to add to the replies the client has left unread.
func (c *serverConn) answer(sc *serverCall, b []byte) error {
	if err := wire.EndFrame(b, 0, c.srv.opts.maxFrame); err != nil {
		return fmt.Errorf("%w; return less or raise WithMaxFrameSize on both sides", err)
	}
	if len(b) > maxBackloggedFrame {
		if n, over := c.backlogged(); over {
			return &backlogError{queued: n}
		}
	}
	c.answered(sc)
	_ = c.link.SendAlone(b, c.active.Load() == 1)
	return nil
}

// answered marks sc answered: the client may reuse its id, and it counts
// no more against WithMaxConcurrentCalls.
func (c *serverConn) answered(sc *serverCall) {
	if !sc.answered.Swap(true) && c.srv.opts.maxCalls > 0 {
		c.unanswered.Add(-1)
	}
}

// maxBackloggedFrame is the largest frame still queued for a client past
// twice its share of WithMaxQueuedBytes: error replies, not payloads.
const maxBackloggedFrame = 1 << 10

func (c *serverConn) done(sc *serverCall) { c.finish(sc) }

func (c *serverConn) backlogged() (int, bool) {
	n := int(c.link.Backlog())
	return n, n > 2*c.srv.connShare()
}

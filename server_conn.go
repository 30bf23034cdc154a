package kiev

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/wire"
	"github.com/kievrpc/kiev/shed"
)

// serverConn serves one client connection. It owns two goroutines, the
// reader (serve) and the link's writer, and its calls run on scheduler
// workers, or on the reader (inline.go).
type serverConn struct {
	srv      *Server
	nc       net.Conn // the socket, then its TLS conn: set by serve under mu, read by others under mu
	link     *link
	base     context.Context // parent of every handler ctx
	stopBase func() bool     // stops the watch on base

	// Lending the reader to a call (inline.go).
	reader     *wire.Reader
	lent       atomic.Uint64 // the lendSeq of the call the reader runs; 0 while it reads
	lendSeq    atomic.Uint64
	watched    atomic.Bool   // the server's inlineWatch watches this connection
	readerDone chan struct{} // closed when the last reader has closed the connection

	flow shed.Flow // the connection's calls, for the scheduler's fairness

	mu        sync.Mutex
	calls     map[uint64]*serverCall // calls in flight, by id
	active    atomic.Int32           // len(calls), read without mu
	draining  bool                   // GoAway sent: refuse new calls, close when idle
	tls       *tls.ConnectionState   // set once the TLS handshake is done; nil without TLS
	dead      bool
	started   bool   // the handshake is done and the writer runs
	lingering bool   // drained and half-closed: the reader drops what still comes
	lastID    uint64 // the highest Request id read
}

func newServerConn(s *Server, nc net.Conn, base context.Context) *serverConn {
	c := &serverConn{srv: s, nc: nc, base: base, calls: make(map[uint64]*serverCall), readerDone: make(chan struct{})}
	c.stopBase = context.AfterFunc(base, func() { c.cancelCalls(base.Err(), false) })
	c.link = newLink(nc, &s.opts.connOptions, c.close)
	c.link.share = s.connShare
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
		c.link.setConn(tc)
	}
	r := wire.NewReader(&progressReader{c.nc, &c.link.bytesSeen}, readBufSize, c.srv.opts.maxFrame)
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
	go c.link.writeLoop()
	c.read(r)
	<-c.readerDone
	<-c.link.done
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
		c.link.flushAndStop()
	}
}

// handshake reads the client's preface and answers with the version both
// sides speak, within the heartbeat timeout.
func (c *serverConn) handshake(r *wire.Reader) error {
	_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.opts.heartbeatTimeout))
	v, err := wire.ReadPreface(r.Buffered())
	if err != nil {
		return err
	}
	_ = c.nc.SetReadDeadline(time.Time{})
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.srv.opts.heartbeatTimeout))
	_, err = c.nc.Write(wire.AppendPreface(nil, min(v, wire.Version)))
	return err
}

func (c *serverConn) readLoop(r *wire.Reader) error {
	var h wire.Header
	var b burst
	for {
		// Take no more calls while the client leaves its replies unread:
		// backpressure, so a client that does not read holds no more than
		// its share of memory.
		if err := c.link.waitRoom(c.srv.connShare()); err != nil {
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
		c.link.readSeen.Store(true)
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
			_ = c.link.send(b)
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
	c.lastID = max(c.lastID, f.ID)
	if c.draining || c.dead {
		c.mu.Unlock()
		sc.release()
		c.replyError(f.ID, CodeShutdown, "kiev: server is shutting down; retry on another connection")
		return false, nil
	}
	if max := c.srv.opts.maxCalls; max > 0 && len(c.calls) >= max {
		c.mu.Unlock()
		sc.release()
		c.replyError(f.ID, CodeOverloaded, fmt.Sprintf("kiev: %s refused: %d calls are already in flight on this connection, the server's limit (WithMaxConcurrentCalls); retry later or on another server", sc.m.name, max))
		return false, nil
	}
	// An answered call (its Response queued) or one the client canceled
	// may linger here until its handler returns; its id is free again.
	if old := c.calls[f.ID]; old != nil && !old.answered.Load() && !old.callerGone.Load() {
		c.mu.Unlock()
		sc.release()
		return false, fmt.Errorf("kiev: protocol error: the client sent a Request with id %d while its call %s of that id was in flight; an id must be unique among a connection's calls in flight (PROTOCOL.md)", f.ID, old.m.name)
	}
	c.calls[f.ID] = sc
	c.active.Store(int32(len(c.calls)))
	c.mu.Unlock()
	if ran, taken := c.runInline(sc, more, b); ran {
		return taken, nil
	}
	c.srv.submit(sc, c.base)
	return false, nil
}

// maxUnknownName bounds the name of an unknown method that interceptors
// and logs see: the peer's to choose, up to a 64 KiB header.
const maxUnknownName = 256

// maxMetaPresize bounds the room made for a call's metadata before it is
// read: the count of pairs is the peer's to choose, and pairs that repeat
// one key (21,666 empty pairs fit in a 64 KiB header) would otherwise
// size a map for all of them, 1.28 MiB per call.
const maxMetaPresize = 8

// newCall makes the call a Request frame asks for, or says why it cannot:
// no such method, or an unknown codec. It copies the args, so the frame
// may be reused.
func (s *Server) newCall(f *wire.Frame, h *wire.Header, peer net.Addr, base context.Context, sink callSink) (*serverCall, Code, string) {
	m, err := s.lookup(h.Method)
	if err != nil {
		if len(s.opts.interceptors) == 0 {
			return nil, CodeNotFound, err.Error()
		}
		m = s.unknown // the interceptors judge the call first
	}
	cd := s.codecs[string(h.Codec)]
	if cd == nil {
		return nil, CodeBadRequest, fmt.Sprintf("kiev: unknown codec %q; this server knows %s", h.Codec, s.codecNames())
	}
	sc := &serverCall{srv: s, sink: sink, m: m, codec: cd, id: f.ID}
	sc.req = Request{ServiceMethod: m.name, ID: f.ID, Peer: peer, Codec: cd.Name(), call: sc}
	if m == s.unknown {
		sc.req.ServiceMethod = truncate(string(h.Method), maxUnknownName)
	}
	if h.MetaCount > 0 {
		md := make(Metadata, min(h.MetaCount, maxMetaPresize))
		wire.EachMeta(f.Header, func(k, v []byte) { md[string(k)] = string(v) })
		sc.req.Metadata = md
	}
	sc.ctx.parent = base
	sc.ctx.call = sc
	sc.ctx.md = sc.req.Metadata
	claimed := DefaultPriority
	if h.HasPriority {
		claimed = Priority(h.Priority)
	}
	sc.ctx.priority = s.priority(&sc.req, claimed)
	if h.HasTimeout {
		sc.ctx.deadline = time.Now().Add(time.Duration(min(h.Timeout, maxTimeoutMicros)) * time.Microsecond)
	}
	sc.body = getBuf(len(f.Body))
	*sc.body = append((*sc.body)[:0], f.Body...)
	return sc, 0, ""
}

// priority is the priority a call that claims one is scheduled at: what
// WithPriorityPolicy decides, or the claim.
func (s *Server) priority(req *Request, claimed Priority) Priority {
	if policy := s.opts.priorityPolicy; policy != nil {
		return min(policy(req, claimed), MaxPriority)
	}
	return min(claimed, MaxPriority)
}

// submit hands a call to the scheduler.
func (s *Server) submit(sc *serverCall, base context.Context) {
	if err := base.Err(); err != nil {
		sc.ctx.cancel(err)
	}
	s.sched.Submit(sc)
}

// release returns a call that will not run or be answered.
func (sc *serverCall) release() {
	if sc.body != nil {
		putBuf(sc.body)
		sc.body = nil
	}
}

func (c *serverConn) replyError(id uint64, code Code, msg string) {
	buf := getBuf(0)
	b := appendError((*buf)[:0], id, code, msg, false)
	if err := wire.EndFrame(b, 0, c.srv.opts.maxFrame); err == nil {
		_ = c.link.send(b)
	}
	*buf = b
	putBuf(buf)
}

// finish forgets a call, unless a new call has taken its id; the last
// call of a draining connection closes it.
func (c *serverConn) finish(sc *serverCall) {
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
// a last GoAway says the highest Request id read (every one answered, so
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
	_ = c.link.send(b)
	c.link.flushAndStop()
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
	_ = c.link.send(b)
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
		<-c.link.done
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
	c.link.stop(err)
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

func (s *Server) codecNames() string {
	return strings.Join(slices.Sorted(maps.Keys(s.codecs)), ", ")
}

// callSink is where a call's answer goes: the connection it came on, or
// a packet socket and the caller's address.
type callSink interface {
	// prefix appends what goes before a Response frame: nothing on a
	// connection, the preface in a datagram.
	prefix(b []byte) []byte
	// send sends b, a Response frame after its prefix, unless it is too
	// large, which it reports.
	send(sc *serverCall, b []byte) error
	// done forgets the call; it is the last thing a call does.
	done(sc *serverCall)
	// backlogged reports the bytes of replies waiting for the caller to
	// read them, and whether they are too many to run more of its calls.
	backlogged() (int, bool)
}

// prefix, send and done make a serverConn the callSink of its calls.
func (c *serverConn) prefix(b []byte) []byte { return b }

func (c *serverConn) send(sc *serverCall, b []byte) error {
	if err := wire.EndFrame(b, 0, c.srv.opts.maxFrame); err != nil {
		return fmt.Errorf("%w; return less or raise WithMaxFrameSize on both sides", err)
	}
	if len(b) > maxBackloggedFrame {
		if n, over := c.backlogged(); over {
			return &backlogError{queued: n}
		}
	}
	sc.answered.Store(true)
	_ = c.link.sendAlone(b, c.active.Load() == 1)
	return nil
}

// maxBackloggedFrame is the largest frame still queued for a client past
// twice its share of WithMaxQueuedBytes: error replies, not payloads.
const maxBackloggedFrame = 1 << 10

// backlogError says a reply was not queued because the client has left
// too many unread.
type backlogError struct{ queued int }

func (e *backlogError) Error() string {
	return fmt.Sprintf("%d KiB of replies wait for this client to read them, more than its share of the server's memory (WithMaxQueuedBytes); read replies as they come, or have fewer calls in flight", e.queued>>10)
}

func (c *serverConn) done(sc *serverCall) { c.finish(sc) }

func (c *serverConn) backlogged() (int, bool) {
	n := int(c.link.backlog.Load())
	return n, n > 2*c.srv.connShare()
}

// serverCall is one call in flight.
type serverCall struct {
	srv        *Server
	sink       callSink
	m          *method
	codec      codec.Codec
	id         uint64
	body       *[]byte
	ctx        callContext // the handler's context
	callerGone atomic.Bool // the caller canceled, or the connection died
	answered   atomic.Bool // its Response is queued: the client may reuse its id
	req        Request
}

// Priority, Deadline, Canceled, Cost, Run and Drop make a serverCall a
// shed.Task, and Flow a shed.FlowTask: each connection is a flow that the
// scheduler shares its limits fairly with the others.

func (sc *serverCall) Priority() int               { return int(sc.ctx.priority) }
func (sc *serverCall) Deadline() (time.Time, bool) { return sc.ctx.Deadline() }
func (sc *serverCall) Canceled() bool              { return sc.callerGone.Load() }
func (sc *serverCall) Cost() *shed.ServiceTime     { return &sc.m.cost }

// Flow is the call's connection's, for fairness; nil over UDP and HTTP.
// (Derived from the sink, not held: a field would take serverCall past
// its allocation size class.)
func (sc *serverCall) Flow() *shed.Flow {
	if c, ok := sc.sink.(*serverConn); ok {
		return &c.flow
	}
	return nil
}

// Drop answers a call the scheduler will not run.
func (sc *serverCall) Drop(r shed.Reason) {
	defer sc.sink.done(sc)
	code := CodeOverloaded
	if r == shed.Deadline {
		code = CodeDeadlineExceeded
	}
	sc.m.stats.record(time.Now(), -1, code)
	putBuf(sc.body)
	sc.body = nil
	sc.ctx.cancel(context.Canceled)
	if sc.callerGone.Load() {
		return
	}
	if msg := sc.m.dropped[r]; msg != "" {
		sc.replyErr(code, msg, r == shed.Limited)
	}
}

// dropMessages builds, once per method, the answers to its calls the
// scheduler drops, by reason, so that refusing a call under overload costs
// no allocation. A canceled call gets no answer.
func dropMessages(name string) []string {
	m := make([]string, len(shed.Reasons()))
	m[shed.Evicted] = "kiev: " + name + " was shed: the server is overloaded and a more important call took its place in the queue; retry on another server"
	m[shed.Refused] = "kiev: " + name + " was refused: the server is overloaded and its queue is full of calls as important; retry on another server"
	m[shed.Expired] = "kiev: " + name + " was shed: it waited in the overloaded server's queue past the wait limit; retry on another server"
	m[shed.Deadline] = "kiev: " + name + " was not run: too little time was left before the caller's deadline"
	m[shed.Limited] = "kiev: " + name + " was refused at its adaptive limit: it has slowed down (its dependency is likely slow), and the call could not start in time; the server's other methods are not held; retry on another server"
	return m
}

// Run executes the interceptor chain and the method, then replies.
func (sc *serverCall) Run() { sc.RunTimed(time.Now()) }

// RunTimed is Run for a call started at start, reporting when the handler
// ended, which makes a serverCall a shed.TimedTask: the scheduler takes
// the handler's time from the clock reads the call's metrics make anyway.
func (sc *serverCall) RunTimed(start time.Time) (end time.Time) {
	defer sc.sink.done(sc)
	if n, over := sc.sink.backlogged(); over && !sc.callerGone.Load() {
		// Its reply would only add to the pile the caller does not read.
		sc.m.stats.record(start, -1, CodeOverloaded)
		putBuf(sc.body)
		sc.body = nil
		sc.ctx.cancel(context.Canceled)
		sc.replyError(CodeOverloaded, fmt.Sprintf("kiev: %s was not run: %v", sc.m.name, &backlogError{queued: n}))
		return start
	}
	sc.ctx.start(start)
	sc.srv.inFlight.Add(1)
	err := sc.protect(func() error { return sc.srv.handler(&sc.ctx, &sc.req) })
	end = time.Now()
	sc.srv.inFlight.Add(-1)
	code := CodeOK
	if err != nil {
		code = codeOf(err)
	}
	sc.m.stats.record(end, end.Sub(start), code)
	sc.logCall(end.Sub(start), code, err)
	if sc.body != nil {
		putBuf(sc.body)
		sc.body = nil
	}
	expired := sc.ctx.Err() == context.DeadlineExceeded
	sc.ctx.cancel(context.Canceled) // the handler is done; so are its goroutines' ctx
	if sc.callerGone.Load() || expired {
		// The caller has stopped waiting; a reply would only cost
		// bandwidth.
		return end
	}
	if err != nil {
		sc.replyError(codeOf(err), err.Error())
		return end
	}
	sc.reply()
	return end
}

// protect runs f and turns a panic into a CodeInternal error.
func (sc *serverCall) protect(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			stack := make([]byte, 8<<10)
			stack = stack[:runtime.Stack(stack, false)]
			sc.srv.logLimited(slog.LevelError, "kiev: handler panicked", "method", sc.m.name, "panic", p, "stack", string(stack))
			err = &ServerError{Code: CodeInternal, Message: fmt.Sprintf("kiev: %s panicked: %v", sc.m.name, p)}
		}
	}()
	return f()
}

// invoke is the innermost Handler: decode args, call the method.
func (s *Server) invoke(ctx context.Context, req *Request) error {
	sc := req.call
	if sc == nil {
		return &ServerError{Code: CodeInternal, Message: "kiev: a server interceptor passed on a Request it built itself; pass on the *Request it was given"}
	}
	if sc.m == s.unknown {
		msg := "kiev: no method " + req.ServiceMethod
		if _, err := s.lookup([]byte(req.ServiceMethod)); err != nil {
			msg = err.Error()
		}
		return &ServerError{Code: CodeNotFound, Message: msg}
	}
	argp := sc.m.newArg()
	if err := sc.codec.Unmarshal(*sc.body, argp.Interface()); err != nil {
		return &ServerError{Code: CodeBadRequest, Message: fmt.Sprintf("kiev: decoding args of %s (codec %s): %v", sc.m.name, sc.codec.Name(), err)}
	}
	putBuf(sc.body)
	sc.body = nil
	replyp := sc.m.newReply()
	req.Args = argp.Interface()
	req.Reply = replyp.Interface()
	return sc.m.call(ctx, argp, replyp)
}

func (sc *serverCall) reply() {
	buf := getBuf(0)
	defer putBuf(buf)
	b := sc.sink.prefix((*buf)[:0])
	start := len(b)
	b = wire.BeginFrame(b, wire.TypeResponse, sc.id)
	b = wire.AppendString(b, wire.KeyCodec, sc.codec.Name())
	_ = wire.EndHeader(b, start)
	b, err := sc.codec.Marshal(b, sc.req.Reply)
	*buf = b
	if err != nil {
		sc.srv.logLimited(slog.LevelError, "kiev: encoding reply failed", "method", sc.m.name, "codec", sc.codec.Name(), "err", err)
		sc.replyError(CodeInternal, fmt.Sprintf("kiev: encoding reply of %s (codec %s): %v", sc.m.name, sc.codec.Name(), err))
		return
	}
	if err := sc.sink.send(sc, b); err != nil {
		if be, ok := err.(*backlogError); ok {
			sc.replyError(CodeOverloaded, fmt.Sprintf("kiev: reply of %s dropped: %v", sc.m.name, be))
			return
		}
		sc.replyError(CodeTooLarge, fmt.Sprintf("kiev: reply of %s is too large: %v", sc.m.name, err))
	}
}

// replyError answers the call with an error. A message too long for the
// sink (a datagram, say) is cut short.
func (sc *serverCall) replyError(code Code, msg string) { sc.replyErr(code, msg, false) }

// replyErr sends an error Response; limited marks an Overloaded error as
// the method's, refused at its adaptive limit, not the server's.
func (sc *serverCall) replyErr(code Code, msg string, limited bool) {
	buf := getBuf(0)
	b := appendError(sc.sink.prefix((*buf)[:0]), sc.id, code, msg, limited)
	if sc.sink.send(sc, b) != nil && len(msg) > maxShortError {
		b = appendError(sc.sink.prefix(b[:0]), sc.id, code, msg[:maxShortError]+"...", limited)
		_ = sc.sink.send(sc, b)
	}
	*buf = b
	putBuf(buf)
}

// maxShortError is the length error messages are cut to when they do not
// fit whole.
const maxShortError = 256

// appendError appends an error Response frame, without its length, which
// the sink's send fills in.
func appendError(b []byte, id uint64, code Code, msg string, limited bool) []byte {
	start := len(b)
	b = wire.BeginFrame(b, wire.TypeResponse, id)
	b = wire.AppendUvarint(b, wire.KeyErrCode, uint64(code))
	b = wire.AppendString(b, wire.KeyErrMsg, msg)
	if limited {
		b = wire.AppendString(b, wire.KeyLimited, "")
	}
	_ = wire.EndHeader(b, start)
	return b
}

package kiev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/transport"
)

// ErrStreamsUnsupported says a stream was opened to a server that does
// not serve streams: a kiev from before them. Upgrade the server, or
// call its unary methods.
var ErrStreamsUnsupported = transport.ErrStreamsUnsupported

// StreamError is how a stream failed as its connection was lost: Sent is
// how many messages this side sent, and Taken how many of them the
// peer's application had taken, as far as its last credit said, so that
// a sender can resume from message Taken on a new stream. errors.As finds
// it in the error of Send or Recv; errors.Is(err, ErrShutdown) holds too.
type StreamError = transport.StreamError

// Stream is a client's end of a stream, which Client.Stream opens. Send
// may be called from one goroutine at a time, and Recv from one (the
// same or another); Close and CloseSend from any.
//
// One rule frees a stream: it ends when Recv returns an error (io.EOF
// at its end included), when the context it was opened with ends, or
// on Close. A Stream dropped without any of these is canceled once the
// garbage collector finds it, and counted
// (kiev_client_streams_leaked_total), but until then it holds its
// server's handler: close what you open.
type Stream struct{ cs *clientStream }

// clientStream is a Stream's state, apart from the handle its user
// holds, so that a handle dropped unclosed can be found.
type clientStream struct {
	c      *Client
	ep     *endpoint
	conn   *connTransport
	s      *transport.Stream
	method string
	codec  codec.Codec
	stop   func() bool // stops the watch of the stream's context
	// hooks are StreamDesc.OnMessage's and OnEnd's; nil if none.
	hooks *streamHooks
	// The typed streams' boxes (boxOf): Send's, and Recv's.
	sendBox, recvBox any

	mu       sync.Mutex // guards the fields below
	final    *transport.Final
	replied  bool  // a client stream's reply was returned by Recv
	err      error // the stream's end, once Recv returned it: io.EOF or why it failed
	released bool
}

// Stream opens a stream of serviceMethod ("Service.Method"), a method
// that takes kiev.In or kiev.Out. args are a server stream's args, and
// nil for client and bidirectional streams. ctx bounds the whole stream:
// its deadline reaches the handler, as a call's does, and its end
// cancels the stream.
//
// Stream returns once the server has accepted the stream. The stream's
// open passes the server's overload scheduler as a call does; an open
// refused unrun (ErrOverloaded, ErrShutdown) is retried on another
// provider, as calls are (see RetryPolicy). The balancer picks the
// provider when the stream opens; least-loaded counts open streams apart
// from calls.
//
// The client's stream interceptors (WithStreamInterceptor) wrap the open.
func (c *Client) Stream(ctx context.Context, serviceMethod string, args any) (*Stream, error) {
	if ics := c.opts.streamChain; len(ics) > 0 {
		return chainStream(c.stream, ics)(ctx, &StreamDesc{ServiceMethod: serviceMethod, Args: args, Target: c.target})
	}
	desc := StreamDesc{ServiceMethod: serviceMethod, Args: args, Target: c.target} // on the stack: no interceptor keeps it
	return c.stream(ctx, &desc)
}

// stream opens desc's stream: Stream beneath the stream interceptors.
func (c *Client) stream(ctx context.Context, desc *StreamDesc) (*Stream, error) {
	serviceMethod := desc.ServiceMethod
	if c.rpcc != nil {
		return nil, fmt.Errorf("kiev: %s: a client over a net/rpc codec carries no streams", serviceMethod)
	}
	call := &Call{ServiceMethod: serviceMethod, Args: desc.Args, Target: c.target, codec: c.opts.codec, stream: true, hooks: desc.hooks}
	c.budget.Deposit()
	start := time.Now()
	var tried triedSet
	for attempt := 1; ; attempt++ {
		cs, err := c.openStream(ctx, call, &tried, start)
		if err == nil {
			h := &Stream{cs}
			runtime.AddCleanup(h, (*clientStream).dropped, cs)
			return h, nil
		}
		why, ok := c.retryable(serviceMethod, err)
		if attempt >= c.budget.p.MaxAttempts || ctx.Err() != nil || !ok || errors.As(err, new(throttled)) || !c.budget.Withdraw(time.Now()) {
			c.stats.record(time.Now(), time.Since(start), errCode(err))
			return nil, shutdownErr(err)
		}
		c.retries[why].Add(1)
	}
}

// openStream makes one attempt at opening call's stream.
func (c *Client) openStream(ctx context.Context, call *Call, tried *triedSet, now time.Time) (*clientStream, error) {
	a, err := c.begin(ctx, call, tried, now)
	if err != nil {
		return nil, err
	}
	if a.cancel != nil { // an attempt timeout bounds the open, not the stream
		a.cancel()
		a.ctx, a.cancel = ctx, nil
	}
	cs, err := c.tryStream(ctx, a.ep, call)
	if err != nil {
		err = &callError{call.ServiceMethod, err}
	}
	return cs, c.finish(ctx, call, &a, err)
}

// tryStream opens call's stream on ep, and waits for the server to
// accept it.
func (c *Client) tryStream(ctx context.Context, ep *endpoint, call *Call) (*clientStream, error) {
	t, err := ep.open(ctx)
	if err != nil {
		if !errors.Is(err, errClientClosed) {
			err = notSent{err}
		}
		return nil, err
	}
	ct, ok := t.(*connTransport)
	if !ok {
		return nil, fmt.Errorf("kiev: streams need a connection (TCP, TLS or a Unix socket); %s is reached over UDP", ep.inst.Address)
	}
	if err := ct.conn.StreamsReady(ctx); err != nil {
		if errors.Is(err, ErrStreamsUnsupported) {
			return nil, fmt.Errorf("kiev: the server at %s: %w", ep.inst.Address, err)
		}
		return nil, notSent{err}
	}
	s, grant := ct.conn.NewStream(uint8(PriorityFrom(ctx)), transport.InitialWindow)
	if err := ct.sendOpen(ctx, s, grant, call); err != nil {
		return nil, err
	}
	accepted, err := s.Accepted(ctx)
	if err != nil {
		ct.conn.CancelStream(s, err)
		return nil, err
	}
	if !accepted { // refused: its Response is the stream's end
		_, f, err := s.Recv(ctx)
		if f == nil {
			return nil, fmt.Errorf("kiev: the server ended stream %s without an answer: %w", call.ServiceMethod, err)
		}
		defer f.Release()
		if err := decodeReply(call, &f.Response, nil); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("kiev: the server ended stream %s before accepting it", call.ServiceMethod)
	}
	cs := &clientStream{c: c, ep: ep, conn: ct, s: s, method: call.ServiceMethod, codec: call.codec, hooks: call.hooks}
	ep.streams.Add(1)
	c.streamStats.opened()
	if ctx.Done() != nil {
		cs.stop = context.AfterFunc(ctx, func() { cs.cancel(ctx.Err()) })
	}
	return cs, nil
}

// sendOpen sends the Request that opens s, made with ctx.
func (t *connTransport) sendOpen(ctx context.Context, s *transport.Stream, grant uint64, call *Call) error {
	buf := transport.GetBuf(0)
	defer transport.PutBuf(buf)
	deadline, _ := ctx.Deadline()
	var rq transport.Request
	request(&rq, ctx, deadline, call)
	rq.Stream, rq.StreamCredit = true, grant
	b, err := transport.AppendRequest((*buf)[:0], s.ID, &rq, t.ep.c.opts.maxFrame)
	*buf = b
	if err != nil {
		return err
	}
	if err := t.conn.OpenStream(s, b); err != nil {
		if errors.Is(err, transport.ErrDraining) {
			err = fmt.Errorf("%w: the server at %s is draining; retry on a new connection", ErrShutdown, t.ep.inst.Address)
		}
		return notSent{err}
	}
	return nil
}

// Send sends v to the server, whole or not at all. It waits, within ctx,
// while the server has not granted credit for the messages queued before
// it; a Send that gives up leaves the stream usable. Once the server
// ended the stream it returns io.EOF, and Recv returns why.
func (s *Stream) Send(ctx context.Context, v any) error {
	defer runtime.KeepAlive(s) // see Recv
	cs := s.cs
	buf := transport.GetBuf(0)
	b, err := cs.codec.Marshal((*buf)[:0], v)
	*buf = b
	if err != nil {
		transport.PutBuf(buf)
		return fmt.Errorf("kiev: %s: encoding a message (codec %s): %w", cs.method, cs.codec.Name(), err)
	}
	err = cs.s.SendBuf(ctx, buf) // on success, the stream takes buf
	if err == nil {
		cs.c.streamStats.sent(len(b))
		cs.hooks.message(true, len(b), v)
		return nil
	}
	transport.PutBuf(buf)
	switch {
	case errors.Is(err, transport.ErrSendEnded):
		if cs.serverEnded() {
			return io.EOF
		}
		return fmt.Errorf("kiev: %s: %w", cs.method, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	default:
		return cs.fail(err)
	}
}

// Recv receives the next message into v, a pointer. It returns io.EOF
// once the server has finished sending and every message before has
// been returned, or the error the stream failed with. A client stream's
// reply arrives as its one message, after CloseSend. It waits within
// ctx; a Recv that gives up leaves the stream usable.
func (s *Stream) Recv(ctx context.Context, v any) error {
	// s must stay reachable until Recv returns: it is often a stream's
	// last use, and once s is unreachable its cleanup (dropped) cancels
	// the stream, which this Recv would then return for its io.EOF.
	defer runtime.KeepAlive(s)
	cs := s.cs
	cs.mu.Lock()
	if cs.err != nil {
		err := cs.err
		cs.mu.Unlock()
		return err
	}
	if f := cs.final; f != nil {
		cs.mu.Unlock()
		return cs.finalMessage(f, v)
	}
	cs.mu.Unlock()
	m, f, err := cs.s.Recv(ctx)
	switch {
	case m != nil:
		defer transport.PutBuf(m)
		cs.c.streamStats.received(len(*m))
		if err := cs.codec.Unmarshal(*m, v); err != nil {
			return fmt.Errorf("kiev: %s: decoding a message (codec %s) into %T: %w", cs.method, cs.codec.Name(), v, err)
		}
		cs.hooks.message(false, len(*m), v)
		return nil
	case f != nil:
		cs.mu.Lock()
		cs.final = f
		cs.mu.Unlock()
		return cs.finalMessage(f, v)
	case err == io.EOF:
		return io.EOF // the server half-closed; its Response comes later
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		if cs.s.Err() == nil {
			return err // ctx given to Recv ended; the stream goes on
		}
		return cs.fail(err)
	default:
		return cs.fail(err)
	}
}

// finalMessage returns what the server's Response f means to Recv: its
// error, or a client stream's reply, decoded into v, then io.EOF.
func (cs *clientStream) finalMessage(f *transport.Final, v any) error {
	if f.Code != CodeOK {
		call := Call{ServiceMethod: cs.method, Reply: v, codec: cs.codec}
		return cs.fail(decodeReply(&call, &f.Response, nil))
	}
	cs.mu.Lock()
	reply := len(f.Codec) > 0 && !cs.replied
	cs.replied = true
	cs.mu.Unlock()
	if !reply {
		return cs.end(io.EOF)
	}
	call := Call{ServiceMethod: cs.method, Reply: v, codec: cs.codec}
	if err := decodeReply(&call, &f.Response, nil); err != nil {
		return cs.fail(err)
	}
	cs.hooks.message(false, len(f.Body), v)
	return nil
}

// CloseSend tells the server that this side sends no more: its In's
// Recv returns io.EOF once it has the messages sent before. The stream
// goes on receiving. It is idempotent.
func (s *Stream) CloseSend() error {
	defer runtime.KeepAlive(s) // see Recv
	err := s.cs.s.CloseSend()
	if err != nil && s.cs.serverEnded() {
		return nil
	}
	return err
}

// Close ends the stream, if it has not ended: the server cancels its
// handler. It never blocks, and returns nil, or the error the stream
// ended with before Close, if it failed.
func (s *Stream) Close() error {
	defer runtime.KeepAlive(s) // see Recv
	cs := s.cs
	cs.cancel(errStreamClosed)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.err == io.EOF || cs.err == errStreamClosed {
		return nil
	}
	return cs.err
}

var errStreamClosed = errors.New("kiev: the stream was closed (Stream.Close)")

// serverEnded reports whether the server's Response ended the stream.
func (cs *clientStream) serverEnded() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.final != nil || cs.err != nil
}

// cancel ends the stream with err, telling the server, unless it has
// ended.
func (cs *clientStream) cancel(err error) {
	cs.mu.Lock()
	if cs.err != nil {
		cs.mu.Unlock()
		return
	}
	cs.err = err
	cs.mu.Unlock()
	cs.conn.conn.CancelStream(cs.s, err)
	cs.release()
}

// fail ends the stream with err, which Recv returns from now on, and
// returns it.
func (cs *clientStream) fail(err error) error {
	var se *StreamError
	if errors.As(err, &se) {
		err = &callError{cs.method, err}
	}
	return cs.end(err)
}

// end records the stream's end, err, unless it had one, and returns the
// end.
func (cs *clientStream) end(err error) error {
	cs.mu.Lock()
	if cs.err == nil {
		cs.err = err
	}
	err = cs.err
	cs.mu.Unlock()
	if err != io.EOF {
		cs.s.Abort(err)
	}
	cs.release()
	return err
}

// release gives back what the stream counts against, once.
func (cs *clientStream) release() {
	cs.mu.Lock()
	done := cs.released
	cs.released = true
	cs.mu.Unlock()
	if done {
		return
	}
	if cs.stop != nil {
		cs.stop()
	}
	cs.ep.streams.Add(-1)
	cs.c.streamStats.closed()
	if cs.hooks != nil {
		cs.hooks.end(cs.outcome())
	}
}

// dropped cancels a stream whose handle was dropped unclosed, and counts
// it.
func (cs *clientStream) dropped() {
	cs.mu.Lock()
	open := cs.err == nil
	cs.mu.Unlock()
	if open {
		cs.c.streamsLeaked.Add(1)
		cs.cancel(errors.New("kiev: the stream was dropped without Close"))
	}
}

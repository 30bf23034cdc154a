package kiev

import (
	"context"
	"errors"

	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/codec"
)

// Call is an RPC in progress or done, as in net/rpc. Client.Go returns one;
// client interceptors receive one.
type Call struct {
	ServiceMethod string     // "Service.Method"
	Args          any        // the arguments
	Reply         any        // the reply, filled when the call succeeds
	Error         error      // after completion, the call's error, if any
	Done          chan *Call // receives the Call when it completes (Go only)

	id     uint64
	codec  codec.Codec
	signal chan *Call  // internal completion channel of Client.Call
	stop   func() bool // stops the context watch of Client.Go
}

// complete delivers a finished call to whoever waits for it.
func (call *Call) complete() {
	if call.stop != nil {
		call.stop()
	}
	if call.signal != nil {
		call.signal <- call
		return
	}
	select {
	case call.Done <- call:
	default:
		// The caller's Done channel is full; as in net/rpc the caller
		// must give it enough room, and the call is dropped.
	}
}

var callPool = sync.Pool{New: func() any { return &Call{signal: make(chan *Call, 1)} }}

// Client calls services on one server over one multiplexed connection,
// which it redials with backoff when it breaks. A Client is safe for use
// by many goroutines at once; share one per server.
type Client struct {
	network, addr string
	opts          dialOptions
	invoke        Invoker
	budget        *retryBudget
	throttle      *[MaxPriority + 1]throttler
	direct        bool // Go may send without a goroutine: no interceptors, retries or throttle

	live atomic.Pointer[clientConn] // the current connection, for the fast path

	mu       sync.Mutex
	cc       *clientConn
	closed   bool
	dialing  chan struct{} // closed when the dial in progress ends
	failures int           // failed dials in a row
	retryAt  time.Time     // no dial before this
	lastErr  error

	wg sync.WaitGroup // goroutines of every connection
}

// Dial connects to the kiev server at target, "host:port" over TCP (also
// written "tcp://host:port"), or "unix:///path/to/socket". It returns once
// the connection and the protocol handshake succeed. The client retries
// calls that surely did not run within a budget (see RetryPolicy) and
// throttles itself while the server keeps refusing (see Throttle).
func Dial(target string, opts ...DialOption) (*Client, error) {
	network, addr, err := parseTarget(target)
	if err != nil {
		return nil, err
	}
	c := &Client{network: network, addr: addr}
	for _, o := range opts {
		o.applyDial(&c.opts)
	}
	c.opts.fill()
	c.budget = newRetryBudget(c.opts.retry)
	c.throttle = newThrottlers(c.opts.throttle)
	c.invoke = chainClient(c.attempts, c.opts.interceptors)
	c.direct = len(c.opts.interceptors) == 0 && c.budget.p.MaxAttempts == 1 && c.throttle == nil
	if _, err := c.conn(context.Background()); err != nil {
		return nil, err
	}
	return c, nil
}

func parseTarget(target string) (network, addr string, err error) {
	switch {
	case strings.HasPrefix(target, "unix://"):
		return "unix", strings.TrimPrefix(target, "unix://"), nil
	case strings.HasPrefix(target, "tcp://"):
		target = strings.TrimPrefix(target, "tcp://")
	case strings.Contains(target, "://"):
		return "", "", fmt.Errorf("kiev: Dial %q: unknown scheme; use host:port, tcp://host:port or unix:///path", target)
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return "", "", fmt.Errorf("kiev: Dial %q: want host:port: %v", target, err)
	}
	return "tcp", target, nil
}

// Call calls serviceMethod ("Service.Method") with args, waits for the
// reply and decodes it into reply, a pointer (or nil to discard it). The
// deadline and cancellation of ctx travel to the server's handler. When
// ctx ends first, Call returns at once with ctx's error and tells the
// server to cancel the handler.
func (c *Client) Call(ctx context.Context, serviceMethod string, args, reply any) error {
	call := callPool.Get().(*Call)
	call.ServiceMethod, call.Args, call.Reply = serviceMethod, args, reply
	err := c.invoke(ctx, call)
	*call = Call{signal: call.signal}
	callPool.Put(call)
	return err
}

// Go starts a call and returns at once. The Call is sent on done when it
// completes; if done is nil, Go makes a channel with room for 10 calls. A
// non-nil done must be buffered, or Go panics, as in net/rpc. When ctx
// ends first, the Call completes with ctx's error. The call goes through
// the same interceptors, retries and throttling as Client.Call, on a
// goroutine of its own; a client with none of them (WithRetry with
// MaxAttempts 1, Throttle.Disabled, no interceptors) sends it from the
// caller's goroutine.
func (c *Client) Go(ctx context.Context, serviceMethod string, args, reply any, done chan *Call) *Call {
	if done == nil {
		done = make(chan *Call, 10)
	} else if cap(done) == 0 {
		panic("kiev: Client.Go: done channel is unbuffered; give it room for the calls it will receive")
	}
	call := &Call{ServiceMethod: serviceMethod, Args: args, Reply: reply, Done: done}
	if !c.direct {
		go func() {
			call.signal = make(chan *Call, 1)
			err := c.invoke(ctx, call)
			call.signal = nil
			call.Error = err
			call.complete()
		}()
		return call
	}
	if _, err := c.start(ctx, call, true); err != nil {
		call.Error = err
		call.complete()
	}
	return call
}

// roundTrip is the innermost Invoker: send the call, wait for its end.
func (c *Client) roundTrip(ctx context.Context, call *Call) error {
	cc, err := c.start(ctx, call, false)
	if err != nil {
		return err
	}
	select {
	case <-call.signal:
		return call.Error
	case <-ctx.Done():
		if cc.abandon(call, ctx.Err()) {
			return &callError{call.ServiceMethod, ctx.Err()}
		}
		<-call.signal // the reply is being decoded right now
		return call.Error
	}
}

// start sends call on the current connection, dialing one if needed. For
// an async call (Client.Go), the connection also watches ctx.
func (c *Client) start(ctx context.Context, call *Call, async bool) (*clientConn, error) {
	if err := ctx.Err(); err != nil {
		return nil, &callError{call.ServiceMethod, err}
	}
	call.codec = c.opts.codec
	cc, err := c.conn(ctx)
	if err != nil {
		err = &callError{call.ServiceMethod, err}
		if !errors.Is(err, errClientClosed) {
			err = notSent{err}
		}
		return nil, err
	}
	if err := cc.send(ctx, call, async); err != nil {
		return nil, &callError{call.ServiceMethod, err}
	}
	return cc, nil
}

// Close closes the connection. Calls in flight fail with ErrShutdown, as
// do calls made after Close. Close waits for the client's goroutines.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrShutdown
	}
	c.closed = true
	cc := c.cc
	c.cc = nil
	c.live.Store(nil)
	dialing := c.dialing
	c.mu.Unlock()
	if dialing != nil {
		<-dialing // its caller sees closed and closes what it dialed
	}
	if cc != nil {
		cc.fail(errClientClosed)
	}
	c.wg.Wait()
	return nil
}

var errClientClosed = fmt.Errorf("%w: the client is closed", ErrShutdown)

// conn returns a live connection, dialing one if there is none. While a
// redial backoff runs it fails at once, so no call waits on a dead server.
func (c *Client) conn(ctx context.Context) (*clientConn, error) {
	if cc := c.live.Load(); cc != nil && !cc.dead.Load() {
		return cc, nil
	}
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, errClientClosed
		}
		if cc := c.cc; cc != nil && !cc.dead.Load() {
			c.mu.Unlock()
			return cc, nil
		}
		if ch := c.dialing; ch != nil {
			c.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if wait := time.Until(c.retryAt); wait > 0 {
			err := c.lastErr
			c.mu.Unlock()
			return nil, fmt.Errorf("%w: %s: %v (next redial in %v)", ErrUnavailable, c.addr, err, wait.Round(time.Millisecond))
		}
		ch := make(chan struct{})
		c.dialing = ch
		c.mu.Unlock()

		cc, err := c.dial(ctx)

		c.mu.Lock()
		c.dialing = nil
		close(ch)
		if err != nil {
			if ctx.Err() == nil { // the server failed, not the caller
				c.failures++
				c.retryAt = time.Now().Add(c.backoff())
				c.lastErr = err
			}
			c.mu.Unlock()
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		c.failures = 0
		if c.closed {
			c.mu.Unlock()
			cc.fail(errClientClosed)
			return nil, errClientClosed
		}
		c.cc = cc
		c.live.Store(cc)
		c.mu.Unlock()
		return cc, nil
	}
}

// backoff is the wait after c.failures failed dials in a row.
func (c *Client) backoff() time.Duration {
	d := c.opts.minBackoff << min(c.failures-1, 30)
	if d <= 0 || d > c.opts.maxBackoff {
		d = c.opts.maxBackoff
	}
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// dial opens and handshakes a connection, bounded by the dial timeout and
// by ctx.
func (c *Client) dial(ctx context.Context) (*clientConn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.dialTimeout)
	defer cancel()
	nc, err := c.opts.dialer(ctx, c.network, c.addr)
	if err != nil {
		return nil, err
	}
	cc, err := newClientConn(ctx, c, nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("kiev: handshake with %s: %w", c.addr, err)
	}
	return cc, nil
}

// callError wraps a client-side failure with the method it belongs to.
type callError struct {
	method string
	err    error
}

func (e *callError) Error() string {
	return "kiev: call " + e.method + ": " + strings.TrimPrefix(e.err.Error(), "kiev: ")
}

func (e *callError) Unwrap() error { return e.err }

// connError reports a connection that broke under a call.
type connError struct {
	addr  string
	cause error
}

func (e *connError) Error() string {
	return "kiev: connection to " + e.addr + " lost: " + e.cause.Error()
}

func (e *connError) Unwrap() []error { return []error{ErrShutdown, e.cause} }

package kiev

import (
	"context"
	"errors"
	"fmt"
	targets "github.com/kievrpc/kiev/internal/target"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/registry"
)

// Call is an RPC in progress or done, as in net/rpc. Client.Go returns one;
// client interceptors receive one.
type Call struct {
	ServiceMethod string     // "Service.Method"
	Args          any        // the arguments
	Reply         any        // the reply, filled when the call succeeds
	Error         error      // after completion, the call's error, if any
	Done          chan *Call // receives the Call when it completes (Go only)
	// Target names the Client making the call, as its metrics and status
	// page do: Dial's target, "conn " and the server's address for
	// NewClient, "net/rpc codec" for NewClientWithCodec. Client
	// interceptors read it (otelkiev's spans name the server with it).
	Target string

	id     uint64
	codec  codec.Codec
	signal chan *Call  // internal completion channel of Client.Call
	stop   func() bool // stops the context watch of Client.Go
	stream bool        // it opens a stream (Client.Stream)
	// A reply its caller decodes (connTransport.Reply): a copy of its
	// body, compressed with bodyAlg (0: none) from bodySize bytes.
	body     *[]byte
	bodyAlg  uint8
	bodySize uint64
	// hooks are the stream's observers, from its StreamDesc.
	hooks *streamHooks
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
	call.Error = shutdownErr(call.Error)
	select {
	case call.Done <- call:
	default:
		// The caller's Done channel is full; as in net/rpc the caller
		// must give it enough room, and the call is dropped.
	}
}

var callPool = sync.Pool{New: func() any { return &Call{signal: make(chan *Call, 1)} }}

// Client calls services over multiplexed connections: to one server, or
// to every provider of a service found in a registry, one connection
// each, balanced per call. Broken connections are redialed with backoff.
// A Client is safe for use by many goroutines at once; share one per
// server or service.
type Client struct {
	target string
	opts   dialOptions
	invoke Invoker
	budget retryBudget
	direct bool // Go may send without a goroutine: one server, no interceptors, retries or throttle
	// noRedial is set by NewClient: the client's one connection was made
	// elsewhere, and once it fails, calls fail with ErrShutdown.
	noRedial bool

	single *endpoint    // the server of Dial(address); nil when dialing a service
	group  *group       // the providers of Dial(service)
	rpcc   *codecClient // the codec of NewClientWithCodec; then single and group are nil

	mu     sync.Mutex // guards the fields below
	closed bool

	wg          sync.WaitGroup // goroutines of every connection and of the group
	packetStats packetCounters
	stats       callStats   // calls made, for metrics and the status page
	retries     retryCounts // retries sent, by reason
	// connEnded counts the calls pending on connections as they ended
	// (see connTransport.Lost).
	connEnded   connEndCounts
	streamStats streamStats // streams opened, and their messages
	// streamsLeaked counts streams dropped unclosed, which the garbage
	// collector found.
	streamsLeaked atomic.Int64
	hedge         hedgeState // hedging's policies and counts (see Hedging)
}

// Dial returns a Client for target, which is one of:
//
//   - a server's address: "ip:port" over TCP (also "tcp://host:port",
//     which dials one connection even to a host name), or
//     "unix:///path/to/socket". Dial returns once the connection and the
//     protocol handshake succeed.
//   - "host:port" whose host is a name, not an IP address: the same as
//     "dns:///host:port" below. Every address the name resolves to is a
//     provider, each with a connection of its own, balanced per call.
//   - "dns:///host:port", every A and AAAA record of host, or
//     "dns:///_service._tcp.domain", the targets of its SRV records, with
//     their ports and weights; "dns://10.0.0.10:53/..." asks that DNS
//     server. The client resolves the name again every 30 s
//     ("?interval=5s" sets another) and at once when it loses a
//     provider's connection; see package registry/dns.
//   - "udp://host:port": calls go over UDP, one datagram each way, from one
//     socket (see Server.ServePacket and Packet). There is no handshake:
//     Dial returns once the address resolves.
//   - a service name, such as "Arith": the client follows the providers of
//     the service in the registry given by WithRegistry, or else
//     DefaultRegistry, and balances calls over them (WithBalancer).
//   - "zookeeper://host:2181,host2:2181/Service", or with a root other
//     than "/kiev", "zookeeper://host:2181/team-a/kiev/Service": the
//     same, on a ZooKeeper registry (see registry/zookeeper) that the
//     client opens and closes itself. "?session_timeout=10s" sets its
//     session timeout.
//   - a URL of a registry scheme that an imported package registered
//     (see RegisterScheme), such as "etcd://host:2379/Service" with
//     github.com/kievrpc/kiev/registry/etcd imported: the same, on that
//     registry.
//
// A service client is returned at once, before any provider is known;
// calls wait within their context for one to register, for at most
// WithProviderWait (DefaultProviderWait, 10s), or fail at once with
// WithFailFast. On the in-memory default registry, which only this
// process's servers join, a bare target that reads as a host (an IP
// address, localhost, or a lower-case DNS name such as db.example.com)
// is refused at once with an error that says to write "host:PORT"; a
// service of such a name is dialed with
// WithRegistry(kiev.DefaultRegistry()). Calls that surely did not run are retried on another
// provider within a budget (see RetryPolicy), and the client throttles
// itself while a server keeps refusing (see Throttle).
func Dial(target string, opts ...DialOption) (*Client, error) {
	t, err := targets.Parse(target)
	if err != nil {
		return nil, err
	}
	c := &Client{target: target}
	for _, o := range opts {
		o.applyDial(&c.opts)
	}
	c.opts.fill()
	c.budget = newRetryBudget(c.opts.retry)
	c.invoke = chainClient(c.attempts, c.opts.interceptors)
	if t.Service == "" {
		c.single = newEndpoint(c, registry.Instance{Network: t.Network, Address: t.Addr})
		packet := isPacket(t.Network)
		// Go sends from the caller's goroutine on a connection; over UDP
		// the datagrams leave from a goroutine that retransmits them.
		c.direct = !packet && len(c.opts.interceptors) == 0 && c.budget.p.MaxAttempts == 1 && c.single.throttle == nil
		if _, err := c.single.open(context.Background()); err != nil {
			if packet { // no handshake: the address did not resolve, or no socket opened
				return nil, fmt.Errorf("kiev: Dial %q: %w", target, err)
			}
			return nil, err
		}
		trackClient(c)
		return c, nil
	}
	reg, own := c.opts.registry, false
	if reg == nil && t.Open == nil && defaultRegistry.Load() == nil {
		if err := targets.HostLike(target); err != nil {
			return nil, err
		}
	}
	switch {
	case t.Open != nil:
		if reg, err = t.Open(c.opts.logger); err != nil {
			return nil, fmt.Errorf("kiev: Dial %q: %w", target, err)
		}
		own = true
	case reg == nil:
		reg = DefaultRegistry()
	}
	if c.group, err = newGroup(c, t.Service, reg, own); err != nil {
		if own {
			reg.Close()
		}
		return nil, err
	}
	trackClient(c)
	return c, nil
}

// Providers reports the providers a service client knows, sorted by ID;
// it is empty for a client of one address.
func (c *Client) Providers() []Provider {
	if c.group == nil {
		return nil
	}
	return c.group.providers()
}

// Call calls serviceMethod ("Service.Method") with args, waits for the
// reply and decodes it into reply, a pointer (or nil to discard it). The
// deadline and cancellation of ctx travel to the server's handler. When
// ctx ends first, Call returns at once with ctx's error and tells the
// server to cancel the handler.
func (c *Client) Call(ctx context.Context, serviceMethod string, args, reply any) error {
	if err := checkReply(serviceMethod, reply); err != nil {
		return err
	}
	call := callPool.Get().(*Call)
	call.ServiceMethod, call.Args, call.Reply, call.Target = serviceMethod, args, reply, c.target
	err := c.invoke(ctx, call)
	*call = Call{signal: call.signal}
	callPool.Put(call)
	return shutdownErr(err)
}

// checkReply says why reply cannot take a call's reply, before the call is
// sent: found after the round trip, the mistake would come after the
// handler's side effects.
func checkReply(serviceMethod string, reply any) error {
	if reply == nil {
		return nil // the reply is discarded
	}
	if v := reflect.ValueOf(reply); v.Kind() != reflect.Pointer || v.IsNil() {
		return fmt.Errorf("kiev: %s: reply is %T, not a pointer the reply can be stored in; the call was not sent: pass a pointer (&reply), or nil to discard the reply", serviceMethod, reply)
	}
	return nil
}

// shutdownErr returns ErrShutdown itself for a call that failed because
// its client was closed, so that err == ErrShutdown holds, as in net/rpc;
// other errors as they are.
func shutdownErr(err error) error {
	if err != nil && err != ErrShutdown && errors.Is(err, errClientClosed) {
		return ErrShutdown
	}
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
	call := &Call{ServiceMethod: serviceMethod, Args: args, Reply: reply, Done: done, Target: c.target}
	if err := checkReply(serviceMethod, reply); err != nil {
		call.Error = err
		call.complete()
		return call
	}
	if !c.direct {
		if c.rpcc == nil && len(c.opts.interceptors) == 0 && c.hedgerFor(serviceMethod) == nil {
			c.goSent(ctx, call)
			return call
		}
		go func() {
			call.signal = make(chan *Call, 1)
			err := c.invoke(ctx, call)
			call.signal = nil
			call.Error = err
			call.complete()
		}()
		return call
	}
	if _, err := c.start(ctx, c.single, call, true); err != nil {
		call.Error = err
		call.complete()
	}
	return call
}

// roundTrip sends the call to ep and waits for its end.
func (c *Client) roundTrip(ctx context.Context, ep *endpoint, call *Call) error {
	t, err := c.start(ctx, ep, call, false)
	if err != nil {
		return err
	}
	return t.wait(ctx, call)
}

// start starts call on ep's transport, dialing a connection if needed.
// For an async call (Client.Go), the connection also watches ctx.
func (c *Client) start(ctx context.Context, ep *endpoint, call *Call, async bool) (clientTransport, error) {
	if err := ctx.Err(); err != nil {
		return nil, &callError{call.ServiceMethod, err}
	}
	if call.codec == nil { // else set by its maker, as NewMethod does
		call.codec = c.opts.codec
	}
	t, err := ep.open(ctx)
	if err != nil {
		err = &callError{call.ServiceMethod, err}
		if !errors.Is(err, errClientClosed) {
			err = notSent{err}
		}
		return nil, err
	}
	if err := t.send(ctx, call, async); err != nil {
		return nil, &callError{call.ServiceMethod, err}
	}
	return t, nil
}

// Close closes the client's connections and stops following the
// registry. Calls in flight fail with ErrShutdown, as do calls made after
// Close: the error is ErrShutdown itself, so err == kiev.ErrShutdown
// holds, as in net/rpc. Close waits for the client's goroutines; closing
// a closed client returns ErrShutdown.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrShutdown
	}
	c.closed = true
	c.mu.Unlock()
	untrackClient(c)
	switch {
	case c.single != nil:
		c.single.close(errClientClosed, false)
	case c.group != nil:
		c.group.close()
	default:
		c.rpcc.close()
	}
	c.wg.Wait()
	return nil
}

var errClientClosed = fmt.Errorf("%w: the client is closed", ErrShutdown)

// ejected tells the balancer that ep is out of balancing for a while.
func (c *Client) ejected(ep *endpoint) {
	if c.group != nil {
		c.group.ejected(ep)
	}
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

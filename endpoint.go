package kiev

import (
	"context"
	"errors"
	"fmt"
	"github.com/kievrpc/kiev/internal/throttle"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/registry"
)

// endpoint is one server a Client calls: its transport (a connection,
// redialed with backoff when it breaks, or a UDP socket), and for a
// Client over many providers, the health record that ejects it from
// balancing while it misbehaves.
type endpoint struct {
	c        *Client
	inst     registry.Instance // Network and Address are always set
	id       string
	throttle *[MaxPriority + 1]throttle.Throttler
	// methods holds, for the methods this server refused at their
	// adaptive limit (ErrLimited), a throttle of their own: such a
	// refusal says the method is slow, not the server, which the other
	// methods' calls go on to.
	methods  sync.Map    // ServiceMethod → *[MaxPriority + 1]throttle.Throttler
	limited  atomic.Bool // methods holds any
	inflight atomic.Int64
	streams  atomic.Int64 // streams open
	weight   atomic.Int32 // inst.Weight, which the registry may change
	stats    callStats    // calls sent to this server

	live atomic.Pointer[clientTransport] // t, for the fast path

	mu        sync.Mutex      // guards the fields below
	t         clientTransport // made on first use, and again once it is no longer usable
	closed    bool
	closeErr  error         // why it closed: errClientClosed, or its provider left (retried elsewhere)
	dialing   chan struct{} // closed when the dial in progress ends
	failures  int           // failed dials in a row
	retryAt   time.Time     // no dial before this
	lastErr   error
	ejections int       // ejections in a row, each longer
	ejectEnd  time.Time // out of balancing until then

	streak     atomic.Int32  // calls failed in a row, for outlier ejection
	wasEjected atomic.Bool   // ejections > 0
	unlisted   atomic.Bool   // kept while connected, though the registry lists it no more
	notServing atomic.Bool   // its health service says it does not serve (WithHealthCheck)
	gone       chan struct{} // closed by close
}

func newEndpoint(c *Client, inst registry.Instance) *endpoint {
	ep := &endpoint{c: c, inst: inst, id: inst.ID(), throttle: newThrottlers(c.opts.throttle), gone: make(chan struct{})}
	ep.weight.Store(int32(inst.Weight))
	return ep
}

// methodThrottle returns method's throttle for priority p on ep, nil if
// ep never refused the method at its limit; with create, it makes one.
func (ep *endpoint) methodThrottle(method string, p Priority, create bool) *throttle.Throttler {
	if ep.throttle == nil || !create && !ep.limited.Load() {
		return nil
	}
	v, ok := ep.methods.Load(method)
	if !ok {
		if !create {
			return nil
		}
		v, _ = ep.methods.LoadOrStore(method, newThrottlers(ep.c.opts.throttle))
		ep.limited.Store(true)
	}
	return &v.(*[MaxPriority + 1]throttle.Throttler)[p]
}

// ID, Weight and InFlight make an endpoint a balance.Node.
func (ep *endpoint) ID() string    { return ep.id }
func (ep *endpoint) Weight() int   { return max(int(ep.weight.Load()), 1) }
func (ep *endpoint) InFlight() int { return int(ep.inflight.Load()) }
func (ep *endpoint) Streams() int  { return int(ep.streams.Load()) }

// open returns a usable transport, dialing a connection (or opening a
// socket) if there is none. While a redial backoff runs it fails at once,
// so no call waits on a dead server.
func (ep *endpoint) open(ctx context.Context) (clientTransport, error) {
	if t := ep.live.Load(); t != nil && (*t).usable() {
		return *t, nil
	}
	for {
		ep.mu.Lock()
		if ep.closed {
			err := ep.closeErr
			ep.mu.Unlock()
			return nil, err
		}
		if t := ep.t; t != nil && t.usable() {
			ep.mu.Unlock()
			return t, nil
		}
		if ep.c.noRedial {
			t := ep.t
			ep.mu.Unlock()
			return nil, fmt.Errorf("%w: the connection given to NewClient has failed (%v), and a client made by NewClient does not redial; make a new one, or use Dial", ErrShutdown, t.failure())
		}
		if ch := ep.dialing; ch != nil {
			ep.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if ep.unlisted.Load() {
			ep.mu.Unlock()
			return nil, fmt.Errorf("%w: provider %s is no longer registered and its connection ended", ErrUnavailable, ep.inst.Address)
		}
		if wait := time.Until(ep.retryAt); wait > 0 {
			err := ep.lastErr
			ep.mu.Unlock()
			return nil, fmt.Errorf("%w: %s: %v (next redial in %v)", ErrUnavailable, ep.inst.Address, err, wait.Round(time.Millisecond))
		}
		ch := make(chan struct{})
		ep.dialing = ch
		ep.mu.Unlock()

		t, err := ep.dial(ctx)

		ep.mu.Lock()
		ep.dialing = nil
		close(ch)
		if err != nil {
			failed := ctx.Err() == nil // the server failed, not the caller
			if failed {
				ep.failures++
				ep.retryAt = time.Now().Add(ep.backoff())
				ep.lastErr = err
			}
			ep.mu.Unlock()
			if failed {
				ep.c.ejected(ep)
			}
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		ep.failures = 0
		if ep.closed {
			err := ep.closeErr
			ep.mu.Unlock()
			t.close(err, false)
			return nil, err
		}
		ep.setTransport(t)
		ep.mu.Unlock()
		return t, nil
	}
}

// backoff is the wait after ep.failures failed dials in a row.
func (ep *endpoint) backoff() time.Duration {
	o := &ep.c.opts
	d := o.minBackoff << min(ep.failures-1, 30)
	if d <= 0 || d > o.maxBackoff {
		d = o.maxBackoff
	}
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// setTransport makes t the endpoint's transport. REQUIRES ep.mu.
func (ep *endpoint) setTransport(t clientTransport) {
	ep.t = t
	ep.live.Store(&t)
}

// dial makes a new transport: it opens a socket for a UDP endpoint, or
// opens and handshakes a connection, bounded by the dial timeout and by
// ctx.
func (ep *endpoint) dial(ctx context.Context) (clientTransport, error) {
	if isPacket(ep.inst.Network) {
		return dialPacket(ep)
	}
	ctx, cancel := context.WithTimeout(ctx, ep.c.opts.dialTimeout)
	defer cancel()
	nc, err := ep.c.opts.dialer(ctx, ep.inst.Network, ep.inst.Address)
	if err != nil {
		return nil, err
	}
	if cfg := ep.c.opts.tls; cfg != nil {
		tc, err := tlsClient(ctx, cfg, nc, ep.tlsAddr())
		if err != nil {
			nc.Close()
			return nil, err
		}
		nc = tc
	}
	t, err := dialConn(ctx, ep, nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("kiev: handshake with %s: %w", ep.inst.Address, err)
	}
	return t, nil
}

// close fails the endpoint's transport and every call on it with err.
// With graceful set, calls in flight finish first, and only new calls
// fail.
func (ep *endpoint) close(err error, graceful bool) {
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		return
	}
	ep.closed = true
	ep.closeErr = err
	close(ep.gone)
	t := ep.t
	ep.t = nil
	ep.live.Store(nil)
	dialing := ep.dialing
	ep.mu.Unlock()
	if dialing != nil {
		<-dialing // its caller sees closed and closes what it dialed
	}
	if t != nil {
		t.close(err, graceful)
	}
}

// record notes the outcome of a call sent to ep, and ejects ep from
// balancing when its calls keep failing in a way that blames the
// provider rather than the call. Successes cost two atomic loads.
func (ep *endpoint) record(err error) {
	if err == nil || !providerFault(err) {
		if ep.streak.Load() != 0 {
			ep.streak.Store(0)
		}
		if ep.wasEjected.Load() {
			ep.mu.Lock()
			ep.ejections = 0
			ep.wasEjected.Store(false)
			ep.mu.Unlock()
		}
		return
	}
	o := &ep.c.opts.outlier
	if o.Disabled || ep.streak.Add(1) < int32(o.Failures) {
		return
	}
	ep.mu.Lock()
	if time.Now().Before(ep.ejectEnd) {
		ep.mu.Unlock()
		return
	}
	ep.streak.Store(0)
	d := min(o.Ejection<<min(ep.ejections, 16), o.MaxEjection)
	ep.ejections++
	ep.wasEjected.Store(true)
	ep.ejectEnd = time.Now().Add(d)
	ep.mu.Unlock()
	ep.c.opts.logger.Warn("kiev: provider ejected from balancing", "service", ep.inst.Service, "addr", ep.inst.Address, "for", d, "err", err)
	ep.c.ejected(ep)
}

// ejectedUntil reports until when ep is out of balancing.
func (ep *endpoint) ejectedUntil() time.Time {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.retryAt.After(ep.ejectEnd) {
		return ep.retryAt
	}
	return ep.ejectEnd
}

// providerFault reports whether err blames the provider: it could not be
// reached, its connection broke, it failed internally, it refused the call
// for overload, or it left a sent call unanswered past the deadline. A
// provider that refuses a few calls among successes stays, and its
// throttle sheds load for it; one that refuses every call leaves
// balancing for a while, so its share goes to the others. A refusal at a
// method's adaptive limit (ErrLimited) blames the method, not the
// provider.
func providerFault(err error) bool {
	if errors.Is(err, ErrLimited) {
		return false // the method is slow, not the provider
	}
	var se *ServerError
	if errors.As(err, &se) {
		return se.Code == CodeInternal || se.Code == CodeOverloaded
	}
	var ns notSent
	if errors.As(err, &ns) {
		return errors.Is(err, ErrUnavailable)
	}
	return errors.Is(err, ErrShutdown) || errors.Is(err, context.DeadlineExceeded)
}

// goAway takes ep out of balancing while its server drains.
func (ep *endpoint) goAway() {
	ep.mu.Lock()
	ep.ejectEnd = time.Now().Add(ep.c.opts.outlier.Ejection)
	ep.mu.Unlock()
	ep.c.ejected(ep)
}

// connected reports whether ep has a connection open for new calls.
func (ep *endpoint) connected() bool {
	t := ep.live.Load()
	return t != nil && (*t).connected()
}

// lost notes that ep's connection ended with cause.
func (ep *endpoint) lost(cause error, draining bool) {
	if g := ep.c.group; g != nil && !errors.Is(cause, errClientClosed) {
		g.resolveNow() // a provider found in DNS may have gone
	}
	switch {
	case ep.unlisted.Load():
		ep.c.ejected(ep)
	case ep.c.group == nil || draining || errors.Is(cause, ErrShutdown):
		// One server, a graceful close, or the client closing it.
	default:
		// The provider broke, or went silent past the heartbeat timeout:
		// give its share to the others for a while rather than make calls
		// wait on a redial to it.
		ep.mu.Lock()
		if end := time.Now().Add(ep.c.opts.outlier.Ejection); end.After(ep.ejectEnd) {
			ep.ejectEnd = end
		}
		ep.mu.Unlock()
		ep.c.ejected(ep)
	}
}

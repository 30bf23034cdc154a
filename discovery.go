package kiev

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/balance"
	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/registry/dns"
	"github.com/kievrpc/kiev/registry/memory"
)

var defaultRegistry atomic.Pointer[registry.Registry]

var memoryDefault = sync.OnceValue(func() registry.Registry { return memory.New() })

// DefaultRegistry returns the process's default registry: the one set by
// SetDefaultRegistry, or else an in-memory registry, so that servers and
// clients in one process find each other by name with nothing to run.
// Servers made without WithRegistry register there, and Dial of a bare
// service name watches it.
func DefaultRegistry() registry.Registry {
	if r := defaultRegistry.Load(); r != nil {
		return *r
	}
	return memoryDefault()
}

// SetDefaultRegistry makes r the process's default registry, e.g. a
// ZooKeeper registry made once in main. Servers already serving stay
// registered where they were.
func SetDefaultRegistry(r registry.Registry) {
	defaultRegistry.Store(&r)
}

type hashKey struct{}

// WithHashKey returns a copy of ctx whose calls carry key for a
// consistent-hash balancer (see balance.ConsistentHash): calls with the
// same key go to the same provider while it is there. Balancers that do
// not hash ignore it. The key travels no further than the client.
func WithHashKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, hashKey{}, key)
}

// HashKeyFrom returns the key set by WithHashKey.
func HashKeyFrom(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(hashKey{}).(string)
	return k, ok
}

// Provider describes one provider of a Client's service, as
// Client.Providers reports it.
type Provider struct {
	Instance registry.Instance
	// Ejected is set while the provider is out of balancing, because its
	// calls kept failing or it could not be dialed; EjectedUntil says
	// until when.
	Ejected      bool
	EjectedUntil time.Time
	// InFlight is the number of calls sent to it and not yet answered.
	InFlight int
	// Unlisted is set for a provider the registry no longer lists but the
	// client still calls: when the registry lists no provider at all, the
	// client keeps calling those it is connected to until their
	// connections end.
	Unlisted bool
	// NotServing is set while the provider's health service says it
	// does not serve (WithHealthCheck); it is out of balancing meanwhile.
	NotServing bool
}

// group is the changing set of providers of one service, kept up to date
// from a registry Watcher, and the Picker over those that are usable.
type group struct {
	c       *Client
	service string
	reg     registry.Registry
	ownReg  bool // made by Dial from the target; closed with the client
	watcher registry.Watcher
	cancel  context.CancelFunc

	mu           sync.Mutex  // guards the fields below
	endpoints    []*endpoint // sorted by ID
	closed       bool
	watchErr     error     // the watcher's last error, nil once it lists a set
	failingSince time.Time // when watchErr began
	updated      time.Time // when the watcher last listed a set

	state atomic.Pointer[pickState]
}

// pickState is what calls pick from; it is replaced, never changed.
type pickState struct {
	picker   balance.Picker // nil when no provider is known
	ready    []*endpoint    // the endpoints the picker covers
	resolved bool           // the registry has answered at least once
	closed   bool
	expires  int64         // UnixNano when an ejection ends and the state must be rebuilt; 0 for never
	changed  chan struct{} // closed when the state is replaced
}

func newGroup(c *Client, service string, reg registry.Registry, ownReg bool) (*group, error) {
	g := &group{c: c, service: service, reg: reg, ownReg: ownReg}
	g.state.Store(&pickState{changed: make(chan struct{})})
	ctx, cancel := context.WithCancel(context.Background())
	w, err := reg.Watch(ctx, service)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("kiev: Dial %s: watching the registry: %w", service, err)
	}
	g.watcher, g.cancel = w, cancel
	c.wg.Go(func() { g.follow(ctx) })
	return g, nil
}

// follow applies every provider set the watcher reports until the group
// closes.
func (g *group) follow(ctx context.Context) {
	wait := time.Duration(0)
	for {
		set, err := g.watcher.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, registry.ErrStopped) || errors.Is(err, registry.ErrClosed) {
				return
			}
			wait = min(max(2*wait, 100*time.Millisecond), 5*time.Second)
			g.watched(err)
			g.c.opts.logger.Warn("kiev: watching providers failed; keeping the last known set", "service", g.service, "err", err, "retry_in", wait)
			select {
			case <-time.After(wait):
				continue
			case <-ctx.Done():
				return
			}
		}
		wait = 0
		g.watched(nil)
		g.update(set)
	}
}

// update replaces the provider set. Endpoints that stay keep their
// connections; those that leave finish the calls they have in flight.
func (g *group) update(set []registry.Instance) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	old := make(map[string]*endpoint, len(g.endpoints))
	for _, ep := range g.endpoints {
		old[ep.id] = ep
	}
	next := make([]*endpoint, 0, len(set))
	for _, in := range set {
		if !g.usable(in) {
			continue
		}
		if ep, ok := old[in.ID()]; ok {
			ep.weight.Store(int32(in.Weight))
			delete(old, in.ID())
			next = append(next, ep)
			continue
		}
		ep := newEndpoint(g.c, in)
		if iv := g.c.opts.healthInterval; iv > 0 {
			g.c.wg.Go(func() { ep.watchHealth(iv) })
		}
		next = append(next, ep)
	}
	if len(next) == 0 && len(old) > 0 {
		// The registry lists no provider at all. That is what a
		// ZooKeeper outage that expired the providers' sessions looks
		// like, while they serve on; so keep those still connected, until
		// their connections end, rather than fail every call.
		for id, ep := range old {
			if ep.connected() {
				ep.unlisted.Store(true)
				next = append(next, ep)
				delete(old, id)
			}
		}
		slices.SortFunc(next, func(a, b *endpoint) int { return strings.Compare(a.id, b.id) })
		if len(next) > 0 {
			g.c.opts.logger.Warn("kiev: the registry lists no provider; calling those still connected until their connections end", "service", g.service, "connected", len(next))
		}
	} else {
		for _, ep := range next {
			ep.unlisted.Store(false)
		}
	}
	for _, ep := range old {
		g.retire(ep)
	}
	g.endpoints = next
	g.c.opts.logger.Info("kiev: providers changed", "service", g.service, "providers", len(next))
	g.rebuild(true)
}

// retire closes ep once its calls in flight end; g.mu is held.
func (g *group) retire(ep *endpoint) {
	g.c.wg.Go(func() {
		ep.close(fmt.Errorf("%w: provider %s left service %s", ErrShutdown, ep.inst.Address, g.service), true)
	})
}

// usable reports whether the client can call in.
func (g *group) usable(in registry.Instance) bool {
	switch in.Network {
	case "tcp", "tcp4", "tcp6", "unix", "udp", "udp4", "udp6":
	default:
		g.c.opts.logger.Warn("kiev: provider skipped: this client cannot reach its network", "service", g.service, "id", in.ID())
		return false
	}
	if len(in.Codecs) > 0 && !slices.Contains(in.Codecs, g.c.opts.codec.Name()) {
		g.c.opts.logger.Warn("kiev: provider skipped: it does not accept the client's codec", "service", g.service, "id", in.ID(), "codec", g.c.opts.codec.Name(), "accepts", in.Codecs)
		return false
	}
	return true
}

// rebuild makes a new pickState from the endpoints that are not ejected.
// If every endpoint is ejected, all are used: a provider that may be
// broken is better than none. g.mu is held.
func (g *group) rebuild(resolved bool) {
	prev := g.state.Load()
	now := time.Now()
	st := &pickState{resolved: resolved || prev.resolved, closed: g.closed, changed: make(chan struct{})}
	var next time.Time
	g.endpoints = slices.DeleteFunc(g.endpoints, func(ep *endpoint) bool {
		if ep.unlisted.Load() && !ep.connected() {
			g.retire(ep)
			return true
		}
		return false
	})
	for _, ep := range g.endpoints {
		if ep.notServing.Load() {
			continue // until its health service says it serves
		}
		if until := ep.ejectedUntil(); until.After(now) {
			if next.IsZero() || until.Before(next) {
				next = until
			}
			continue
		}
		st.ready = append(st.ready, ep)
	}
	if len(st.ready) == 0 {
		st.ready = g.endpoints
	}
	if !next.IsZero() {
		st.expires = next.UnixNano()
	}
	if len(st.ready) > 0 && !g.closed {
		nodes := make([]balance.Node, len(st.ready))
		for i, ep := range st.ready {
			nodes[i] = ep
		}
		st.picker = g.c.opts.balancer.Build(nodes)
	}
	g.state.Store(st)
	close(prev.changed)
}

// ejected rebuilds the picker after ep left balancing for a while, or
// lost its connection while unlisted.
func (g *group) ejected(ep *endpoint) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed && slices.Contains(g.state.Load().ready, ep) {
		g.rebuild(false)
	}
}

// reconsider rebuilds the picker after ep's health service changed its
// answer: out of balancing or back in.
func (g *group) reconsider() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.rebuild(false)
	}
}

// refresh rebuilds the state once an ejection has ended.
func (g *group) refresh(st *pickState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state.Load() == st && !g.closed {
		g.rebuild(false)
	}
}

// pick chooses the endpoint for one attempt of call, avoiding those the
// call has tried if another is ready. While no provider is known it waits
// within ctx, unless the client fails fast.
func (g *group) pick(ctx context.Context, call *Call, tried *triedSet) (*endpoint, func(error), error) {
	var bound <-chan time.Time // the provider wait, set when the wait starts
	for {
		st := g.state.Load()
		if st.expires != 0 && time.Now().UnixNano() >= st.expires {
			g.refresh(st)
			continue
		}
		if st.closed {
			return nil, nil, errClientClosed
		}
		if st.picker == nil {
			if st.resolved && g.c.opts.failFast {
				return nil, nil, notSent{fmt.Errorf("%w: no provider of service %s is registered (fail-fast client)", ErrUnavailable, g.service)}
			}
			if bound == nil && g.c.opts.providerWait > 0 {
				t := time.NewTimer(g.c.opts.providerWait)
				defer t.Stop()
				bound = t.C
			}
			select {
			case <-st.changed:
				continue
			case <-ctx.Done():
				return nil, nil, fmt.Errorf("%w while waiting for a provider of service %s to register %s%s", ctx.Err(), g.service, g.where(), g.watchFailure())
			case <-bound:
				return nil, nil, fmt.Errorf("%w: no provider of service %s registered within %v (WithProviderWait) %s%s; %s", ErrUnavailable, g.service, g.c.opts.providerWait, g.where(), g.watchFailure(), g.hint())
			}
		}
		info := balance.Info{ServiceMethod: call.ServiceMethod, Stream: call.stream}
		info.HashKey, info.HasKey = HashKeyFrom(ctx)
		res, err := st.picker.Pick(info)
		if err != nil {
			return nil, nil, notSent{fmt.Errorf("%w: balancer %s: %w", ErrUnavailable, g.c.opts.balancer.Name(), err)}
		}
		ep, ok := res.Node.(*endpoint)
		if !ok {
			return nil, nil, fmt.Errorf("kiev: balancer %s picked %T, not one of the nodes it was given", g.c.opts.balancer.Name(), res.Node)
		}
		if tried.has(ep) {
			for _, alt := range st.ready {
				if !tried.has(alt) {
					ep, res.Done = alt, nil
					break
				}
			}
		}
		return ep, res.Done, nil
	}
}

// close stops following the registry and closes every endpoint.
func (g *group) close() {
	g.cancel()
	g.watcher.Stop()
	g.mu.Lock()
	g.closed = true
	eps := g.endpoints
	g.endpoints = nil
	g.rebuild(false)
	g.mu.Unlock()
	for _, ep := range eps {
		ep.close(errClientClosed, false)
	}
	if g.ownReg {
		g.reg.Close()
	}
}

func (g *group) providers() []Provider {
	g.mu.Lock()
	eps := slices.Clone(g.endpoints)
	g.mu.Unlock()
	now := time.Now()
	ps := make([]Provider, len(eps))
	for i, ep := range eps {
		until := ep.ejectedUntil()
		ps[i] = Provider{Instance: ep.inst, InFlight: ep.InFlight(), Unlisted: ep.unlisted.Load(), NotServing: ep.notServing.Load()}
		if until.After(now) {
			ps[i].Ejected, ps[i].EjectedUntil = true, until
		}
		ps[i].Instance.Weight = ep.Weight()
	}
	return ps
}

// triedSet remembers the endpoints a call has tried, so retries go
// elsewhere.
type triedSet struct {
	eps [3]*endpoint
	n   int
}

func (t *triedSet) add(ep *endpoint) {
	if t.n < len(t.eps) {
		t.eps[t.n] = ep
		t.n++
	}
}

func (t *triedSet) has(ep *endpoint) bool {
	for _, e := range t.eps[:t.n] {
		if e == ep {
			return true
		}
	}
	return false
}

// where names the registry a group follows, for its errors.
func (g *group) where() string {
	if _, ok := g.reg.(*dns.Registry); ok {
		return "in DNS"
	}
	if g.reg == memoryDefault() {
		return "in this process's in-memory default registry (only servers in this process register there: to find servers elsewhere, use WithRegistry, SetDefaultRegistry or a zookeeper:// target)"
	}
	return fmt.Sprintf("in its registry (%T)", g.reg)
}

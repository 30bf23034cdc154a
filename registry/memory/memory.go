// Package memory is an in-process registry.Registry: the embedded
// default, so that servers and clients in one process find each other
// with no server to run.
package memory

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/kievrpc/kiev/registry"
)

// Registry is an in-memory registry.Registry. Registries made by New are
// independent; Connect gives another view of the same one, as a second
// process connecting to the same ZooKeeper would have.
type Registry struct {
	b *backend

	mu     sync.Mutex
	mine   map[key]registry.Instance // registrations made through this view
	closed bool
	done   chan struct{}
}

type key struct{ service, id string }

// backend holds the providers of every service.
type backend struct {
	mu       sync.Mutex
	services map[string]map[string]registry.Instance // service -> ID -> instance
	changed  map[string]chan struct{}                // closed and replaced when a service changes
}

var _ registry.Registry = (*Registry)(nil)

// New returns an empty in-memory registry.
func New() *Registry {
	return newView(&backend{
		services: make(map[string]map[string]registry.Instance),
		changed:  make(map[string]chan struct{}),
	})
}

func newView(b *backend) *Registry {
	return &Registry{b: b, mine: make(map[key]registry.Instance), done: make(chan struct{})}
}

// Connect returns another Registry over the same providers. Its Close
// withdraws only the registrations made through it.
func (r *Registry) Connect() *Registry { return newView(r.b) }

// Register publishes in; it never blocks.
func (r *Registry) Register(ctx context.Context, in registry.Instance) error {
	if err := in.Validate(); err != nil {
		return err
	}
	in = clone(in)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return registry.ErrClosed
	}
	r.mine[key{in.Service, in.ID()}] = in
	r.b.put(in)
	return nil
}

// Deregister withdraws the instance with in's Service and ID.
func (r *Registry) Deregister(ctx context.Context, in registry.Instance) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return registry.ErrClosed
	}
	k := key{in.Service, in.ID()}
	delete(r.mine, k)
	r.b.remove(k)
	return nil
}

// Close withdraws the registrations made through r, all at once, as the
// expiry of a ZooKeeper session deletes its nodes in one transaction: a
// watcher sees them all gone, never some. It ends r's Watchers.
func (r *Registry) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	close(r.done)
	r.b.remove(slices.Collect(maps.Keys(r.mine))...)
	r.mine = nil
	return nil
}

// Watch follows the providers of service.
func (r *Registry) Watch(ctx context.Context, service string) (registry.Watcher, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, registry.ErrClosed
	}
	return &watcher{r: r, service: service, stop: make(chan struct{})}, nil
}

func (b *backend) put(in registry.Instance) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.services[in.Service]
	if m == nil {
		m = make(map[string]registry.Instance)
		b.services[in.Service] = m
	}
	if old, ok := m[in.ID()]; ok && old.Equal(in) {
		return
	}
	m[in.ID()] = in
	b.notify(in.Service)
}

// remove withdraws the instances of keys together: watchers wake once
// they are all gone.
func (b *backend) remove(keys ...key) {
	b.mu.Lock()
	defer b.mu.Unlock()
	changed := map[string]bool{}
	for _, k := range keys {
		if _, ok := b.services[k.service][k.id]; ok {
			delete(b.services[k.service], k.id)
			changed[k.service] = true
		}
	}
	for service := range changed {
		b.notify(service)
	}
}

// notify wakes the watchers of service; b.mu is held.
func (b *backend) notify(service string) {
	if ch, ok := b.changed[service]; ok {
		close(ch)
		delete(b.changed, service)
	}
}

// snapshot returns the providers of service, sorted, and a channel closed
// at the next change.
func (b *backend) snapshot(service string) ([]registry.Instance, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	set := make([]registry.Instance, 0, len(b.services[service]))
	for _, in := range b.services[service] {
		set = append(set, clone(in))
	}
	registry.Sort(set)
	ch, ok := b.changed[service]
	if !ok {
		ch = make(chan struct{})
		b.changed[service] = ch
	}
	return set, ch
}

type watcher struct {
	r       *Registry
	service string
	last    []registry.Instance
	started bool

	stop     chan struct{}
	stopOnce sync.Once
}

func (w *watcher) Next(ctx context.Context) ([]registry.Instance, error) {
	for {
		select {
		case <-w.stop:
			return nil, registry.ErrStopped
		case <-w.r.done:
			return nil, registry.ErrClosed
		default:
		}
		set, changed := w.r.b.snapshot(w.service)
		if !w.started || !registry.SameSet(set, w.last) {
			w.started = true
			w.last = set
			return slices.Clone(set), nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-w.stop:
			return nil, registry.ErrStopped
		case <-w.r.done:
			return nil, registry.ErrClosed
		}
	}
}

func (w *watcher) Stop() { w.stopOnce.Do(func() { close(w.stop) }) }

// clone copies in deeply, so callers cannot change what is stored.
func clone(in registry.Instance) registry.Instance {
	in.Codecs = slices.Clone(in.Codecs)
	if in.Metadata != nil {
		m := make(map[string]string, len(in.Metadata))
		for k, v := range in.Metadata {
			m[k] = v
		}
		in.Metadata = m
	}
	return in
}

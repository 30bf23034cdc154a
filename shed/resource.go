package shed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Errors a Resource returns.
var (
	// ErrResourceBusy: the call could not get a slot of the resource
	// before its deadline, with time left to use it, so it was not given
	// one; the work it would have started would have been wasted. The
	// handler should answer at once, so the caller can go elsewhere:
	// a kiev handler that returns it answers the call as overloaded
	// (the caller sees kiev.ErrOverloaded).
	ErrResourceBusy = errors.New("kiev: resource busy: no slot could be had in time to finish before the call's deadline; answer the call now (overloaded) so its caller can retry elsewhere")
	// ErrResourceClosed: the resource was closed.
	ErrResourceClosed = errors.New("kiev: resource closed: Acquire was called after Close")
)

// TaskKey is the context key under which a handler's context carries the
// Task it runs for, a kiev server's call: ctx.Value(TaskKey{}) returns
// it. A Resource reads the call's priority, deadline and method from it.
// Use WithTask to set it outside a kiev server.
type TaskKey struct{}

// WithTask returns a context that carries t for Resources.
func WithTask(ctx context.Context, t Task) context.Context {
	return context.WithValue(ctx, TaskKey{}, t)
}

// taskFrom returns the Task ctx carries, or nil.
func taskFrom(ctx context.Context) Task {
	t, _ := ctx.Value(TaskKey{}).(Task)
	return t
}

// Resource is a dependency's slots, a connection pool say, that handlers
// acquire before they use it. Where a pool hides its queue (calls wait
// for a connection in the order they came, and start whether or not they
// can still finish), a Resource shows it to the scheduler:
//
//   - Slots are granted highest priority first, oldest first within a
//     priority.
//   - A call that cannot get a slot in time to use it before its deadline
//     (its wait predicted from the calls ahead of it and how long a slot
//     is held, plus that hold) is refused before it acquires one
//     (ErrResourceBusy), and a waiting call is refused as soon as it no
//     longer can: no slot is given to work that would be wasted.
//   - A method whose calls acquire a Resource is bounded by twice the
//     Resource's capacity (its slots in use and one round waiting), from
//     the first call that acquires it: in place of the slow start while
//     its adaptive limit is off, and as the limit's ceiling once it is
//     on. The Resource says how many calls the dependency serves at
//     once; more would wait inside the handler, each on a goroutine.
//
// A handler learns its call's priority, deadline and method from its ctx
// (see TaskKey); a ctx without a Task acquires at priority 5, by its
// deadline if it has one. The zero value is not usable: create one with
// NewResource. A Resource is safe for concurrent use.
type Resource struct {
	name     string
	capacity int
	hold     ServiceTime // how long a slot is held

	mu      sync.Mutex // guards the fields below
	used    int
	waiting [Levels][]*waiter
	n       int
	closed  bool
}

// waiter is a call waiting for a slot.
type waiter struct {
	ready    chan error // nil: granted; receives once
	deadline time.Time  // zero if none
}

// NewResource returns a Resource of capacity slots, named for errors and
// stats. It panics if capacity is below 1.
func NewResource(name string, capacity int) *Resource {
	if capacity < 1 {
		panic(fmt.Sprintf("shed: NewResource(%q, %d): the capacity must be at least 1 slot", name, capacity))
	}
	return &Resource{name: name, capacity: capacity}
}

// ResourceStats is a Resource's state.
type ResourceStats struct {
	Name            string
	Capacity, InUse int
	Waiting         int
	Hold            time.Duration // how long a slot is held, a moving average
}

// Stats returns the resource's state.
func (r *Resource) Stats() ResourceStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return ResourceStats{Name: r.name, Capacity: r.capacity, InUse: r.used, Waiting: r.n, Hold: time.Duration(r.hold.avg.Load())}
}

// Acquire takes a slot for the call ctx belongs to, waiting in priority
// order, and returns it, to be released (Slot.Release) once it is no
// longer used. It returns ErrResourceBusy if no slot can
// be had in time to use it before ctx's deadline, ctx's error if ctx
// ends first, and ErrResourceClosed after Close.
func (r *Resource) Acquire(ctx context.Context) (Slot, error) {
	if err := ctx.Err(); err != nil {
		return Slot{}, err
	}
	p, deadline, hasDeadline := DefaultResourcePriority, time.Time{}, false
	if t := taskFrom(ctx); t != nil {
		p = clamp(t.Priority())
		if c := t.Cost(); c != nil && c.lim.res.Load() != r {
			c.lim.res.Store(r) // once: a store per Acquire would bounce the line between CPUs
		}
	}
	deadline, hasDeadline = ctx.Deadline()
	now := time.Now()
	if hasDeadline && now.Add(r.expectedHold()).After(deadline) {
		// Too late to use a slot even if one is free: a context whose
		// deadline passed may not have been canceled yet.
		return Slot{}, ErrResourceBusy
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return Slot{}, ErrResourceClosed
	}
	if r.used < r.capacity && r.n == 0 {
		r.used++
		r.mu.Unlock()
		return r.slot(now), nil
	}
	if hasDeadline && now.Add(r.predict(p)).After(deadline) {
		r.mu.Unlock()
		return Slot{}, ErrResourceBusy
	}
	w := &waiter{ready: make(chan error, 1), deadline: deadline}
	r.waiting[p] = append(r.waiting[p], w)
	r.n++
	r.mu.Unlock()
	var expire <-chan time.Time
	if hasDeadline {
		// Once it can no longer use a slot before its deadline, it is
		// refused.
		timer := time.NewTimer(max(deadline.Sub(now)-r.expectedHold(), 0))
		defer timer.Stop()
		expire = timer.C
	}
	var err error
	select {
	case err = <-w.ready:
		if err != nil {
			return Slot{}, err
		}
		return r.slot(time.Now()), nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-expire:
		err = ErrResourceBusy
	}
	if r.leave(p, w) {
		return Slot{}, err
	}
	// Granted meanwhile: pass the slot on.
	if e := <-w.ready; e == nil {
		r.release(0)
	}
	return Slot{}, err
}

// DefaultResourcePriority is the priority a ctx without a Task acquires
// at.
const DefaultResourcePriority = 5

// predict is how long a call of priority p arriving now would take to
// get a slot and use it: a slot frees every hold time over the capacity,
// and the calls queued at p or above go first. REQUIRES r.mu is held.
func (r *Resource) predict(p int) time.Duration {
	ahead := 0
	for level := p; level < Levels; level++ {
		ahead += len(r.waiting[level])
	}
	hold := r.expectedHold()
	return time.Duration(ahead+1)*hold/time.Duration(r.capacity) + hold
}

// expectedHold is how long a slot is held, once known.
func (r *Resource) expectedHold() time.Duration { return r.hold.Estimate() }

// leave removes w from the queue of priority p, and reports whether it
// was still there (not granted).
func (r *Resource) leave(p int, w *waiter) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, x := range r.waiting[p] {
		if x == w {
			r.waiting[p] = append(r.waiting[p][:i], r.waiting[p][i+1:]...)
			r.n--
			return true
		}
	}
	return false
}

// A Slot is one of a Resource's slots, held from Acquire until its
// Release. Holding one costs no allocation, and Release is idempotent: a
// second call, or one on the zero Slot that Acquire returns with an
// error, does nothing.
type Slot struct {
	t   *slotToken
	gen uint64 // t's generation when the slot was taken
}

// slotToken is a held slot's state, pooled: each Release moves its
// generation on, so that a stale Slot of an earlier holder releases
// nothing.
type slotToken struct {
	gen   atomic.Uint64
	r     *Resource
	start time.Time
}

var slotTokens = sync.Pool{New: func() any { return new(slotToken) }}

// slot returns a Slot of r taken at start.
func (r *Resource) slot(start time.Time) Slot {
	t := slotTokens.Get().(*slotToken)
	t.r, t.start = r, start
	return Slot{t, t.gen.Load()}
}

// Release gives the slot back, to the most important waiting call that
// can still use it in time.
func (s Slot) Release() {
	if s.t == nil || !s.t.gen.CompareAndSwap(s.gen, s.gen+1) {
		return
	}
	r, held := s.t.r, time.Since(s.t.start)
	s.t.r = nil
	slotTokens.Put(s.t)
	r.release(held)
}

// release gives back a slot held for held (0: not used), granting it to
// the most important waiting call that can still use it in time.
func (r *Resource) release(held time.Duration) {
	if held > 0 {
		r.hold.Observe(held)
	}
	now := time.Now()
	hold := r.expectedHold()
	r.mu.Lock()
	defer r.mu.Unlock()
	for level := Levels - 1; level >= 0; level-- {
		for len(r.waiting[level]) > 0 {
			w := r.waiting[level][0]
			r.waiting[level][0] = nil
			r.waiting[level] = r.waiting[level][1:]
			r.n--
			if !w.deadline.IsZero() && now.Add(hold).After(w.deadline) {
				w.ready <- ErrResourceBusy // it could not use the slot in time
				continue
			}
			w.ready <- nil
			return
		}
	}
	r.used--
}

// Close refuses the calls waiting and every later Acquire; slots held
// are given back as usual.
func (r *Resource) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for level := range r.waiting {
		for _, w := range r.waiting[level] {
			w.ready <- ErrResourceClosed
		}
		r.waiting[level] = nil
	}
	r.n = 0
}

// resourceBound is the bound a Resource sets on a method whose calls
// acquire it: its slots and one round waiting.
func (r *Resource) resourceBound() int64 { return 2 * int64(r.capacity) }

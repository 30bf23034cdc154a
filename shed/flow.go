package shed

import "sync/atomic"

// Fairness between clients.
//
// A Flow is one source of tasks: a kiev server gives each connection one.
// Where a queue's rule would refuse a call (the overload queue's share, a
// start predicted past the wait limit, a full queue), a call of a flow
// lighter than the heaviest (the one with the most calls in flight, as
// last seen) takes the place of the heaviest flow's newest queued call of
// its priority or lower, which is answered at once (Evicted). This is
// longest-queue drop: a queue under pressure gives up the calls of the
// flow that holds most, so a connection that floods gets what the others
// leave, and cannot crowd out clients that stay within their share, while
// flows of equal weight meet the rules as before.
//
// The heaviest flow may have no call queued to give up: its calls hold
// the slots, and the short queue holds other light flows' calls. A call
// of a flow that holds no more than its share of the slots (the limit
// divided among the flows with calls in flight, and at least two) is
// then queued beyond the rule, while the queue holds fewer than the
// rule's length plus a round of slots: light flows are not refused for
// each other. Nor is a light flow's call, once queued, answered early in
// overload mode (it has no refusal window): it waits its turn. A full
// queue (Options.QueueSize) is never passed.

// Flow is a source of tasks that the scheduler shares its queues fairly
// with the others. The zero value is ready to use; a Flow must not be
// copied after first use.
type Flow struct {
	n atomic.Int64 // tasks admitted and not yet ended
}

// InFlight returns how many of the flow's tasks are queued or running.
func (f *Flow) InFlight() int { return int(f.n.Load()) }

// FlowTask is a Task that belongs to a Flow. Tasks without one are not
// counted for fairness.
type FlowTask interface {
	Task
	Flow() *Flow
}

// flows counts the flows with tasks in flight, and keeps the heaviest.
type flows struct {
	active atomic.Int64
	heavy  atomic.Pointer[Flow] // the flow with the most in flight, as last seen
}

func flowOf(t Task) *Flow {
	if ft, ok := t.(FlowTask); ok {
		return ft.Flow()
	}
	return nil
}

func (fs *flows) admit(f *Flow) {
	if f == nil {
		return
	}
	n := f.n.Add(1)
	if n == 1 {
		fs.active.Add(1)
	}
	fs.weigh(f, n)
}

// weigh makes f the heaviest flow if it holds n calls, more than the one
// that was.
func (fs *flows) weigh(f *Flow, n int64) {
	if h := fs.heavy.Load(); h == nil || h != f && n > h.n.Load() {
		fs.heavy.Store(f)
	}
}

func (fs *flows) end(f *Flow) {
	if f != nil && f.n.Add(-1) == 0 {
		fs.active.Add(-1)
	}
}

// within reports whether f is not the heaviest flow and holds no more
// than its share of limit slots: limit divided among the flows with calls
// in flight, and at least two.
func (fs *flows) within(f *Flow, limit int) bool {
	if f == nil || fs.heavy.Load() == f {
		return false
	}
	active := max(fs.active.Load(), 1)
	return f.n.Load() <= max(2, (int64(limit)+active-1)/active)
}

// heavier returns the heaviest flow if f, about to be refused, holds at
// least two calls fewer; nil otherwise.
func (fs *flows) heavier(f *Flow) *Flow {
	if f == nil {
		return nil
	}
	n := f.n.Load()
	fs.weigh(f, n) // a flow refused again and again is still weighed
	h := fs.heavy.Load()
	if h == nil || h == f || h.n.Load() < n+2 {
		return nil
	}
	return h
}

package shed

import "sync/atomic"

// Fairness between clients.
//
// A Flow is one source of tasks: a kiev server gives each connection one.
// Under overload, where a limit would refuse a call (a method's limit,
// the overload queue's share), a call is admitted anyway if its flow is
// not the heaviest (the one with the most calls in flight, as last seen)
// and holds less than twice its share of the limit, or less than four
// calls; and when the queue is full it takes the
// place of the newest queued call, of its priority or lower, of a flow
// above its share. So a connection that floods gets what the others
// leave, and cannot crowd out clients that stay within their share,
// while flows of equal weight meet the limits much as before. What is let
// in so, beside the heaviest flow's calls, stays below twice the limit
// plus 16, and never passes
// Options.MaxInFlight or Options.QueueSize.

// Flow is a source of tasks that the scheduler shares its limits fairly
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

// spare reports whether a call of f may pass a limit that inflight calls
// have reached: f is not the heaviest flow and holds less than twice its
// share of the limit (the limit divided among the flows with calls in
// flight, f included), or less than four calls. The calls of flows other
// than the heaviest stay below twice the limit plus 16 (the heaviest's
// backlog, from before the limit started, is not counted against them).
func (fs *flows) spare(f *Flow, limit, inflight int) bool {
	if f == nil {
		return false
	}
	n := f.n.Load()
	fs.weigh(f, n) // a flow refused again and again is still weighed
	h := fs.heavy.Load()
	if h == nil || h == f {
		return false
	}
	if int64(inflight)-h.n.Load() >= 2*int64(limit)+4*minLimit {
		return false // the others hold twice the limit already
	}
	active := fs.active.Load()
	if n == 0 {
		active++
	}
	share := (int64(limit) + active - 1) / active
	return n < max(4, 2*share)
}

// overShare reports whether f holds more than its share of limit.
func (fs *flows) overShare(f *Flow, limit int) bool {
	if f == nil {
		return false
	}
	active := max(fs.active.Load(), 1)
	return f.n.Load() > (int64(limit)+active-1)/active
}

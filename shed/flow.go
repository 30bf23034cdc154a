package shed

import "sync/atomic"

// Fairness between clients.
//
// A Flow is one source of tasks: a kiev server gives each connection one.
// Under overload, where a limit would refuse a call, a call whose flow
// holds less than its share of that limit (the limit divided among the
// flows with calls in flight) is admitted anyway, and when the queue is
// full it takes the place of the newest queued call, of its priority or
// lower, of a flow above its share. So a connection that floods gets what
// the others leave, and cannot crowd out a client that stays within its
// share. The limits thus overshoot by at most one share for each flow,
// and never pass Options.MaxInFlight or Options.QueueSize.

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

// flows counts the flows with tasks in flight.
type flows struct{ active atomic.Int64 }

func flowOf(t Task) *Flow {
	if ft, ok := t.(FlowTask); ok {
		return ft.Flow()
	}
	return nil
}

func (fs *flows) admit(f *Flow) {
	if f != nil && f.n.Add(1) == 1 {
		fs.active.Add(1)
	}
}

func (fs *flows) end(f *Flow) {
	if f != nil && f.n.Add(-1) == 0 {
		fs.active.Add(-1)
	}
}

// underShare reports whether f holds less than its share of limit, the
// limit divided among the flows with tasks in flight, f included. With a
// single flow there is nobody to be fair to.
func (fs *flows) underShare(f *Flow, limit int) bool {
	if f == nil {
		return false
	}
	n := f.n.Load()
	active := fs.active.Load()
	if n == 0 {
		active++
	}
	if active < 2 {
		return false
	}
	share := (int64(limit) + active - 1) / active
	return n < max(share, 1)
}

// overShare reports whether f holds more than its share of limit.
func (fs *flows) overShare(f *Flow, limit int) bool {
	if f == nil {
		return false
	}
	active := max(fs.active.Load(), 1)
	return f.n.Load() > (int64(limit)+active-1)/active
}

package shed

import (
	"math"
	"sync/atomic"
	"time"
)

// Fairness between clients.
//
// A Flow is one source of tasks: a kiev server gives each connection one.
// Each queue (the pool's, and each method's lane) weighs the flows whose
// calls it admits by how many it admitted lately (a rate, decaying over
// flowTau), not by how many they have in flight: a flooder whose calls
// are refused at once holds few, while a client within its share has its
// calls admitted, and waiting. A flow is weighed per queue, as it is a
// queue's slots that flows share: a client that calls a quick method
// often is no flooder of a slow one.
//
// Where a queue's rule would refuse a call (the overload queue's share, a
// start predicted past the wait limit, a full queue), a call of a flow
// admitted at less than half the rate of the queue's heaviest flow (the
// one admitted at the highest rate, as last seen) takes the place of the
// heaviest flow's newest queued call of its priority or lower, which is
// answered at once (Evicted): a queue under pressure gives up the calls
// of the flow that takes most, so a connection that floods gets what the
// others leave, and cannot crowd out clients that stay within their
// share, while flows of equal weight meet the rules as before.
//
// The heaviest flow may have no call queued to give up: its calls hold
// the slots, and the short queue holds other light flows' calls. A call
// of a light flow (one admitted at no more than its fair share of what
// the slots start, the rate divided among the flows the queue admitted
// lately, or at no more than half the heaviest flow's rate) is then
// queued beyond the rule: light flows are not refused for each other,
// nor for the calls a flooder has waiting before them. Nor is a light
// flow's call, once queued, answered early in overload mode (it has no
// refusal window): it waits its turn, while it can finish by its
// deadline. A full queue (Options.QueueSize) is never passed.

// flowTau is the time over which a flow's admitted rate decays.
const flowTau = 250 * time.Millisecond

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

func flowOf(t Task) *Flow {
	if ft, ok := t.(FlowTask); ok {
		return ft.Flow()
	}
	return nil
}

func (f *Flow) begin() {
	if f != nil {
		f.n.Add(1)
	}
}

func (f *Flow) end() {
	if f != nil {
		f.n.Add(-1)
	}
}

// flowRate is a flow's admitted rate at one queue: calls per second, as
// of at (unix nanoseconds).
type flowRate struct {
	rate float64
	at   int64
}

// at returns r decayed to now.
func (r *flowRate) atTime(now int64) float64 {
	if dt := now - r.at; dt > 0 {
		return r.rate * math.Exp(-float64(dt)/float64(flowTau))
	}
	return r.rate
}

// flows weighs the flows a queue admits. It is guarded by the
// Scheduler's mu, as its queue is.
type flows struct {
	rates map[*Flow]*flowRate
	heavy *Flow // the flow admitted at the highest rate, as last seen
	swept int64 // when rates was last swept of flows long quiet
}

// flowIdle is the rate below which a flow's entry is dropped.
const flowIdle = 0.5

// admitted counts a call of f admitted at now.
func (fs *flows) admitted(f *Flow, now time.Time) {
	if f == nil {
		return
	}
	t := now.UnixNano()
	if fs.rates == nil {
		fs.rates = map[*Flow]*flowRate{}
		fs.swept = t
	}
	r := fs.rates[f]
	if r == nil {
		r = &flowRate{}
		fs.rates[f] = r
	}
	r.rate = r.atTime(t) + float64(time.Second)/float64(flowTau)
	r.at = t
	if h := fs.rates[fs.heavy]; h == nil || fs.heavy != f && r.rate > h.atTime(t) {
		fs.heavy = f
	}
	if t-fs.swept > int64(10*flowTau) {
		fs.sweep(t)
	}
}

// sweep drops the flows whose rate decayed below flowIdle.
func (fs *flows) sweep(now int64) {
	fs.swept = now
	for f, r := range fs.rates {
		if r.atTime(now) < flowIdle {
			delete(fs.rates, f)
		}
	}
	if fs.rates[fs.heavy] == nil {
		fs.heavy = nil
	}
}

// rateOf returns f's admitted rate at now.
func (fs *flows) rateOf(f *Flow, now int64) float64 {
	if r := fs.rates[f]; r != nil {
		return r.atTime(now)
	}
	return 0
}

// heavier returns the heaviest flow if f, about to be refused at now, is
// admitted at less than half its rate; nil otherwise.
func (fs *flows) heavier(f *Flow, now time.Time) *Flow {
	h := fs.heavy
	if f == nil || h == nil || h == f {
		return nil
	}
	t := now.UnixNano()
	if fs.rateOf(h, t) <= 2*fs.rateOf(f, t) {
		return nil
	}
	return h
}

// light reports whether f is not the heaviest flow and is admitted at no
// more than its fair share of capacity (calls per second, divided among
// the flows the queue admitted lately) or than half the heaviest's rate.
func (fs *flows) light(f *Flow, capacity float64, now time.Time) bool {
	if f == nil || fs.heavy == f {
		return false
	}
	t := now.UnixNano()
	r := fs.rateOf(f, t)
	return r <= capacity/float64(max(len(fs.rates), 1)) || 2*r <= fs.rateOf(fs.heavy, t)
}

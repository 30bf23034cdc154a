package shed

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// The bound from the first call.
//
// A method's adaptive limit needs windows of service times before it can
// start, and calls admitted meanwhile queue inside the dependency, where
// the scheduler can neither reorder nor drop them. So every method whose
// calls take more than minBounded has a bound on its calls in the pool
// while its limit is off, from its first call:
//
//   - Slow start: the bound starts at initialBound and doubles every
//     round trip (a round: the floor, or before it is known the mean
//     service time so far) in which the service time holds: not
//     congested against the floor, or risen no more than the CPU's wait
//     explains. A CPU that goroutines wait for slows blocked calls too
//     (they wake late), so a round then lasts the floor plus the rise
//     the CPU's wait explains.
//   - A ceiling by Little's law: the bound is never above twice the calls
//     that ended in the last round, nor below initialBound. A dependency
//     that serves N calls in a floor time is given 2N in flight: N in
//     service, N waiting just before it.
//
// Calls over the bound wait in the method's lane, where waiting costs no
// goroutine, and are not refused by prediction while the bound holds (it
// doubles each round trip): only when they reach their deadline, or
// MaxWait without one. The lane then holds as many calls as the pool
// would have (Options.MaxInFlight).
//
// A surge is seen at a round's end: more than twice as many calls
// arrived as ended, in this round and the one before, both begun once
// the floor had been measured. Then the limit starts at once, no lower than the bound,
// and the lane enters overload mode. A closed loop of callers, whose
// calls arrive as they end, is no surge however many they are; nor are
// its callers starting, over a round or so.
const (
	initialBound = 64
	maxBound     = 1 << 20
	// minBounded is the floor a method's calls must exceed to be
	// bounded: a method of microseconds has no dependency to protect,
	// and the pool's CPU rule limits it. One of a couple of
	// milliseconds may wait on one: the cpu workload's 8 connections
	// held 2ms each, unbounded, took 1,900 calls into the pool in a 3×
	// spike, and the priority-9 calls queued behind them were refused.
	minBounded = time.Millisecond
)

// bound is a method limit's bound while its limit is off. Its atomics
// are read without the limit's mu; they are written under it.
type bound struct {
	// cold is the bound in force: 0 until the first round trip
	// (initialBound), negative for a method of microseconds (none).
	cold     atomic.Int64
	arrivals atomic.Int64             // calls that arrived in this round
	roundNS  atomic.Int64             // when this round began, unix nanoseconds; 0 before the first call
	res      atomic.Pointer[Resource] // the Resource its calls acquire, if any
}

// rounds is a method limit's slow start, guarded by its mu.
type rounds struct {
	ends     int64         // calls that ended in this round
	sum      time.Duration // their service times
	prevEnds int64         // the calls that ended in the last round
	ss       int64         // the slow start's bound; 0: initialBound
	stopped  bool          // the slow start stopped at a congested round
	arriving bool          // more calls arrived than twice their ends in the last round
	armed    bool          // the floor was known when this round began
}

// coldBound is the bound in force while the limit is off; 0 if none.
func (b *bound) coldBound() int64 {
	switch n := b.cold.Load(); {
	case n == 0:
		return initialBound
	case n < 0:
		return 0
	default:
		return n
	}
}

// arrive counts a call of the method arriving at now.
func (l *methodLimit) arrive(now time.Time) {
	if l.cold.Load() < 0 {
		return // a method of microseconds: no bound
	}
	l.arrivals.Add(1)
	if l.roundNS.Load() == 0 {
		l.roundNS.CompareAndSwap(0, now.UnixNano())
	}
}

// round counts a call that ran for d and ended at now, with in calls in
// flight, in the round; ends the round if it has lasted its length, and
// sets the bound. REQUIRES l.mu is held.
func (l *methodLimit) round(d time.Duration, in int64, now time.Time, cpu cpuSignal) {
	if l.floor > 0 && l.floor <= minBounded {
		// A method of microseconds has no dependency to protect: no
		// bound, and no rounds to keep.
		if l.cold.Load() >= 0 {
			l.cold.Store(-1)
		}
		return
	}
	r := &l.rounds
	r.ends++
	r.sum += d
	start := l.roundNS.Load()
	if start == 0 {
		start = now.UnixNano() - int64(d)
		l.roundNS.Store(start)
	}
	length := l.floor
	if length == 0 {
		length = r.sum / time.Duration(r.ends)
	} else if cpu.wait > 0 {
		// A CPU that goroutines wait for slows every call, blocked ones
		// included (they wake late): the round trip is the floor as the
		// CPU lets it be, or Little's ceiling would read a slower CPU as
		// a queue before the dependency.
		length += min(max(r.sum/time.Duration(r.ends)-l.floor, 0), l.cpuRise(cpu.wait, in, 2*int64(cpu.runnable)))
	}
	if elapsed := time.Duration(now.UnixNano() - start); elapsed >= length {
		l.endRound(now, elapsed, in, cpu)
	}
	ss := max(r.ss, initialBound)
	l.cold.Store(min(ss, max(initialBound, 2*max(r.prevEnds, r.ends))))
}

// endRound ends the round at now, elapsed long, with in calls in
// flight: the slow start doubles if the service time held, and a surge
// starts the limit. REQUIRES l.mu is held.
func (l *methodLimit) endRound(now time.Time, elapsed time.Duration, in int64, cpu cpuSignal) {
	r := &l.rounds
	rtt := r.sum / time.Duration(r.ends)
	arrived := l.arrivals.Swap(0)
	ss := max(r.ss, initialBound)
	switch {
	case l.floor == 0 || !l.congested(rtt) || l.cpuExplains(rtt, cpu.wait, in, 2*int64(cpu.runnable)):
		// The service time held, or the CPU's wait explains its rise.
		r.ss, r.stopped = min(2*ss, maxBound), false
	case !r.stopped:
		r.stopped = true
		if l.limit.Load() == 0 {
			l.decide(now, "slow start stops", in, "service time %v over floor %v", dur(0, 1), int64(rtt), int64(l.floor))
		}
	}
	bound := l.offBound()
	outrun := r.armed && arrived > 2*r.ends+minLimit
	if l.floor > minBounded && l.limit.Load() == 0 && !l.probing.Load() && outrun && r.arriving &&
		(in >= bound || l.held.Load() > 0) {
		if in <= 2*int64(cpu.runnable) && l.cpuExplains(rtt, cpu.wait, in, 2*int64(cpu.runnable)) {
			// Calls arriving faster than they end is no CPU effect,
			// unless the calls are the runnable ones.
			l.decide(now, "cpu veto", in, "%d calls arrived, %d ended in %v, explained by the CPU's wait of %v", dur(2, 3), arrived, r.ends, int64(elapsed.Round(time.Microsecond)), int64(cpu.wait))
		} else {
			// Calls arrive faster than twice their ends: a surge.
			l.gapNS.Store(int64(elapsed) / r.ends)
			l.start(now, true, bound)
			l.decide(now, "surge", in, "%d calls arrived, %d ended in %v", dur(2), arrived, r.ends, int64(elapsed.Round(time.Microsecond)))
		}
	}
	r.prevEnds, r.ends, r.sum, r.arriving, r.armed = r.ends, 0, 0, outrun, l.floor > 0
	l.roundNS.Store(now.UnixNano())
}

// inForce is the bound on the method's calls in the pool: the limit, the
// probe's, or the bound while the limit is off; 0 if none.
func (l *methodLimit) inForce() int64 {
	if n := l.base(); n != 0 {
		return l.capped(n)
	}
	return l.offBound()
}

// setLimit sets the limit to n, within a Resource's bound. REQUIRES l.mu
// is held.
func (l *methodLimit) setLimit(n int64) { l.limit.Store(l.capped(n)) }

// capped is n within the bound of the Resource the method's calls
// acquire, if any: more of its calls in the pool than the Resource's
// slots and one round waiting would only wait inside the handler, each
// holding a goroutine, where the lane holds them for nothing and in
// order.
func (b *bound) capped(n int64) int64 {
	if r := b.res.Load(); r != nil {
		return min(n, r.resourceBound())
	}
	return n
}

// offBound is the bound while the limit is off: a Resource's, if its
// calls acquire one, or the slow start's and Little's law's; 0 if none.
func (b *bound) offBound() int64 {
	if r := b.res.Load(); r != nil {
		return r.resourceBound()
	}
	return b.coldBound()
}

// Decision is one decision of a method's limit: what it read, and which
// rule fired.
type Decision struct {
	// At is when it was decided, and Window how many windows of service
	// times had ended before it.
	At     time.Time `json:"at"`
	Window int       `json:"window"`
	// Rule is the rule that fired: "surge" (calls arrived faster than
	// twice their ends), "congested" (the service time over its floor's
	// tolerance, two windows), "down", "up", "off", "probe", "floor"
	// (a probe measured it), "slow start stops", or "cpu veto" (a rise
	// the CPU's wait explains, while the method's calls are runnable).
	Rule string `json:"rule"`
	// Signal says what the rule read.
	Signal string `json:"signal"`
	// InFlight is how many of the method's calls were in the pool when
	// it fired, and Limit the limit after it (0: off).
	InFlight int `json:"in_flight"`
	Limit    int `json:"limit"`
}

// historySize is how many decisions a method limit keeps.
const historySize = 16

// history is a ring of the last decisions, guarded by the limit's mu.
// A decision's signal is formatted when it is read, not when it is made:
// the limit decides on the call path.
type history struct {
	d    [historySize]record
	next int
	n    int
}

// record is a decision as kept: its signal as a format and its numbers,
// those whose bit is set in durs being durations.
type record struct {
	Decision
	format string
	durs   uint8
	args   [4]int64
}

func (h *history) add(r record) {
	h.d[h.next] = r
	h.next = (h.next + 1) % historySize
	h.n = min(h.n+1, historySize)
}

// list returns the decisions, oldest first.
func (h *history) list() []Decision {
	if h.n == 0 {
		return nil
	}
	out := make([]Decision, 0, h.n)
	for i := range h.n {
		r := h.d[(h.next-h.n+i+historySize)%historySize]
		d := r.Decision
		if r.format != "" {
			args := make([]any, 0, len(r.args))
			for j, a := range r.args {
				if r.durs&(1<<j) != 0 {
					args = append(args, time.Duration(a))
				} else {
					args = append(args, a)
				}
			}
			d.Signal = fmt.Sprintf(r.format, args[:strings.Count(r.format, "%")]...)
		}
		out = append(out, d)
	}
	return out
}

// dur marks args i of a record as durations.
func dur(i ...int) uint8 {
	var m uint8
	for _, j := range i {
		m |= 1 << j
	}
	return m
}

// decide records a decision at now: rule fired, with in calls in
// flight, on the signal format says of args (durations where durs has
// their bit). REQUIRES l.mu is held.
func (l *methodLimit) decide(now time.Time, rule string, in int64, format string, durs uint8, args ...int64) {
	r := record{Decision: Decision{At: now, Window: l.windows, Rule: rule, InFlight: int(in), Limit: int(l.base())}, format: format, durs: durs}
	copy(r.args[:], args)
	l.history.add(r)
}

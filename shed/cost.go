package shed

import (
	"sync"
	"sync/atomic"
	"time"
)

// ServiceTime is one kind of task's account (one RPC method's): a moving
// average of how long it takes to run, and its adaptive concurrency
// limit, the bulkhead that keeps a method whose dependency slowed from
// holding the whole server. The zero value is ready to use and safe for
// concurrent use.
type ServiceTime struct {
	avg atomic.Int64 // nanoseconds, an exponentially weighted moving average
	n   atomic.Int64 // observations
	lim methodLimit
}

// minObservations is how many runs a ServiceTime needs before the
// scheduler trusts it to skip calls that could not finish in time.
const minObservations = 16

// Observe adds one run of duration d to the average. It does nothing on
// a nil ServiceTime.
func (s *ServiceTime) Observe(d time.Duration) {
	if s == nil {
		return
	}
	s.n.Add(1)
	for {
		old := s.avg.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if s.avg.CompareAndSwap(old, next) {
			return
		}
	}
}

// skipEstimate is the run time a call of this kind is expected to take
// if admitted now, to skip calls whose deadline is closer: the average,
// and while the limit is on, at most the floor with tolerance.
func (s *ServiceTime) skipEstimate() time.Duration {
	est := s.Estimate()
	if s == nil || s.lim.limit.Load() == 0 {
		return est
	}
	if f := s.lim.floorNS.Load(); f > 0 {
		est = min(est, time.Duration(tolerance*float64(f)))
	}
	return est
}

// stale reports whether no run has ended for longer than the estimate, at
// now: the estimate is not to be trusted to skip calls.
func (s *ServiceTime) stale(now time.Time) bool {
	if s == nil {
		return false
	}
	last := s.lim.lastEnd.Load()
	return last != 0 && now.UnixNano()-last > s.avg.Load()
}

// Estimate returns the average run time, or 0 until enough runs were seen.
func (s *ServiceTime) Estimate() time.Duration {
	if s == nil || s.n.Load() < minObservations {
		return 0
	}
	return time.Duration(s.avg.Load())
}

// LimitStats is a method's adaptive concurrency limit as it stands.
type LimitStats struct {
	// Limit is how many of the method's calls may be in flight (queued
	// or running) at once; 0 while its service time is near its floor and
	// nothing limits it.
	Limit int
	// InFlight is how many of its calls are in flight now.
	InFlight int
	// Floor is its service time when not congested, as last measured;
	// Latency its average over the last window.
	Floor, Latency time.Duration
	// Limited counts its calls refused at the limit (Reason Limited).
	Limited uint64
}

// Limit returns the method's adaptive limit and what drives it. A nil
// ServiceTime has none.
func (s *ServiceTime) Limit() LimitStats {
	if s == nil {
		return LimitStats{}
	}
	l := &s.lim
	st := LimitStats{Limit: int(l.limit.Load()), InFlight: int(l.inflight.Load()), Limited: l.limited.Load()}
	l.mu.Lock()
	st.Floor, st.Latency = l.floor, l.latency
	l.mu.Unlock()
	return st
}

// The method limit's constants.
//
// A window is how often the limit is set again from the service times
// measured in it: at least limitWindow long and limitSamples runs.
// tolerance is how far above its floor a method's service time may go
// before it counts as congested, and headroom how many calls the limit
// admits beyond what the dependency serves at its floor latency: a short
// queue before the dependency keeps it busy.
//
// A probe measures the floor again, as BBR's ProbeRTT does: the limit
// falls to minLimit, and once the calls in flight have drained to that,
// the next probeSamples calls that start and end within it set the
// floor. A floor is only seen while nothing waits before the dependency
// (a smaller limit that still queues would measure the queue, and feed
// it), and a dependency that became slower for good has a new one.
// Lower window averages move the floor down a quarter of the way at
// once, and while the limit is off, healthy windows move it up by a
// 64th. Probes come firstProbe after the limit starts, then every
// probeInterval; a window whose service time is shiftRatio times the floor,
// shiftWindows in a row, brings the next probe forward (the floor likely
// moved). A probe that cannot finish within probeTimeout is given up.
const (
	limitWindow  = 100 * time.Millisecond
	limitSamples = 8
	tolerance    = 2
	headroom     = 1.5
	minLimit     = 4
	firstProbe   = 500 * time.Millisecond
	probeEvery   = 2 * time.Second
	probeSamples = 8
	probeTimeout = 5 * time.Second
	shiftRatio   = 3
	shiftWindows = 3
	rateWindows  = 3
	minExcess    = 5 * time.Millisecond
	surgeMin     = minExcess
)

// methodLimit is a method's adaptive concurrency limit, in the family of
// brpc's auto concurrency limiter, Netflix's concurrency-limits and BBR.
// While the method's service time stays within tolerance of its floor,
// and its calls in flight are no more than its rate at that floor
// explains, the limit is off. Once it rises above, the limit is what the dependency
// serves at its floor latency (Little's law: the most calls completed per
// second in the last rateWindows windows, times the floor) with headroom,
// set again every window; calls past it are refused at once. A limit that
// refuses calls while the service time is healthy grows by half each
// window, and one far above the demand, with the service time healthy,
// turns off.
type methodLimit struct {
	inflight   atomic.Int64         // calls admitted and not yet ended
	atLevel    [Levels]atomic.Int64 // the same by priority
	limit      atomic.Int64         // 0: not limiting
	probing    atomic.Bool          // the limit is probeLimit, to measure the floor
	probeLimit atomic.Int64         //
	limited    atomic.Uint64        // calls refused at the limit, ever
	refused    atomic.Int64         // calls refused at the limit in this window
	lastEnd    atomic.Int64         // when the last run ended, unix nanoseconds
	floorNS    atomic.Int64         // floor, for readers without mu

	mu         sync.Mutex // guards following
	winStart   time.Time
	winN       int
	winSum     time.Duration
	peak       int64 // the most calls in flight seen in this window
	rates      [rateWindows]float64
	rateAt     int
	floor      time.Duration // 0 until the first window
	latency    time.Duration // the last window's average
	probeAt    time.Time     // when the next probe starts, while limiting
	probeStart time.Time
	drainAt    time.Time // when the probe's calls in flight fell to its limit
	probeN     int
	probeSum   time.Duration
	high, calm int // windows in a row far above the floor, healthy with no refusal
	bad        int // windows in a row congested
}

// cap is the limit a call of priority p meets, counting the calls in
// flight of priority p or higher: the limit for the default priority, 5,
// half of it for priority 0 and two fifths more for priority 9. 0 means
// no limit.
func (l *methodLimit) cap(p int) int64 {
	n := l.base()
	if n == 0 {
		return 0
	}
	return max(n*int64(p+5)/10, 1)
}

// base is the limit in force: limit, or probeLimit during a probe; 0 if
// none.
func (l *methodLimit) base() int64 {
	n := l.limit.Load()
	if n != 0 && l.probing.Load() {
		n = l.probeLimit.Load()
	}
	return n
}

// admits reports whether a call of priority p fits the limit: fewer calls
// of priority p or higher are in flight than cap(p), and fewer calls in
// all than the limit times (p+10)/10 (one and a half times it for the
// default priority). So a call competes only with calls as
// important or more, and the least important are refused first, while
// the calls in flight in all stay bounded. With no limit in force it
// admits every call; otherwise it also returns the cap and the calls
// competing, for fairness.
func (l *methodLimit) admits(p int) (ok bool, limit, ahead int64) {
	n := l.base()
	if n == 0 {
		return true, 0, 0
	}
	for level := p; level < Levels; level++ {
		ahead += l.atLevel[level].Load()
	}
	limit = l.cap(p)
	return ahead < limit && 10*l.inflight.Load() < n*int64(p+10), limit, ahead
}

// end counts the end of a call of priority p admitted to the method,
// which ran for d
// (ran false: it was dropped unrun) and ended at now.
func (l *methodLimit) end(p int, d time.Duration, ran bool, now time.Time, cpuWait time.Duration) {
	l.atLevel[p].Add(-1)
	in := l.inflight.Add(-1) + 1 // in flight with this call
	if !ran {
		return
	}
	prev := l.lastEnd.Swap(now.UnixNano())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.probing.Load() {
		l.probe(d, in, now)
		return
	}
	if l.winStart.IsZero() || now.UnixNano()-prev > int64(limitWindow) {
		// The first run, or the first after an idle spell: a window
		// across the spell would read a rate far below the method's.
		l.winStart, l.winN, l.winSum, l.peak = now, 0, 0, 0
	}
	l.winN++
	l.winSum += d
	l.peak = max(l.peak, in)
	if l.winN < limitSamples {
		return
	}
	if elapsed := now.Sub(l.winStart); elapsed >= limitWindow || elapsed >= limitWindow/10 && l.limit.Load() == 0 && l.surging(elapsed) {
		l.adjust(now, cpuWait)
	}
}

// surging reports whether the window so far, elapsed long, shows calls in
// flight ten times what its rate and service time explain, for a method
// over surgeMin, in a window at least two service times
// long (before that, calls that started together have not ended yet, and
// a closed loop starting looks like a surge): a surge, judged at once
// rather than at the window's
// end, as every millisecond of it piles more calls before the dependency.
// REQUIRES l.mu is held.
func (l *methodLimit) surging(elapsed time.Duration) bool {
	rtt := l.winSum / time.Duration(l.winN)
	explained := float64(l.winN) / elapsed.Seconds() * rtt.Seconds()
	return rtt > surgeMin && elapsed >= 2*rtt && float64(l.peak) > 10*explained+minLimit
}

// probe counts a call that ended during a probe. REQUIRES l.mu is held.
func (l *methodLimit) probe(d time.Duration, in int64, now time.Time) {
	if l.drainAt.IsZero() {
		if in <= l.probeLimit.Load() {
			l.drainAt = now
		}
	} else if !now.Add(-d).Before(l.drainAt) {
		l.probeN++
		l.probeSum += d
	}
	done := l.probeN >= probeSamples
	if !done && now.Sub(l.probeStart) < probeTimeout {
		return
	}
	if done {
		l.floor = l.probeSum / time.Duration(l.probeN)
		l.floorNS.Store(int64(l.floor))
		l.limit.Store(l.fit())
	}
	l.probing.Store(false)
	l.probeAt = now.Add(l.probeInterval())
	l.winStart, l.winN, l.winSum, l.peak = now, 0, 0, 0
	l.refused.Store(0)
}

// probeInterval is the time between probes: probeEvery, or for a slow
// method 50 times its floor, so that probes, which run it at minLimit for
// about two floors, cost a few percent of its throughput at most.
// REQUIRES l.mu is held.
func (l *methodLimit) probeInterval() time.Duration {
	return max(probeEvery, 50*l.floor)
}

// fit is the limit the dependency's recent rate and floor call for.
// REQUIRES l.mu is held.
func (l *methodLimit) fit() int64 {
	rate := 0.0
	for _, r := range l.rates {
		rate = max(rate, r)
	}
	return int64(max(minLimit, headroom*rate*l.floor.Seconds()))
}

// adjust sets the limit from the window that ends at now. REQUIRES l.mu
// is held.
func (l *methodLimit) adjust(now time.Time, cpuWait time.Duration) {
	rtt := l.winSum / time.Duration(l.winN)
	elapsed := now.Sub(l.winStart)
	rate := float64(l.winN) / elapsed.Seconds()
	peak, refused := l.peak, l.refused.Swap(0)
	l.winStart, l.winN, l.winSum, l.peak = now, 0, 0, 0
	l.latency = rtt
	l.rates[l.rateAt] = rate
	l.rateAt = (l.rateAt + 1) % rateWindows
	switch {
	case l.floor == 0:
		l.floor = rtt
		l.floorNS.Store(int64(l.floor))
	case rtt < l.floor:
		// Lower: follow fast, yet not at once, so that one lucky window
		// does not set a floor the service time never keeps.
		l.floor -= (l.floor - rtt) / 4
		l.floorNS.Store(int64(l.floor))
	}
	// Healthy: the service time is near its floor, and no more calls are
	// in flight than the rate at that floor explains (Little's law) with
	// ample room: a queue building before the dependency shows in the
	// calls in flight before it shows in the service times of the calls
	// that end.
	//
	// A service time up by no more than minExcess is healthy whatever its
	// floor: a method that takes microseconds has no dependency to
	// protect, and a hiccup (a collection, a preemption) is many times its
	// floor. Nor is a rise that the CPU's own wait explains (cpuWait, a
	// few wake-ups' worth, and at most four floors, as calls piling up
	// before a saturated dependency make the CPU wait too): a busy CPU is
	// the elastic pool's concern, and refusing calls that sleep would not
	// free it.
	//
	// Calls in flight far beyond what the rate and service time explain
	// (Little's law) are a surge piling up before the dependency: the
	// limit starts at once, not after a second window, and whatever the
	// CPU's wait. Not so for a method that takes under surgeMin, nor
	// while the CPU's wait is a quarter of the floor or more: then calls
	// pile up waiting for a CPU.
	excess := rtt - l.floor
	explained := rate * rtt.Seconds() // Little's law, with the window's own service time
	near := float64(rtt) <= tolerance*float64(l.floor) && float64(peak) <= 3*explained+minLimit
	surge := float64(peak) > 10*explained+minLimit && rtt > surgeMin && elapsed >= 2*rtt && 4*cpuWait < l.floor
	healthy := !surge && (near || excess <= minExcess+min(4*cpuWait, 4*l.floor))
	limit := l.limit.Load()
	switch {
	case healthy:
		l.bad = 0
	case surge:
		l.bad = 2
	default:
		l.bad++
	}
	if near && limit == 0 && excess > 0 && 4*excess < l.floor {
		// Not congested, and within a quarter of the floor: the floor
		// follows the service time up, slowly. A larger rise may be a
		// queue, which must not raise the floor it is judged by.
		l.floor += excess / 64
		l.floorNS.Store(int64(l.floor))
	}
	switch {
	case limit == 0 && l.bad < 2:
		return
	case limit == 0:
		// Congested two windows in a row: start limiting.
		l.limit.Store(l.fit())
		l.probeAt = now.Add(firstProbe)
		l.high, l.calm = 0, 0
		return
	case !healthy:
		limit = l.fit()
		l.calm = 0
	case refused > 0:
		// Healthy, yet calls were refused: there is room.
		limit = max(limit+limit/2, l.fit())
		l.calm = 0
	default:
		// Healthy and nothing refused: after a few such windows, stop.
		if l.calm++; l.calm >= shiftWindows {
			l.limit.Store(0)
			l.high, l.calm = 0, 0
			return
		}
	}
	l.limit.Store(limit)
	if float64(rtt) > shiftRatio*float64(l.floor) {
		if l.high++; l.high >= shiftWindows {
			l.probeAt = now // the floor likely moved: measure it now
		}
	} else {
		l.high = 0
	}
	if !now.Before(l.probeAt) {
		l.high = 0
		l.probeStart, l.drainAt, l.probeN, l.probeSum = now, time.Time{}, 0, 0
		l.probeLimit.Store(minLimit)
		l.probing.Store(true)
	}
}

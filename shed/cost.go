package shed

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// ServiceTime is one kind of task's account (one RPC method's): a moving
// average of how long it takes to run, and its adaptive concurrency
// limit, the bulkhead that keeps a method whose dependency slowed from
// holding the whole server. The zero value is ready to use and safe for
// concurrent use. A ServiceTime is used by one Scheduler.
type ServiceTime struct {
	avg  atomic.Int64 // nanoseconds, an exponentially weighted moving average
	n    atomic.Int64 // observations
	lim  methodLimit
	lane lane
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

// Estimate returns the average run time, or 0 until enough runs were seen.
func (s *ServiceTime) Estimate() time.Duration {
	if s == nil || s.n.Load() < minObservations {
		return 0
	}
	return time.Duration(s.avg.Load())
}

// skipEstimate is the run time a call of this kind is expected to take
// if admitted now, to skip calls whose deadline is closer: the average,
// and while the limit is on, at most the floor with tolerance (the limit
// keeps the queue before the dependency short, so a call admitted now
// runs about that long, whatever the calls before the limit took), but
// never less than the last window's service time: a dependency that
// slowed serves the calls admitted now as slowly, and a call that cannot
// finish in time is not started.
func (s *ServiceTime) skipEstimate() time.Duration {
	est := s.Estimate()
	if s == nil || s.lim.limit.Load() == 0 {
		return est
	}
	if f := s.lim.floorNS.Load(); f > 0 {
		recent := time.Duration(s.lim.latencyNS.Load())
		est = min(est, max(time.Duration(tolerance*float64(f)), recent))
	}
	return est
}

// stale reports whether no run has ended for longer than the estimate, at
// now: the estimate is not to be trusted to skip calls, so that one spell
// of long runs cannot leave every later call judged hopeless and the
// estimate never updated.
func (s *ServiceTime) stale(now time.Time) bool {
	if s == nil {
		return false
	}
	last := s.lim.lastEnd.Load()
	return last != 0 && now.UnixNano()-last > s.avg.Load()
}

// LimitStats is a method's adaptive concurrency limit as it stands.
type LimitStats struct {
	// Limit is how many of the method's calls may be in the pool (waiting
	// for a worker or running) at once; 0 while its service time is near
	// its floor and nothing limits it.
	Limit int
	// InFlight is how many of its calls are in the pool now, and Queued
	// how many wait in its lane for room under the limit.
	InFlight, Queued int
	// Floor is its service time when not congested, as last measured;
	// Latency its average over the last window.
	Floor, Latency time.Duration
	// Probing reports that the limit is lowered for a while, to measure
	// the floor again.
	Probing bool
	// Limited counts its calls refused at the limit (Reason Limited).
	Limited uint64
	// Bound is the bound on its calls in the pool while Limit is 0: a
	// slow start from the first call, and a ceiling of twice the calls
	// that ended in the last floor time (see the package documentation);
	// 0 for a method of microseconds, which has no dependency to protect.
	Bound int
	// Decisions are the limit's last decisions, oldest first: why it
	// started, moved or turned off.
	Decisions []Decision
}

// Limit returns the method's adaptive limit and what drives it. A nil
// ServiceTime has none.
func (s *ServiceTime) Limit() LimitStats {
	if s == nil {
		return LimitStats{}
	}
	l := &s.lim
	st := LimitStats{
		Limit:    int(l.base()),
		InFlight: int(l.inflight.Load()),
		Queued:   int(s.lane.queued.Load()),
		Probing:  l.probing.Load(),
		Limited:  l.limited.Load(),
		Bound:    int(l.offBound()),
	}
	l.mu.Lock()
	st.Floor, st.Latency = l.floor, l.latency
	st.Decisions = l.history.list()
	l.mu.Unlock()
	return st
}

// lane is the queue before a method's dependency while its limit is on:
// the method's calls beyond the limit wait there, in priority order and
// under the queue's rules, for one of its calls in the pool to end, or
// are refused (Limited). It is guarded by the Scheduler's mu, but for
// queued.
type lane struct {
	queue
	queued atomic.Int64 // queue.n, to be read without the lock
	listed bool         // in the Scheduler's lanes, to be swept
}

// The method limit's constants.
//
// A window is how often the limit is set again from the service times
// measured in it: at least limitWindow long and limitSamples runs.
// tolerance is how far above its floor a method's service time may go
// before it counts as congested, if by more than minExcess; a limit with
// calls waiting beyond it doubles each window while the service time is
// within roomRatio of the floor (no call queues inside the dependency),
// and holds above that. headroom is how many calls the limit
// admits beyond what the dependency serves at its floor latency: a short
// queue before the dependency keeps it busy. The limit turns off after
// calmWindows windows in which no call met it.
//
// A probe measures the floor, as BBR's ProbeRTT does: the limit halves,
// but no lower than the calls the dependency serves at its floor (its
// recent rate times the floor), and once the calls in flight have
// drained to that, the next probeSamples calls that start and end within
// it give the service time there. At or above those calls, a service
// time within driftRatio of the floor confirms it: the dependency stayed
// as busy as before, and the probe cost no throughput. Otherwise, if it
// fell by a quarter or more from that of the calls that ended while
// they drained, the calls were queueing before the dependency: the
// limit halves again, as before, down to minLimit. If it rose by a
// third or more, the load changed meanwhile: the step is measured again.
// Otherwise it is the floor. A floor is only seen while nothing
// waits before the dependency, and a dependency that became slower for
// good has a new one. A method not limited is probed when its calls in
// flight reach probeConcurrency, in a steady window (as many calls in
// flight as the rate explains), if it was never probed (a dependency
// saturated from the first call shows no rise above the floor it was
// first seen at) or its service time has stayed above driftRatio of the
// floor for shiftWindows windows; a limited one firstProbe after the
// limit starts; either no sooner than probeEvery or 50 floors after the
// last.
// A service time shiftRatio times the floor, shiftWindows windows in a
// row, brings the next probe forward (the floor likely moved). A probe
// that cannot finish within probeTimeout is given up.
const (
	limitWindow      = 100 * time.Millisecond
	limitSamples     = 8
	tolerance        = 2
	minExcess        = 5 * time.Millisecond
	driftRatio       = 1.25
	roomRatio        = 1.1
	cpuExplains      = 4
	headroom         = 1.5
	minLimit         = 4
	calmWindows      = 3
	rateWindows      = 3
	probeConcurrency = 16
	firstProbe       = 500 * time.Millisecond
	probeEvery       = 2 * time.Second
	probeSamples     = 8
	probeFall        = 0.75
	probeTimeout     = 5 * time.Second
	shiftRatio       = 3
	shiftWindows     = 3
)

// methodLimit is a method's adaptive concurrency limit, in the family of
// brpc's auto concurrency limiter, Netflix's concurrency-limits and BBR.
//
// While the method's service time stays within tolerance of its floor,
// and its calls in flight are no more than its rate at that floor
// explains, the limit is off. Once the service time rises above (the
// dependency saturated or slowed), two windows in a row, or calls pile up
// ten times beyond what the rate explains (a surge), the limit is what
// the dependency serves at its floor latency: by Little's law, the most
// calls completed per second in the last rateWindows windows, times the
// floor, with headroom. Beyond it, calls wait in the method's lane. A
// congested window brings the limit down toward that, in proportion to
// how far the service time is over its floor with headroom, by at most half at a
// time; a limit with calls waiting doubles while the service time is
// near the floor, and holds while it is above it but not congested (the
// calls let in queue inside the dependency); one that no call met for
// calmWindows turns off. A window whose service time the CPU's wait explains (a rise no
// larger than cpuExplains times how long goroutines waited for a
// congested CPU) neither starts nor lowers the limit, and one with calls
// held grows it: a busy CPU raises every method's service time, and it is
// the pool's to limit.
type methodLimit struct {
	inflight   atomic.Int64  // calls in the pool: waiting for a worker or running
	limit      atomic.Int64  // 0: not limiting
	probing    atomic.Bool   // the limit is probeLimit, to measure the floor
	probeLimit atomic.Int64  //
	probeBase  atomic.Int64  // the limit, or the calls in flight, when the probe started
	limited    atomic.Uint64 // calls refused at the limit, ever
	held       atomic.Int64  // calls that met the limit in this window
	lastEnd    atomic.Int64  // when the last run ended, unix nanoseconds
	floorNS    atomic.Int64  // floor, for readers without mu
	latencyNS  atomic.Int64  // latency, for readers without mu
	gapNS      atomic.Int64  // the time between two calls ending in the last window
	surged     atomic.Bool   // the limit started for a surge: its lane is overloaded at once
	bound                    // the bound while the limit is off (bound.go)

	mu         sync.Mutex // guards the fields below
	winStart   time.Time
	winN       int
	winSum     time.Duration
	idle       bool          // no call was in flight after the last end
	winCPU     time.Duration // the CPU's wait as each run of the window ended, summed
	winRun     int64         // the goroutines waiting for a CPU then, summed
	winIn      int64         // the method's calls in flight then, summed
	windows    int           // windows ended
	peak       int64         // the most calls in flight seen in this window
	rates      [rateWindows]float64
	rateAt     int
	floor      time.Duration // 0 until the first window
	latency    time.Duration // the last window's average
	probeAt    time.Time     // when the next probe may start
	probeStart time.Time
	probeFrom  time.Duration // the service time before the probe
	probeRef   time.Duration // the service time before the probe's step
	drainAt    time.Time     // when the step's calls in flight fell to its limit
	drainN     int           // calls that ended before drainAt, in this step
	drainSum   time.Duration // and their service times
	probeN     int
	probeSum   time.Duration
	probed     bool      // a probe has measured the floor
	served     int64     // what the last healthy window's rate and service time hold, with headroom
	raisedAt   time.Time // when the limit last started or grew
	bad        int       // windows in a row congested, while off
	calm       int       // windows in a row no call met the limit
	high       int       // windows in a row far above the floor
	rounds     rounds
	history    history // the last decisions
}

// base is the limit in force: limit, or probeLimit during a probe; 0 if
// none.
func (l *methodLimit) base() int64 {
	if l.probing.Load() {
		return l.probeLimit.Load()
	}
	return l.limit.Load()
}

// room reports whether one more call may enter the pool.
func (l *methodLimit) room() bool {
	n := l.inForce()
	return n == 0 || l.inflight.Load() < n
}

// end counts the end of a call in the pool, which ran for d (ran false:
// it was dropped unrun) and ended at now; cpu is how long goroutines
// waited for a congested CPU lately, and how many waited, and maxWait
// the longest a call may wait.
func (l *methodLimit) end(d time.Duration, ran bool, now time.Time, cpu cpuSignal, maxWait time.Duration) {
	in := l.inflight.Add(-1) + 1 // in flight with this call
	if !ran {
		return
	}
	prev := l.lastEnd.Swap(now.UnixNano())
	l.mu.Lock()
	defer l.mu.Unlock()
	l.round(d, in, now, cpu)
	if l.probing.Load() {
		l.probe(d, in, now)
		return
	}
	if l.winStart.IsZero() || l.idle && now.UnixNano()-prev > int64(limitWindow) {
		// The first run, or the first after an idle spell, when none
		// was in flight: a window across the spell would read a rate
		// far below the method's. (A slow dependency's calls may end in
		// bursts a service time apart: the gaps between are no spell.)
		l.resetWindow(now)
	}
	l.idle = in == 1
	l.winN++
	l.winSum += d
	l.winCPU += cpu.wait
	l.winRun += int64(cpu.runnable)
	l.winIn += in
	l.peak = max(l.peak, in)
	if l.winN < limitSamples {
		return
	}
	if l.floor == 0 {
		// The first calls to end are the ones that found the dependency
		// idle: before a queue builds, the best view of its floor.
		l.floor = l.winSum / time.Duration(l.winN)
		l.floorNS.Store(int64(l.floor))
	}
	// A window lasts two floors at least, so that most calls that end
	// in it started under the limit it judges.
	if elapsed := time.Duration(now.UnixNano() - l.winStart.UnixNano()); elapsed >= max(limitWindow, 2*l.floor) {
		l.adjust(now, maxWait)
	}
}

// cpuSignal is what the scheduler tells a method limit of the CPU: how
// long goroutines waited for a congested CPU (the median of the last
// readings, 0 if it is not congested), and how many goroutines waited
// for one.
type cpuSignal struct {
	wait     time.Duration
	runnable int
}

// cpuWindow reports whether the CPU's wait explains the window's service
// time, rtt: its rise above the floor is no more than cpuExplains times
// how long goroutines waited for a CPU as its runs ended, if the
// method's calls are the ones that wait for it (no more in flight than
// twice the goroutines runnable), or twice that wait if they are not.
// REQUIRES l.mu is held.
func (l *methodLimit) cpuWindow(rtt time.Duration) bool {
	return l.cpuExplains(rtt, l.winCPU/time.Duration(l.winN), l.winIn, 2*l.winRun)
}

// cpuExplains reports whether a CPU wait of wait explains a service time
// of rtt, with in calls in flight and runnable goroutines waiting for a
// CPU (in the same units): a rise of up to cpuExplains times the wait if
// the method's calls are the runnable ones (a handler may wait for a CPU
// a few times), and of up to twice the wait if they are not (a call that
// waits on I/O waits for a CPU as it starts and as it wakes). REQUIRES
// l.mu is held.
func (l *methodLimit) cpuExplains(rtt, wait time.Duration, in, runnable int64) bool {
	return wait > 0 && rtt-l.floor <= l.cpuRise(wait, in, runnable)
}

// cpuRise is the rise in service time a CPU wait of wait explains, with
// in calls in flight and runnable goroutines (see cpuExplains).
func (l *methodLimit) cpuRise(wait time.Duration, in, runnable int64) time.Duration {
	if in <= runnable {
		return cpuExplains * wait
	}
	return 2 * wait
}

// resetWindow starts a window at now. REQUIRES l.mu is held.
func (l *methodLimit) resetWindow(now time.Time) {
	l.winStart, l.winN, l.winSum, l.winCPU, l.winRun, l.winIn, l.peak = now, 0, 0, 0, 0, 0, 0
}

// congested reports whether a service time of rtt is congested against
// the floor: above it by tolerance, and by more than minExcess (a method
// that takes microseconds has no dependency to protect, and a hiccup, a
// collection or a preemption, is many times its floor). REQUIRES l.mu is
// held.
func (l *methodLimit) congested(rtt time.Duration) bool {
	return float64(rtt) > tolerance*float64(l.floor) && rtt-l.floor > minExcess
}

// adjust sets the limit from the window that ends at now; calls may
// wait up to maxWait. REQUIRES l.mu is held.
func (l *methodLimit) adjust(now time.Time, maxWait time.Duration) {
	rtt := l.winSum / time.Duration(l.winN)
	elapsed := now.Sub(l.winStart)
	rate := float64(l.winN) / elapsed.Seconds()
	l.windows++
	cpu, held, peak := l.cpuWindow(rtt), l.held.Swap(0), l.peak
	meanIn := l.winIn / int64(l.winN) // the calls in flight as the window's runs ended, on average
	// The window's calls started under the limit in force: it began a
	// floor or more after the limit was last raised.
	settled := !l.winStart.Before(l.raisedAt.Add(l.floor))
	l.resetWindow(now)
	l.latency = rtt
	l.latencyNS.Store(int64(rtt))
	l.rates[l.rateAt] = rate
	l.rateAt = (l.rateAt + 1) % rateWindows
	l.gapNS.Store(int64(float64(time.Second) / rate))
	switch {
	case rtt < l.floor:
		// Lower: follow fast, yet not at once, so that one lucky window
		// does not set a floor the service time never keeps.
		l.floor -= (l.floor - rtt) / 4
	}
	l.floorNS.Store(int64(l.floor))
	if cpu && l.limit.Load() == 0 {
		// The CPU's wait raised the service time: the pool's concern. The
		// congested windows that start a limit are two in a row that the
		// CPU does not explain.
		if l.congested(rtt) {
			l.decide(now, "cpu veto", peak, "service time %v, floor %v, explained by the CPU's wait", dur(0, 1), int64(rtt), int64(l.floor))
		}
		l.bad = 0
		return
	}
	excess := rtt - l.floor
	congested := l.congested(rtt)
	limit := l.limit.Load()
	before := limit
	if limit == 0 {
		if !congested {
			l.bad = 0
			l.served = int64(headroom * rate * rtt.Seconds())
			if excess > 0 && 4*excess < l.floor {
				// Not congested, and within a quarter of the floor: the
				// floor follows the service time up, slowly. A larger
				// rise may be a queue, which must not raise the floor it
				// is judged by.
				l.floor += excess / 64
				l.floorNS.Store(int64(l.floor))
			}
			// Many calls in flight, and as many as the rate explains (not
			// a surge building, whose service times are a ramp's): is the
			// floor the floor? Ask once, and again while the service
			// time stays well above it; only of a method whose service
			// time is within half the wait limit, as the probe holds
			// calls back for two or three of them.
			if float64(rtt) > driftRatio*float64(l.floor) {
				l.high++
			} else {
				l.high = 0
			}
			steady := float64(peak) <= 3*rate*rtt.Seconds()+minLimit
			// Not while calls wait beyond the bound from the first call:
			// the bound is what holds them, and the slow start and the
			// surge rule act on it. (A probe early in a cold surge took
			// the lane out of its overload rules, and the dependency sat
			// idle for a bucket while the surge's calls were refused.)
			if steady && held == 0 && peak >= probeConcurrency && l.floor > minExcess && 2*rtt <= maxWait && !now.Before(l.probeAt) && (!l.probed || l.high >= shiftWindows) {
				l.high = 0
				l.startProbe(now, peak)
			}
			return
		}
		if l.bad++; l.bad < 2 {
			return // one such window may be a hiccup
		}
		l.start(now, false, 0)
		l.decide(now, "congested", peak, "service time %v over floor %v, two windows", dur(0, 1), int64(rtt), int64(l.floor))
		return
	}
	switch {
	case congested && !cpu:
		// Down to where the service time would be its floor with
		// headroom (Little's law: a limit three times the dependency's
		// concurrency triples it, and halves), at most by half and to
		// what the dependency serves at its floor: a floor measured too
		// low (a dependency quicker when nearly idle) does not cut a
		// limit that served to below the dependency's concurrency. (Down
		// only to the tolerance, the limit settled at twice the
		// dependency's concurrency, and its calls took twice the
		// service time.)
		limit = max(l.fit(), limit/2, int64(float64(limit)*headroom*float64(l.floor)/float64(rtt)))
		l.calm = 0
		l.decide(now, "down", peak, "service time %v over floor %v", dur(0, 1), int64(rtt), int64(l.floor))
	case held > 0 && float64(rtt) <= roomRatio*float64(l.floor) && 4*meanIn >= 3*limit && settled:
		// Calls wait beyond the limit, and the dependency serves the
		// calls let in at its floor, with most of the limit in flight:
		// it has room. (A window whose calls ran with fewer in flight, or
		// started before the limit was raised, as after a probe, says
		// nothing of the limit: the first calls let in after a probe
		// found the dependency empty.) The limit doubles, as slow start
		// does. (Doubled at a quarter over the floor, a limit of 96 on 64
		// connections went to 192.)
		limit = max(2*limit, l.fit())
		l.raisedAt = now
		l.calm = 0
		l.decide(now, "up", peak, "%d calls held, service time %v, floor %v", dur(1, 2), held, int64(rtt), int64(l.floor))
	case held > 0:
		// Calls wait beyond the limit, and the service time is above the
		// floor but not congested: the calls let in already queue inside
		// the dependency, where nothing orders or sheds them. More would
		// only lengthen that queue (a limit grown by a quarter a window
		// reached three times the dependency's connections, and the
		// calls it served waited 900ms). It holds, at least at what the
		// dependency's rate and floor call for; a floor measured too low
		// is found by the next probe.
		limit = max(limit, l.fit())
		l.calm = 0
	default:
		if l.calm++; l.calm >= calmWindows {
			l.limit.Store(0) // no call met it for a while
			l.calm, l.high = 0, 0
			l.decide(now, "off", peak, "no call met the limit for %d windows", 0, calmWindows)
			return
		}
	}
	l.setLimit(limit)
	if float64(rtt) > shiftRatio*float64(l.floor) {
		if l.high++; l.high >= shiftWindows {
			l.probeAt = now // the floor likely moved: measure it now
		}
	} else {
		l.high = 0
	}
	if !now.Before(l.probeAt) && l.inflight.Load() <= before {
		// (With more calls in flight than the limit, a probe would wait
		// for them to drain first: they queued before the limit started.)
		l.high = 0
		l.startProbe(now, limit)
	}
}

// admitted counts a call entering the pool.
func (l *methodLimit) admitted() { l.inflight.Add(1) }

// start starts the limit at now: what the dependency serves at its floor,
// and no less than what the last healthy window's rate and service time
// held (Little's law), with headroom, so that a floor measured too low
// does not starve a dependency that served as much, nor than atLeast.
// REQUIRES l.mu is held.
func (l *methodLimit) start(now time.Time, surge bool, atLeast int64) {
	l.surged.Store(surge)
	l.setLimit(max(l.fit(), l.served, atLeast))
	l.raisedAt = now
	l.probeAt = now.Add(firstProbe)
	l.bad, l.calm, l.high = 0, 0, 0
}

// startProbe starts a probe of the floor at now, from n calls in flight.
// REQUIRES l.mu is held.
func (l *methodLimit) startProbe(now time.Time, n int64) {
	l.probeStart, l.probeFrom = now, l.latency
	l.probeBase.Store(n)
	l.step(l.latency, l.nextStep(n))
	l.probing.Store(true)
	l.decide(now, "probe", l.inflight.Load(), "service time %v, floor %v, %d in flight", dur(0, 1), int64(l.latency), int64(l.floor), n)
}

// step starts a probe's step at limit n, from a service time of ref.
// REQUIRES l.mu is held.
func (l *methodLimit) step(ref time.Duration, n int64) {
	l.probeRef, l.drainAt, l.probeN, l.probeSum, l.drainN, l.drainSum = ref, time.Time{}, 0, 0, 0, 0
	l.probeLimit.Store(n)
}

// fit is the limit the dependency's recent rate and floor call for.
// REQUIRES l.mu is held.
func (l *methodLimit) fit() int64 {
	return int64(max(minLimit, headroom*l.rate()*l.floor.Seconds()))
}

// rate is the most calls completed per second in the last windows.
// REQUIRES l.mu is held.
func (l *methodLimit) rate() float64 {
	rate := 0.0
	for _, r := range l.rates {
		rate = max(rate, r)
	}
	return rate
}

// inService is how many calls the dependency serves at once, by Little's
// law: its recent rate times the floor. REQUIRES l.mu is held.
func (l *methodLimit) inService() int64 {
	return int64(math.Ceil(l.rate() * l.floor.Seconds()))
}

// nextStep is the limit of a probe's step that follows one at n: half
// of n, but no lower than the calls the dependency serves at its floor
// while n is above them. A step there keeps the dependency as busy as
// before, so a probe that confirms the floor costs no throughput; only a
// service time still off the floor at that step sends the probe lower.
// REQUIRES l.mu is held.
func (l *methodLimit) nextStep(n int64) int64 {
	if e := l.inService(); e < n {
		return max(minLimit, n/2, e)
	}
	return max(minLimit, n/2)
}

// probe counts a call that ended during a probe, which was in flight with
// in calls. REQUIRES l.mu is held.
func (l *methodLimit) probe(d time.Duration, in int64, now time.Time) {
	n := l.probeLimit.Load()
	if l.drainAt.IsZero() {
		// The calls that end while the calls in flight drain to the
		// step's limit started before it: their service time is the
		// one the step is compared with.
		l.drainN++
		l.drainSum += d
		if in-1 <= n { // from now on, calls start with at most n in flight
			l.drainAt = now
			l.probeRef = l.drainSum / time.Duration(l.drainN)
		}
	} else if !now.Add(-d).Before(l.drainAt) {
		l.probeN++
		l.probeSum += d
	}
	if l.probeN >= probeSamples {
		rtt := l.probeSum / time.Duration(l.probeN)
		switch {
		case n >= l.inService() && float64(rtt) <= driftRatio*float64(l.floor):
			// With as many calls in flight as the dependency serves at
			// the floor, the service time is the floor's (or lower): the
			// floor holds, and no step lower is needed to see it. (A
			// step above those calls may queue a little: the floor is
			// not raised by it.)
			l.endProbe(now, min(rtt, l.floor))
			return
		case n > minLimit && float64(rtt) < probeFall*float64(l.probeRef):
			// The service time fell with the calls in flight: they were
			// queueing before the dependency, whose floor lies lower.
			l.step(rtt, l.nextStep(n))
			return
		case probeFall*float64(rtt) > float64(l.probeRef):
			// It rose with fewer calls in flight: the load changed
			// meanwhile (a surge building). Measure again at n.
			l.step(rtt, n)
			l.drainAt = now
			return
		}
		l.endProbe(now, rtt)
		return
	}
	if now.Sub(l.probeStart) >= probeTimeout {
		l.endProbe(now, 0)
	}
}

// endProbe ends a probe at now that found floor, or none (0). A method
// not limited is limited from now if its service time before the probe
// was congested against the floor found. REQUIRES l.mu is held.
func (l *methodLimit) endProbe(now time.Time, floor time.Duration) {
	if floor > 0 {
		if float64(floor) > driftRatio*float64(l.floor) || driftRatio*float64(floor) < float64(l.floor) {
			// The dependency changed: the rates of the windows before it
			// say nothing of it now. Keep the last window's alone.
			last := l.rates[(l.rateAt+rateWindows-1)%rateWindows]
			for i := range l.rates {
				l.rates[i] = last
			}
		}
		l.floor, l.probed = floor, true
		l.floorNS.Store(int64(floor))
		l.raisedAt = now // the limit, lowered for the probe, is back
		if limit := l.limit.Load(); limit != 0 {
			// The limit follows a floor found higher (a dependency
			// slower for good); a lower one acts at the next congested
			// window, not here: a limit that served is not cut.
			l.setLimit(max(limit, l.fit()))
		} else if float64(l.probeFrom) > tolerance*float64(floor) && l.probeFrom-floor > minExcess {
			l.setLimit(max(l.probeLimit.Load(), l.fit()))
			l.bad, l.calm, l.high = 0, 0, 0
		}
	}
	l.probing.Store(false)
	if floor > 0 {
		l.decide(now, "floor", l.inflight.Load(), "a probe measured %v; service time before it %v", dur(0, 1), int64(floor), int64(l.probeFrom))
	}
	l.probeAt = now.Add(max(probeEvery, 50*l.floor))
	l.resetWindow(now)
	l.held.Store(0)
}

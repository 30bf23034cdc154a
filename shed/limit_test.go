package shed

import (
	"testing"
	"time"
)

// limitClock drives a methodLimit on a fake clock, with calls that end in
// order.
type limitClock struct {
	l   *methodLimit
	now time.Time
	cpu time.Duration // how long goroutines wait for a congested CPU as calls end
	run int           // how many goroutines wait for one then
}

// cpuSignal is what the scheduler would tell the limit of the CPU.
func (c *limitClock) cpuSignal() cpuSignal { return cpuSignal{wait: c.cpu, runnable: c.run} }

// newLimitClock returns a limitClock on a method whose floor is taken as
// probed, so that its limit follows the service time alone.
func newLimitClock() *limitClock {
	c := &limitClock{l: new(methodLimit), now: time.Now()}
	c.l.winStart = c.now
	c.l.lastEnd.Store(c.now.UnixNano())
	c.l.probed = true
	return c
}

// drainTo ends a call that took d, with n calls in flight after it: the
// probe's step has drained to n.
func (c *limitClock) drainTo(n int64, d time.Duration) {
	c.l.inflight.Store(n + 1)
	c.now = c.now.Add(time.Millisecond)
	c.l.end(d, true, c.now, cpuSignal{}, time.Second)
}

// probeStep ends n calls that each took d, with the probe's limit in
// flight, each after the one before (so each started after the calls in
// flight drained).
func (c *limitClock) probeStep(n int, d time.Duration) {
	for range n {
		c.now = c.now.Add(d + time.Millisecond)
		c.l.inflight.Store(c.l.probeLimit.Load())
		c.l.end(d, true, c.now, cpuSignal{}, time.Second)
	}
}

// window runs n calls that each took d, spread over limitWindow, and
// ends the window. The calls in flight as each ends are what Little's law
// gives.
func (c *limitClock) window(n int, d time.Duration) {
	c.windowIn(n, d, int64(n)*int64(d)/int64(limitWindow)+1)
}

// windowIn is window with inflight calls in flight as each ends. A window
// that must last two floors is as much longer, with its n calls spread
// over it.
func (c *limitClock) windowIn(n int, d time.Duration, inflight int64) {
	length := max(limitWindow, 2*c.l.floor)
	for range n {
		c.l.inflight.Store(inflight)
		c.now = c.now.Add(length / time.Duration(n))
		c.l.end(d, true, c.now, c.cpuSignal(), time.Second)
	}
}

// congest runs windows at 640 calls/s taking 20ms, then two at 60ms: the
// limit starts at headroom × 640/s × 20ms = 19.
func (c *limitClock) congest(t *testing.T) int64 {
	t.Helper()
	for range 3 {
		c.window(64, 20*time.Millisecond)
	}
	c.window(64, 60*time.Millisecond)
	c.window(64, 60*time.Millisecond)
	if got := c.l.limit.Load(); got != 19 {
		t.Fatalf("limit %d once congested, want 19 (headroom × 640/s × 20ms)", got)
	}
	return 19
}

// A method's limit stays off while its service time is near its floor,
// and starts when the service time rises, two windows in a row, at what
// the dependency serves at the floor with headroom.
func TestMethodLimitFollowsServiceTime(t *testing.T) {
	c := newLimitClock()
	for range 5 {
		c.window(64, 20*time.Millisecond) // 640 calls/s at 20ms
	}
	if c.l.limit.Load() != 0 || c.l.floor != 20*time.Millisecond {
		t.Fatalf("limit %d, floor %v at the floor; want off, 20ms", c.l.limit.Load(), c.l.floor)
	}
	c.window(64, 38*time.Millisecond) // within tolerance
	if c.l.limit.Load() != 0 {
		t.Fatalf("limit %d at 1.9× the floor, want off", c.l.limit.Load())
	}
	// Three times the floor: one such window may be a hiccup; the
	// second starts the limit.
	c.window(64, 60*time.Millisecond)
	if c.l.limit.Load() != 0 {
		t.Fatalf("limit %d after one congested window, want off", c.l.limit.Load())
	}
	c.window(64, 60*time.Millisecond)
	if got := c.l.limit.Load(); got != 36 {
		t.Fatalf("limit %d once congested, want 36: above headroom × 640/s × 20ms = 19, what the last healthy window held, headroom × 640/s × 38ms", got)
	}
	if c.l.floor != 20*time.Millisecond {
		t.Fatalf("floor %v after congested windows, want 20ms: a queue must not raise it", c.l.floor)
	}
}

// A limit with calls waiting beyond it doubles while the service time is
// near the floor, judged on windows whose calls started under it, and
// holds while it is above the floor but not congested (the calls let in
// queue inside the dependency); a
// congested window brings it down toward what the dependency serves at
// its floor, as much as the service time is over its tolerance, by at
// most half at a time; it turns off after calm windows in which no call
// met it.
func TestMethodLimitGrowsShrinksAndTurnsOff(t *testing.T) {
	c := newLimitClock()
	limit := c.congest(t)
	c.l.probeAt = c.now.Add(time.Hour) // no probe meanwhile
	for _, step := range []struct {
		rtt  time.Duration
		grow func(int64) int64
	}{
		{22 * time.Millisecond, func(n int64) int64 { return n }},     // its calls started before the limit
		{22 * time.Millisecond, func(n int64) int64 { return 2 * n }}, // near the floor: doubles
		{22 * time.Millisecond, func(n int64) int64 { return n }},     // its calls started before that
		{22 * time.Millisecond, func(n int64) int64 { return 2 * n }},
		{22 * time.Millisecond, func(n int64) int64 { return n }},
		{35 * time.Millisecond, func(n int64) int64 { return n }}, // above it: holds
	} {
		c.l.held.Add(10) // calls wait beyond the limit, which is in flight
		c.windowIn(64, step.rtt, limit)
		if got, want := c.l.limit.Load(), step.grow(limit); got != want {
			t.Fatalf("limit %d after a window at %v with calls held, want %d", got, step.rtt, want)
		}
		limit = c.l.limit.Load()
	}
	for range 4 {
		c.l.held.Add(10)
		c.windowIn(64, 35*time.Millisecond, limit)
	}
	if got := c.l.limit.Load(); got != limit {
		t.Fatalf("limit %d after 4 more windows at 35ms with calls held, want it held at %d", got, limit)
	}
	c.window(64, 45*time.Millisecond) // 2.25 times the floor: congested
	if got, want := c.l.limit.Load(), limit*2/3; got != want {
		t.Fatalf("limit %d after a congested window from %d, want %d: where the service time would be its floor with headroom, 1.5 × 20ms of 45ms", got, limit, want)
	}
	limit = c.l.limit.Load()
	c.window(64, 60*time.Millisecond) // three times the floor
	if got, want := c.l.limit.Load(), limit/2; got != want {
		t.Fatalf("limit %d after a congested window from %d, want %d: at most half", got, limit, want)
	}
	for range 8 {
		c.window(64, 60*time.Millisecond)
	}
	if got := c.l.limit.Load(); got != 19 {
		t.Fatalf("limit %d after congested windows, want 19, what the dependency serves at its floor", got)
	}
	for range calmWindows - 1 {
		c.window(8, 20*time.Millisecond)
	}
	if c.l.limit.Load() == 0 {
		t.Fatalf("limit off before %d calm windows", calmWindows)
	}
	c.window(8, 20*time.Millisecond)
	if got := c.l.limit.Load(); got != 0 {
		t.Fatalf("limit %d after %d calm windows, want off", got, calmWindows)
	}
}

// A service time that rises by no more than minExcess is not congestion:
// a method of microseconds has no dependency to protect. Nor is a rise
// that the CPU's wait explains: that is the pool's to limit.
func TestMethodLimitIgnoresSmallAndCPURises(t *testing.T) {
	c := newLimitClock()
	for range 3 {
		c.window(64, 20*time.Microsecond)
	}
	for range 3 {
		c.window(64, time.Millisecond) // 50× its floor, 1ms more
	}
	if got := c.l.limit.Load(); got != 0 {
		t.Fatalf("limit %d for a 1ms rise, want off", got)
	}
	c = newLimitClock()
	for range 3 {
		c.window(64, 20*time.Millisecond)
	}
	c.cpu = 15 * time.Millisecond // explains a rise of up to 60ms
	c.run = 20                    // for the 39 calls in flight: they want the CPU
	for range 3 {
		c.window(64, 60*time.Millisecond)
	}
	if got := c.l.limit.Load(); got != 0 {
		t.Fatalf("limit %d for a rise the CPU's wait explains, want off", got)
	}
	c.cpu = 0
	c.window(64, 60*time.Millisecond)
	c.window(64, 60*time.Millisecond)
	if c.l.limit.Load() == 0 {
		t.Fatal("no limit once the CPU was calm and the service time still high")
	}
	// A CPU that other work keeps busy does not hide a dependency that
	// slowed tenfold: its wait explains a few milliseconds, not 180.
	c = newLimitClock()
	for range 3 {
		c.window(64, 20*time.Millisecond)
	}
	c.cpu = 2 * time.Millisecond
	c.window(16, 200*time.Millisecond)
	c.window(16, 200*time.Millisecond)
	if c.l.limit.Load() == 0 {
		t.Fatal("no limit for a rise of 180ms the CPU's wait of 2ms does not explain")
	}
}

// A dependency that became slower for good: the floor moves. The service
// time stays far above the old floor for shiftWindows, which brings a
// probe: the limit halves, and once the calls in flight drained to it,
// the next calls measure the new floor, from which the limit is fitted.
func TestMethodLimitProbesANewFloor(t *testing.T) {
	c := newLimitClock()
	c.congest(t)
	for range shiftWindows {
		if c.l.probing.Load() {
			break
		}
		c.windowIn(16, 200*time.Millisecond, c.l.limit.Load())
	}
	if !c.l.probing.Load() {
		t.Fatalf("no probe after %d windows at 10× the floor", shiftWindows)
	}
	probe := c.l.probeLimit.Load()
	if probe != max(minLimit, c.l.limit.Load()/2) || c.l.base() != probe {
		t.Fatalf("probe limit %d (in force %d) of limit %d, want half", probe, c.l.base(), c.l.limit.Load())
	}
	// A call that ends before the calls in flight drained does not count;
	// then probeSamples calls that started after that end.
	c.l.inflight.Store(probe + 5)
	c.now = c.now.Add(time.Millisecond)
	c.l.end(200*time.Millisecond, true, c.now, cpuSignal{}, time.Second)
	c.l.inflight.Store(probe)
	c.now = c.now.Add(time.Millisecond)
	c.l.end(200*time.Millisecond, true, c.now, cpuSignal{}, time.Second) // drained here
	c.probeStep(probeSamples, 200*time.Millisecond)
	if c.l.probing.Load() || c.l.floor != 200*time.Millisecond {
		t.Fatalf("after the probe: probing %v, floor %v; want done, 200ms", c.l.probing.Load(), c.l.floor)
	}
	if c.l.limit.Load() < probe {
		t.Fatalf("limit %d after the probe, below the probe's %d", c.l.limit.Load(), probe)
	}
}

// A window does not span an idle spell, when no call was in flight: the
// rate it read would be far below the method's, and a few calls in
// flight after it would look like a surge (a provider whose callers were
// all stuck on a frozen peer for seconds was limited so).
func TestMethodLimitWindowSkipsIdleSpells(t *testing.T) {
	c := newLimitClock()
	for range 3 {
		c.window(64, 10*time.Millisecond)
	}
	c.l.inflight.Store(1) // the last call in flight ends
	c.l.end(10*time.Millisecond, true, c.now, cpuSignal{}, time.Second)
	c.now = c.now.Add(5 * time.Second) // nothing arrives meanwhile
	// 800 calls/s at 10ms: 9 in flight is no surge.
	for range 100 {
		c.l.inflight.Store(9)
		c.now = c.now.Add(1250 * time.Microsecond)
		c.l.end(10*time.Millisecond, true, c.now, cpuSignal{}, time.Second)
	}
	if got := c.l.limit.Load(); got != 0 {
		t.Fatalf("limit %d after an idle spell, 800 calls/s at 10ms with 9 in flight, want off", got)
	}
}

// A slow dependency's calls may end in bursts a service time apart: with
// calls in flight meanwhile, the gaps are no idle spell, and the windows
// that span them see its rate and its service time.
func TestMethodLimitWindowSpansBurstsOfEnds(t *testing.T) {
	c := newLimitClock()
	for range 3 {
		c.window(64, 20*time.Millisecond)
	}
	// The dependency slows to 200ms: 64 calls end together every 200ms,
	// 600 in flight.
	for range 4 {
		c.now = c.now.Add(200 * time.Millisecond)
		for range 64 {
			c.l.inflight.Store(600)
			c.l.end(200*time.Millisecond, true, c.now, cpuSignal{}, time.Second)
		}
	}
	if c.l.limit.Load() == 0 || c.l.latency != 200*time.Millisecond {
		t.Fatalf("limit %d, latency %v after bursts of ends at 200ms; want a limit, 200ms", c.l.limit.Load(), c.l.latency)
	}
}

// A congested limit follows the dependency: the most calls completed per
// second in the last windows, times the floor, with headroom, so a
// dependency that serves fewer calls gets fewer.
func TestMethodLimitFitsTheRate(t *testing.T) {
	c := newLimitClock()
	c.congest(t)
	for range rateWindows + 3 {
		c.windowIn(32, 60*time.Millisecond, 19) // 320 calls/s now
	}
	if got, want := c.l.limit.Load(), int64(9); got != want {
		t.Fatalf("limit %d at 320 calls/s, want %d (headroom × 320/s × 20ms)", got, want)
	}
}

// A method saturated from its first call shows no rise above the floor
// it was first seen at: its calls in flight reaching probeConcurrency
// bring a probe, whose steps halve the limit while the service time falls
// with it (the calls were queueing before the dependency) and stop where
// it no longer does, at the true floor. The service time before the probe
// being congested against that floor, the limit starts.
func TestMethodLimitProbeFindsTheFloorOfASaturatedMethod(t *testing.T) {
	c := newLimitClock()
	c.l.probed = false
	// 100 callers on 8 slots × 2ms: 4000 calls/s, each 25ms.
	c.windowIn(400, 25*time.Millisecond, 100)
	if !c.l.probing.Load() || c.l.probeLimit.Load() != 50 {
		t.Fatalf("probing %v at %d, want a probe at 50 of the 100 in flight", c.l.probing.Load(), c.l.probeLimit.Load())
	}
	// A call at the 100 in flight (25ms) ends as the calls drain to 50,
	// then 8 take 12.5ms: the service time halved with the calls in
	// flight. And so on down to the 8 slots and below.
	prev := 25 * time.Millisecond
	for _, n := range []int64{50, 25, 12} {
		c.drainTo(n, prev)
		prev = time.Duration(n) * 250 * time.Microsecond
		c.probeStep(probeSamples, prev)
		if want := max(minLimit, n/2); !c.l.probing.Load() || c.l.probeLimit.Load() != want {
			t.Fatalf("after the step at %d: probing %v at %d; want a step at %d", n, c.l.probing.Load(), c.l.probeLimit.Load(), want)
		}
	}
	// At 6 of 8 slots the service time is the floor, 2ms, yet down by a
	// third from 3ms at 12: one more step, at 4, shows it no longer falls.
	c.drainTo(6, prev)
	c.probeStep(probeSamples, 2*time.Millisecond)
	c.drainTo(4, 2*time.Millisecond)
	c.probeStep(probeSamples, 2*time.Millisecond)
	if c.l.probing.Load() || c.l.floor != 2*time.Millisecond {
		t.Fatalf("probing %v, floor %v; want done at 2ms", c.l.probing.Load(), c.l.floor)
	}
	if got := c.l.limit.Load(); got != 12 {
		t.Fatalf("limit %d after the probe, want 12 (headroom × 4000/s × 2ms)", got)
	}
}

// A method with many calls in flight whose service time does not fall
// when they are halved has no queue before its dependency: the probe
// confirms the floor at its first step, and the limit stays off.
func TestMethodLimitProbeLeavesAnUnboundedDependencyAlone(t *testing.T) {
	c := newLimitClock()
	c.l.probed = false
	c.windowIn(4000, 50*time.Millisecond, 2000) // 2,000 callers of a 50ms sleep
	if !c.l.probing.Load() {
		t.Fatal("no probe at 2,000 calls in flight")
	}
	c.drainTo(1000, 50*time.Millisecond)
	c.probeStep(probeSamples, 50*time.Millisecond)
	if c.l.probing.Load() || c.l.limit.Load() != 0 || c.l.floor != 50*time.Millisecond {
		t.Fatalf("probing %v, limit %d, floor %v; want done, off, 50ms", c.l.probing.Load(), c.l.limit.Load(), c.l.floor)
	}
	for range 5 {
		c.windowIn(4000, 50*time.Millisecond, 2000)
	}
	if c.l.probing.Load() || c.l.limit.Load() != 0 {
		t.Fatal("probed or limited again")
	}
}

// A window whose calls ran with fewer in flight than the limit, as after
// a probe that measured the floor with a few, says nothing of the limit:
// calls held beyond it and a service time at the floor do not double it.
func TestMethodLimitDoesNotGrowOnAWindowBelowIt(t *testing.T) {
	c := newLimitClock()
	limit := c.congest(t)
	c.l.probeAt = c.now.Add(time.Hour)
	c.windowIn(64, 20*time.Millisecond, limit) // the limit's first window: its calls started before it
	c.l.held.Add(10)
	c.windowIn(64, 20*time.Millisecond, limit/4)
	if got := c.l.limit.Load(); got != limit {
		t.Fatalf("limit %d after a window at the floor with a quarter of it in flight, want %d", got, limit)
	}
	c.l.held.Add(10)
	c.windowIn(64, 20*time.Millisecond, limit)
	if got := c.l.limit.Load(); got != 2*limit {
		t.Fatalf("limit %d after a window at the floor with the limit in flight, want %d", got, 2*limit)
	}
}

// newProbedAt returns a limitClock on the io workload's dependency (64
// connections × 20ms: 3,200 calls/s at the floor), limited at limit, and
// probing from it.
func newProbedAt(limit int64) *limitClock {
	c := newLimitClock()
	for range 3 {
		c.window(320, 20*time.Millisecond)
	}
	c.l.mu.Lock()
	c.l.setLimit(limit)
	c.l.startProbe(c.now, limit)
	c.l.mu.Unlock()
	return c
}

// A probe of a limited method never takes fewer calls in flight than the
// dependency serves at its floor (its rate times the floor, by Little's
// law) while the service time there is the floor's: the dependency stays
// as busy as before, and the probe confirms the floor at that step. The
// io workload's dependency, 64 connections × 20ms: 3,200 calls/s, 64 in
// service; a limit of 100 probed halves to 50 no more, but steps to 64.
func TestMethodLimitProbeKeepsTheDependencyBusy(t *testing.T) {
	c := newProbedAt(100)
	if got := c.l.probeLimit.Load(); got != 64 {
		t.Fatalf("probe's step at %d of a limit of 100, want 64: the calls 3,200/s × 20ms keeps in service", got)
	}
	// The calls queued at 100 took 31ms; at 64, the floor's 20ms.
	c.drainTo(64, 31*time.Millisecond)
	c.probeStep(probeSamples, 20*time.Millisecond)
	if c.l.probing.Load() || c.l.floor != 20*time.Millisecond || c.l.limit.Load() != 100 {
		t.Fatalf("probing %v, floor %v, limit %d; want done at the step, floor 20ms, the limit kept at 100",
			c.l.probing.Load(), c.l.floor, c.l.limit.Load())
	}
}

// A step at the calls the dependency serves at the floor whose service
// time is still well above it means the floor is stale (the dependency
// serves fewer at once, or slowed): the probe goes on down, halving
// while the service time falls, and finds the new floor.
func TestMethodLimitProbeGoesBelowTheServedCallsForAStaleFloor(t *testing.T) {
	c := newProbedAt(128)
	if got := c.l.probeLimit.Load(); got != 64 {
		t.Fatalf("first step at %d of 128, want 64 (half, and the calls in service)", got)
	}
	// The dependency now serves 16 at once, 20ms each: at 64 in flight a
	// call takes 80ms, at 32 40ms, at 16 20ms, and at 8 still 20ms.
	ref := 160 * time.Millisecond
	for _, n := range []int64{64, 32, 16, 8} {
		if got := c.l.probeLimit.Load(); !c.l.probing.Load() || got != n {
			t.Fatalf("probing %v at %d, want a step at %d", c.l.probing.Load(), got, n)
		}
		rtt := time.Duration(max(n, 16)) * 20 * time.Millisecond / 16
		c.drainTo(n, ref)
		c.probeStep(probeSamples, rtt)
		ref = rtt
	}
	if c.l.probing.Load() || c.l.floor != 20*time.Millisecond {
		t.Fatalf("probing %v, floor %v; want done, the floor 20ms found at 16 and 8 in flight", c.l.probing.Load(), c.l.floor)
	}
}

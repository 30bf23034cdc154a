package shed

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// costTask is a test task of a method (cost) and a flow.
type costTask struct {
	*task
	f *Flow
}

func (t costTask) Flow() *Flow { return t.f }

// limited returns a method whose limit is n, as if it had been congested.
func limited(n int64) *ServiceTime {
	c := new(ServiceTime)
	c.lim.limit.Store(n)
	return c
}

// call submits a task of method c and flow f that runs until release is
// closed (or at once, if release is nil).
func (h *harness) call(name string, prio int, c *ServiceTime, f *Flow, release chan struct{}) *task {
	tk := h.task(name, prio)
	tk.cost, tk.release = c, release
	if release != nil {
		tk.started = h.started
	}
	h.s.Submit(costTask{tk, f})
	return tk
}

// A method at its limit holds its next calls in its lane, where they wait
// for one of its calls to end, and leaves other methods alone: a
// bulkhead.
func TestLaneHoldsCallsBeyondTheLimit(t *testing.T) {
	h := newHarness(t, Options{})
	h.fakeClock() // no window ends: the limit stays as set
	h.fakeCPU(cpuReading{})
	slow, fast := limited(4), new(ServiceTime)
	releases := make([]chan struct{}, 4)
	for i := range releases {
		releases[i] = make(chan struct{})
		h.call(fmt.Sprint("slow", i), 5, slow, nil, releases[i])
	}
	h.waitStarted(4)
	h.call("slow-next", 5, slow, nil, nil)
	h.call("fast", 5, fast, nil, nil)
	h.expect("fast:ran") // the other method is not held
	if l := slow.Limit(); l.Limit != 4 || l.InFlight != 4 || l.Queued != 1 {
		t.Fatalf("slow method's limit: %+v; want 4 in flight, 1 queued", l)
	}
	close(releases[0])
	h.expect("slow0:ran", "slow-next:ran")
	for _, r := range releases[1:] {
		close(r)
	}
	for range 3 {
		h.next()
	}
	h.s.Close()
	h.s.Wait() // the scheduler counts a task out once its Run returned
	if l := slow.Limit(); l.InFlight != 0 || l.Queued != 0 || l.Limited != 0 {
		t.Fatalf("slow method after every call ended: %+v", l)
	}
}

// The lane lets the most important waiting call in first.
func TestLaneReleasesByPriority(t *testing.T) {
	h := newHarness(t, Options{})
	h.fakeClock()
	h.fakeCPU(cpuReading{})
	c := limited(1)
	release := make(chan struct{})
	h.call("first", 5, c, nil, release)
	h.waitStarted(1)
	h.call("p0", 0, c, nil, nil)
	h.call("p9", 9, c, nil, nil)
	h.call("p5", 5, c, nil, nil)
	close(release)
	h.expect("first:ran", "p9:ran", "p5:ran", "p0:ran")
}

// A call that cannot start in time is refused at once (Limited): its
// method's calls start one every service time divided by the limit, and
// those ahead of it would take it past the wait limit.
func TestLaneRefusesWhatCannotStartInTime(t *testing.T) {
	h := newHarness(t, Options{MaxWait: 100 * time.Millisecond})
	h.fakeClock()
	h.fakeCPU(cpuReading{})
	c := limited(2)
	for range minObservations {
		c.Observe(100 * time.Millisecond) // a call starts every 50ms
	}
	release := make(chan struct{})
	defer close(release)
	h.call("a", 5, c, nil, release)
	h.call("b", 5, c, nil, release)
	h.waitStarted(2)
	h.call("wait1", 5, c, nil, nil) // starts in 50ms
	h.call("wait2", 5, c, nil, nil) // in 100ms
	h.call("late", 5, c, nil, nil)  // in 150ms: refused
	h.expect("late:limited")
	h.call("important", 9, c, nil, nil) // ahead of the others: in 50ms
	if l := c.Limit(); l.Queued != 3 || l.Limited != 1 {
		t.Fatalf("lane: %+v; want 3 queued, 1 refused", l)
	}
}

// A call that waits in the lane past the wait limit (the method's calls
// stopped ending) is answered unrun, at its method's limit.
func TestLaneCallExpires(t *testing.T) {
	h := newHarness(t, Options{MaxWait: 10 * time.Millisecond})
	h.fakeCPU(cpuReading{})
	c := limited(1)
	release := make(chan struct{})
	defer close(release)
	h.call("stuck", 5, c, nil, release)
	h.waitStarted(1)
	h.call("waiting", 5, c, nil, nil)
	h.expect("waiting:limited") // answered at its method's limit
	if l := c.Limit(); l.Queued != 0 {
		t.Fatalf("lane after the expiry: %+v", l)
	}
}

// When the limit turns off, the calls waiting in the lane start as soon as
// a call of the method ends.
func TestLaneOpensWhenTheLimitTurnsOff(t *testing.T) {
	h := newHarness(t, Options{})
	h.fakeClock()
	h.fakeCPU(cpuReading{})
	c := limited(1)
	release := make(chan struct{})
	h.call("first", 5, c, nil, release)
	h.waitStarted(1)
	second := make(chan struct{})
	defer close(second)
	h.call("a", 5, c, nil, second)
	h.call("b", 5, c, nil, second)
	c.lim.limit.Store(0)
	close(release)
	h.expect("first:ran")
	h.waitStarted(2) // both started, together
}

// In a lane under pressure, a flow lighter than the heaviest takes the
// place of the heaviest's newest queued call: a flooder gets what the
// others leave.
func TestLaneIsFairBetweenFlows(t *testing.T) {
	h := newHarness(t, Options{MaxWait: 100 * time.Millisecond})
	h.fakeClock()
	h.fakeCPU(cpuReading{})
	c := limited(2)
	for range minObservations {
		c.Observe(100 * time.Millisecond) // a call starts every 50ms: two may wait
	}
	var flooder, honest Flow
	release := make(chan struct{})
	h.call("f0", 5, c, &flooder, release)
	h.call("f1", 5, c, &flooder, release)
	h.waitStarted(2)
	h.call("f2", 5, c, &flooder, nil)
	h.call("f3", 5, c, &flooder, nil)
	h.call("f4", 5, c, &flooder, nil)
	h.expect("f4:limited")
	h.call("honest", 5, c, &honest, nil)
	h.expect("f3:limited") // evicted from the lane: at its method's limit
	if flooder.InFlight() != 3 || honest.InFlight() != 1 {
		t.Fatalf("in flight: flooder %d, honest %d; want 3, 1", flooder.InFlight(), honest.InFlight())
	}
	close(release)
	h.expectAll("f0:ran", "f1:ran", "f2:ran", "honest:ran")
	h.s.Close()
	h.s.Wait()
	if flooder.InFlight() != 0 || honest.InFlight() != 0 {
		t.Fatalf("flows still counted: flooder %d, honest %d", flooder.InFlight(), honest.InFlight())
	}
}

// expectAll waits for the tasks want to end, in any order.
func (h *harness) expectAll(want ...string) {
	h.t.Helper()
	left := map[string]bool{}
	for _, w := range want {
		left[w] = true
	}
	for range want {
		if got := h.next(); !left[got] {
			h.t.Fatalf("got %q, want one of %v", got, left)
		} else {
			delete(left, got)
		}
	}
}

// A full pool queue makes room for a flow lighter than the heaviest by
// evicting the heaviest's newest queued call, even of the same priority.
func TestFullQueueEvictsTheFlooder(t *testing.T) {
	h := newHarness(t, Options{Workers: 1, QueueSize: 4})
	var flooder, honest Flow
	release := h.blocker("block")
	for i := range 4 {
		h.s.Submit(costTask{h.task(fmt.Sprint("flood", i), 5), &flooder})
	}
	h.s.Submit(costTask{h.task("honest", 5), &honest})
	h.expect("flood3:evicted")
	h.s.Submit(costTask{h.task("flood4", 5), &flooder})
	h.expect("flood4:refused")
	close(release)
	h.expect("block:ran", "flood0:ran", "flood1:ran", "flood2:ran", "honest:ran")
}

// Under random concurrent load on the elastic pool with method limits,
// every task ends exactly once, the ceiling holds, no method has more
// calls running than its limit, and the flows and limits count every
// task out again.
func TestElasticConcurrentInvariants(t *testing.T) {
	const ceiling, total = 16, 4000
	s := New(Options{MaxInFlight: ceiling, QueueSize: 32, MaxWait: 5 * time.Millisecond})
	s.now = func() time.Time { return time.Unix(0, 0) } // no window ends: the limits stay
	var running, peak, ended atomic.Int64
	var wg sync.WaitGroup
	wg.Add(total)
	methods := []*limitedMethod{{c: limited(6), limit: 6}, {c: limited(3), limit: 3}, {c: new(ServiceTime), limit: ceiling}}
	flows := make([]Flow, 4)
	for g := range 8 {
		go func() {
			for i := range total / 8 {
				c := &countTask{prio: (g + i) % Levels, running: &running, peak: &peak, ended: &ended, wg: &wg, spin: i % 50}
				s.Submit(&methodTask{countTask: c, m: methods[i%len(methods)], f: &flows[g%4]})
			}
		}()
	}
	wg.Wait()
	checkEveryTaskEndedOnce(t, s, total, ceiling, peak.Load(), ended.Load())
	for i, m := range methods {
		if l := m.c.Limit(); l.InFlight != 0 || l.Queued != 0 {
			t.Errorf("method %d: %+v after every task ended", i, l)
		}
		if p := m.peak.Load(); p > int64(m.limit) {
			t.Errorf("method %d: %d ran at once, limit %d", i, p, m.limit)
		}
	}
	for i := range flows {
		if n := flows[i].InFlight(); n != 0 {
			t.Errorf("flow %d: %d counted in flight", i, n)
		}
	}
}

type limitedMethod struct {
	c             *ServiceTime
	limit         int
	running, peak atomic.Int64
}

type methodTask struct {
	*countTask
	m *limitedMethod
	f *Flow
}

func (t *methodTask) Cost() *ServiceTime { return t.m.c }
func (t *methodTask) Flow() *Flow        { return t.f }
func (t *methodTask) Run() {
	n := t.m.running.Add(1)
	for p := t.m.peak.Load(); n > p && !t.m.peak.CompareAndSwap(p, n); p = t.m.peak.Load() {
	}
	t.m.running.Add(-1)
	t.countTask.Run()
}

// A method whose calls took long while a queue built before its
// dependency does not have every later call skipped for its deadline:
// while its limit is on, a call admitted runs about its floor; and an
// estimate that no run has refreshed for as long as itself skips nothing.
func TestDeadlineSkipAfterASurge(t *testing.T) {
	h := newHarness(t, Options{})
	h.fakeCPU(cpuReading{})
	now, advance := h.fakeClock()
	cost := new(ServiceTime)
	for range minObservations {
		cost.Observe(time.Second) // the surge's calls waited a second
	}
	cost.lim.lastEnd.Store(now().UnixNano())
	call := func(name string) {
		tk := h.task(name, 5)
		tk.cost = cost
		tk.deadline = now().Add(500 * time.Millisecond)
		h.s.Submit(tk)
	}
	call("surge")
	h.expect("surge:deadline")
	cost.lim.limit.Store(100)
	cost.lim.floorNS.Store(int64(20 * time.Millisecond))
	call("limited")
	h.expect("limited:ran")
	cost.lim.limit.Store(0)
	advance(2 * time.Second) // nothing ended since: the estimate is stale
	call("stale")
	h.expect("stale:ran")
}

// A process that was paused (SIGSTOP, a frozen VM) sees its calls in
// flight end together, each having taken the pause's length: those runs
// say nothing of the dependency and are left out of the method's limit,
// while a run that started after the pause counts.
func TestPausedRunsAreLeftOutOfTheLimit(t *testing.T) {
	h := newHarness(t, Options{})
	h.fakeCPU(cpuReading{})
	_, advance := h.fakeClock()
	cost := new(ServiceTime)
	release := make(chan struct{})
	h.call("frozen", 5, cost, nil, release)
	h.waitStarted(1)
	advance(3 * pauseGap) // nothing arrives or ends: the process is stopped
	close(release)
	h.expect("frozen:ran")
	h.call("after", 5, cost, nil, nil)
	h.expect("after:ran")
	h.s.Close()
	h.s.Wait()
	cost.lim.mu.Lock()
	n := cost.lim.winN
	cost.lim.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d runs counted in the method's window, want 1: the one after the pause", n)
	}
}

// A call's predicted start counts the calls running beyond the limit (a
// limit that fell below the calls in the pool), which end before any
// queued call starts, and the share of the slots the more important calls
// arriving take: the least important are refused first, at once.
func TestLanePredictionCountsBacklogAndMoreImportantCalls(t *testing.T) {
	h := newHarness(t, Options{MaxWait: 100 * time.Millisecond})
	h.fakeClock()
	h.fakeCPU(cpuReading{})
	c := limited(4)
	c.lim.gapNS.Store(int64(10 * time.Millisecond)) // a call starts every 10ms
	release := make(chan struct{})
	defer close(release)
	for i := range 4 {
		h.call(fmt.Sprint("run", i), 9, c, nil, release)
	}
	h.waitStarted(4)
	// The limit falls to 2: two calls must end before one waiting starts.
	c.lim.limit.Store(2)
	for i := range 8 { // up to (2 + 7 + 1) × 10ms = 100ms: all admitted
		h.call(fmt.Sprint("q", i), 5, c, nil, nil)
	}
	h.call("late", 5, c, nil, nil) // (2 + 8 + 1) × 10ms = 110ms
	h.expect("late:limited")
	// Priority 9 calls arriving at 50 a second take half the slots' starts
	// (10ms each): a priority-5 call now waits twice as long.
	h.s.mu.Lock()
	c.lane.rates[9] = 50
	h.s.mu.Unlock()
	h.call("p0", 0, c, nil, nil)
	h.expect("p0:limited")
	h.call("p9", 9, c, nil, nil) // ahead of the others: (2 + 1) × 10ms
	if l := c.Limit(); l.Queued != 9 {
		t.Fatalf("lane: %+v; want the 8 calls and the priority-9 one queued", l)
	}
}

// A queued call with a deadline waits while it can finish by it, past
// MaxWait: the lane's calls started more slowly than predicted, and a
// refusal after the wait would only waste it. One without a deadline is
// dropped at MaxWait.
func TestQueuedCallWaitsUntilItsDeadline(t *testing.T) {
	h := newHarness(t, Options{MaxWait: 10 * time.Millisecond})
	now, advance := h.fakeClock()
	h.fakeCPU(cpuReading{})
	c := limited(1)
	release := make(chan struct{})
	h.call("run", 5, c, nil, release)
	h.waitStarted(1)
	dl := h.task("deadline", 5)
	dl.cost, dl.deadline = c, now().Add(time.Second)
	h.s.Submit(dl)
	h.call("none", 5, c, nil, nil)
	advance(50 * time.Millisecond)
	h.s.sweep()
	h.expect("none:limited")
	close(release)
	h.expect("run:ran", "deadline:ran")
}

// A method's lane enters overload mode (a short queue) only under a
// sustained load: a dependency served right at its capacity has a queue
// that comes and goes, which the wait limit bounds.
func TestLaneOverloadNeedsASustainedLoad(t *testing.T) {
	h := newHarness(t, Options{MaxWait: time.Second, Interval: 100 * time.Millisecond})
	_, advance := h.fakeClock()
	h.fakeCPU(cpuReading{})
	c := limited(1)
	c.lim.gapNS.Store(int64(10 * time.Millisecond)) // 100 calls a second
	release := make(chan struct{})
	defer close(release)
	h.call("run", 5, c, nil, release)
	h.waitStarted(1)
	overloaded := func() bool {
		h.s.mu.Lock()
		defer h.s.mu.Unlock()
		return c.lane.overload
	}
	// 100 calls a second, the lane's capacity, for five Intervals: the
	// queue stays busy, yet no overload mode.
	for range 5 {
		for i := range 10 {
			h.call(fmt.Sprint("at", i), 5, c, nil, nil)
			advance(10 * time.Millisecond)
		}
	}
	if overloaded() {
		t.Fatal("overload mode at a load right at capacity")
	}
	// Twice that: overload mode.
	for range 3 {
		for i := range 20 {
			h.call(fmt.Sprint("over", i), 5, c, nil, nil)
			advance(5 * time.Millisecond)
		}
	}
	if !overloaded() {
		t.Fatal("no overload mode at twice the capacity, sustained")
	}
}

package shed

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeCPU makes the scheduler read r as the CPU's state, and returns a
// function that changes it.
func (h *harness) fakeCPU(r cpuReading) func(cpuReading) {
	var mu sync.Mutex
	h.s.readCPU = func() cpuReading { mu.Lock(); defer mu.Unlock(); return r }
	return func(next cpuReading) { mu.Lock(); r = next; mu.Unlock() }
}

// blockers submits n tasks that run until release is closed and waits
// until every one that will start has started; it returns how many did.
func (h *harness) blockers(n int, release chan struct{}) {
	for i := range n {
		t := h.task(fmt.Sprint("b", i), 5)
		t.release = release
		t.started = h.started
		h.s.Submit(t)
	}
}

func (h *harness) waitStarted(n int) {
	h.t.Helper()
	for range n {
		select {
		case <-h.started:
		case <-time.After(5 * time.Second): // a safety net, not synchronization
			h.t.Fatalf("fewer than %d tasks started", n)
		}
	}
}

// The elastic pool grows past where it starts while its workers block and
// the CPU keeps up, by a bounded step each growEvery.
func TestElasticPoolGrowsWhileWorkersBlock(t *testing.T) {
	h := newHarness(t, Options{})
	_, advance := h.fakeClock()
	h.fakeCPU(cpuReading{})
	start := h.s.Stats().Workers
	if start != DefaultWorkers() || !h.s.Stats().Elastic {
		t.Fatalf("elastic pool starts at %d, want DefaultWorkers() = %d", start, DefaultWorkers())
	}
	release := make(chan struct{})
	const n = 1000
	h.blockers(start, release)
	h.waitStarted(start)
	// With the clock standing still, one step of growth: a quarter of
	// the limit plus GOMAXPROCS.
	h.blockers(n-start, release)
	step := start/4 + runtime.GOMAXPROCS(0)
	h.waitStarted(step)
	if st := h.s.Stats(); st.Running != start+step || st.Workers != start+step {
		t.Fatalf("after one step: %d running, limit %d; want %d", st.Running, st.Workers, start+step)
	}
	// As time passes, the queued tasks start: the pool grows with each
	// arrival or end, here the submissions of tasks that end at once.
	for i := 0; h.s.Stats().Running < n; i++ {
		if i > 100 {
			t.Fatalf("pool stuck at %d running", h.s.Stats().Running)
		}
		advance(growEvery)
		h.s.Submit(h.task(fmt.Sprint("quick", i), 5))
	}
	h.waitStarted(n - start - step)
	if st := h.s.Stats(); st.Dropped != [numReasons]uint64{} {
		t.Fatalf("dropped %v while growing", st.Dropped)
	}
	close(release)
	for range n + 1 { // the blockers and the quick task still queued, if any
		if got := h.next(); !strings.HasSuffix(got, ":ran") {
			t.Fatalf("got %q", got)
		}
	}
}

// The elastic pool stops growing when the tasks themselves want the CPU:
// goroutines wait long for a CPU, and as many wait as half the tasks
// running, in two readings in a row. A CPU busy with other goroutines
// does not stop it.
func TestElasticPoolStopsGrowingWhenTasksWantTheCPU(t *testing.T) {
	h := newHarness(t, Options{})
	_, advance := h.fakeClock()
	start := DefaultWorkers()
	setCPU := h.fakeCPU(cpuReading{latency: 10 * time.Millisecond, runnable: 10})
	release := make(chan struct{})
	defer close(release)
	h.blockers(start, release)
	h.waitStarted(start)
	// A congested CPU, but few goroutines wait compared with the tasks
	// running: they wait on I/O. The pool grows.
	advance(cpuEvery)
	h.blockers(1, release)
	h.waitStarted(1)
	advance(cpuEvery)
	h.blockers(1, release)
	h.waitStarted(1)
	if st := h.s.Stats(); st.CPUCongested || st.Running != start+2 {
		t.Fatalf("CPU busy with other work stopped the pool: %+v", st)
	}
	// A calm reading, then most tasks are runnable: CPU-bound. The first
	// such reading alone is not enough (a moment's burst); the second
	// stops the growth.
	setCPU(cpuReading{})
	advance(cpuEvery)
	h.blockers(1, release)
	h.waitStarted(1)
	setCPU(cpuReading{latency: 10 * time.Millisecond, runnable: start})
	advance(cpuEvery)
	h.blockers(1, release)
	h.waitStarted(1)
	advance(cpuEvery)
	h.blockers(1, release)
	st := h.s.Stats()
	if !st.CPUCongested || st.Running != start+4 || st.Queued[5] != 1 {
		t.Fatalf("CPU-bound tasks did not stop the pool: running %d, queued %v, congested %v", st.Running, st.Queued, st.CPUCongested)
	}
	if st.CPUWait != 10*time.Millisecond || st.Runnable != start {
		t.Fatalf("stats show CPU wait %v, runnable %d", st.CPUWait, st.Runnable)
	}
}

// Workers set is a hard cap whatever the CPU says, and MaxInFlight is one
// for the elastic pool.
func TestFixedCapAndCeiling(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want int
	}{
		{Options{Workers: 4}, 4},
		{Options{MaxInFlight: 10}, 10},
	} {
		t.Run(fmt.Sprintf("%+v", tc.o), func(t *testing.T) {
			h := newHarness(t, tc.o)
			_, advance := h.fakeClock()
			h.fakeCPU(cpuReading{})
			release := make(chan struct{})
			h.blockers(tc.want, release)
			h.waitStarted(tc.want)
			for range 5 {
				advance(cpuEvery)
				h.blockers(1, release)
			}
			if st := h.s.Stats(); st.Running != tc.want || st.Queued[5] != 5 {
				t.Fatalf("running %d, queued %d; want %d running", st.Running, st.Queued[5], tc.want)
			}
			close(release)
			for range tc.want + 5 {
				h.next()
			}
		})
	}
}

// After a burst, the elastic pool keeps no more idle workers than twice
// the tasks running plus its floor.
func TestElasticPoolShrinksWhenIdle(t *testing.T) {
	h := newHarness(t, Options{})
	h.fakeCPU(cpuReading{})
	release := make(chan struct{})
	h.blockers(200, release)
	h.waitStarted(200)
	close(release)
	for range 200 {
		h.next()
	}
	h.s.Close()
	h.s.Wait()
	if p := h.s.Stats().Parked; p > minCPULimit() {
		t.Fatalf("%d workers parked after the burst, want at most %d", p, minCPULimit())
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		name string
	}{
		{Options{Workers: -1}, "Workers"},
		{Options{MaxInFlight: -5}, "MaxInFlight"},
		{Options{QueueSize: -1}, "QueueSize"},
		{Options{MaxWait: -time.Second}, "MaxWait"},
		{Options{Target: -1}, "Target"},
		{Options{Interval: -1}, "Interval"},
		{Options{Workers: 8, MaxInFlight: 4}, "MaxInFlight (4) is below Workers (8)"},
	} {
		err := tc.o.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%+v: Validate() = %v, want an error naming %s", tc.o, err, tc.name)
		}
		func() {
			defer func() {
				if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), tc.name) {
					t.Errorf("%+v: New panicked with %v, want an error naming %s", tc.o, p, tc.name)
				}
			}()
			New(tc.o)
		}()
	}
	if err := (Options{Workers: 8, MaxInFlight: 8}).Validate(); err != nil {
		t.Errorf("a ceiling equal to the cap: %v", err)
	}
}

// limitClock drives a methodLimit on a fake clock, with calls that end in
// order.
type limitClock struct {
	l   *methodLimit
	now time.Time
}

func newLimitClock() *limitClock {
	c := &limitClock{l: new(methodLimit), now: time.Now()}
	c.l.winStart = c.now
	c.l.lastEnd.Store(c.now.UnixNano())
	return c
}

// window runs n calls that each took d, spread over limitWindow, and
// ends the window. The calls in flight as each ends are what Little's law
// gives.
func (c *limitClock) window(n int, d time.Duration) {
	inflight := int64(n)*int64(d)/int64(limitWindow) + 1
	for range n {
		c.l.inflight.Store(inflight)
		c.now = c.now.Add(limitWindow / time.Duration(n))
		c.l.end(5, d, true, c.now, 0)
	}
}

// A method's limit stays off while its service time is near its floor,
// starts when the service time rises, at what the dependency serves at
// the floor with headroom, and refuses the least important calls first.
func TestMethodLimitFollowsServiceTime(t *testing.T) {
	c := newLimitClock()
	for range 5 {
		c.window(64, 20*time.Millisecond) // 640 calls/s at 20ms
	}
	if c.l.limit.Load() != 0 || c.l.floor != 20*time.Millisecond {
		// The floor follows the healthy service time up by a 64th.
		t.Fatalf("limit %d, floor %v at the floor; want off, 20ms", c.l.limit.Load(), c.l.floor)
	}
	// Within tolerance: still off.
	c.window(64, 38*time.Millisecond)
	if c.l.limit.Load() != 0 {
		t.Fatalf("limit %d at 1.9× the floor, want off", c.l.limit.Load())
	}
	// The dependency saturates: service time three times the floor. One
	// such window may be a hiccup; the second starts the limit.
	c.window(64, 60*time.Millisecond)
	if c.l.limit.Load() != 0 {
		t.Fatalf("limit %d after one congested window, want off", c.l.limit.Load())
	}
	c.window(64, 60*time.Millisecond)
	want := int64(19) // headroom × 640/s × 20ms = 19.2
	if got := c.l.limit.Load(); got != want {
		t.Fatalf("limit %d once congested, want %d (headroom × 640/s × 20ms)", got, want)
	}
	// The default priority meets the limit, 9 two fifths more, 0 half.
	if c.l.cap(5) != want || c.l.cap(9) != want*14/10 || c.l.cap(0) != want/2 {
		t.Fatalf("caps %d (p9), %d (p0) of limit %d", c.l.cap(9), c.l.cap(0), want)
	}
}

// A limit that refuses calls while the service time is healthy grows; one
// far above the demand turns off after a few calm windows.
func TestMethodLimitGrowsAndTurnsOff(t *testing.T) {
	c := newLimitClock()
	c.window(64, 20*time.Millisecond)
	c.window(64, 60*time.Millisecond) // congested
	c.window(64, 60*time.Millisecond)
	limit := c.l.limit.Load()
	c.l.refused.Add(10)
	c.window(64, 20*time.Millisecond)
	if got := c.l.limit.Load(); got != limit+limit/2 {
		t.Fatalf("limit %d after a healthy window with refusals, want %d", got, limit+limit/2)
	}
	for range shiftWindows {
		c.window(8, 20*time.Millisecond) // healthy, nothing refused
	}
	if got := c.l.limit.Load(); got != 0 {
		t.Fatalf("limit %d after calm windows, want off", got)
	}
}

// A service time that rises by no more than minExcess, or by what the
// CPU's wait explains, is not congestion: a method of microseconds has no
// dependency to protect.
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
	for range 3 {
		c.l.inflight.Store(20)
		for range 64 {
			c.now = c.now.Add(limitWindow / 64)
			c.l.end(5, 41*time.Millisecond, true, c.now, 15*time.Millisecond)
		}
	}
	if got := c.l.limit.Load(); got != 0 {
		t.Fatalf("limit %d for a rise the CPU's wait explains, want off", got)
	}
}

// A dependency that became slower for good: the floor moves. The service
// time stays far above the old floor for shiftWindows, which brings a
// probe: the limit halves, and once the calls in flight drained to it,
// the next calls measure the new floor. The limit then fits the new
// service time.
func TestMethodLimitProbesANewFloor(t *testing.T) {
	c := newLimitClock()
	c.window(64, 20*time.Millisecond)
	c.window(64, 200*time.Millisecond) // congested: starts limiting
	c.window(64, 200*time.Millisecond)
	for range shiftWindows {
		if c.l.probing.Load() {
			break
		}
		c.window(16, 200*time.Millisecond)
	}
	if !c.l.probing.Load() {
		t.Fatalf("no probe after %d windows at 10× the floor", shiftWindows)
	}
	probe := c.l.probeLimit.Load()
	if c.l.cap(5) != probe {
		t.Fatalf("cap %d while probing, want the probe limit %d", c.l.cap(5), probe)
	}
	// Calls in flight drain to the probe limit, then probeSamples calls
	// that started after that end.
	c.l.inflight.Store(probe - 1)
	c.now = c.now.Add(time.Millisecond)
	c.l.inflight.Add(1)
	c.l.end(5, 200*time.Millisecond, true, c.now, 0) // drained here
	for range probeSamples {
		c.now = c.now.Add(201 * time.Millisecond)
		c.l.inflight.Add(1)
		c.l.end(5, 200*time.Millisecond, true, c.now, 0)
	}
	if c.l.probing.Load() || c.l.floor != 200*time.Millisecond {
		t.Fatalf("after the probe: probing %v, floor %v; want done, 200ms", c.l.probing.Load(), c.l.floor)
	}
}

// The limit refuses a method's calls at once, and leaves other methods
// alone: a bulkhead.
func TestMethodLimitIsABulkhead(t *testing.T) {
	h := newHarness(t, Options{})
	h.fakeCPU(cpuReading{})
	slow, fast := new(ServiceTime), new(ServiceTime)
	slow.lim.limit.Store(4)
	release := make(chan struct{})
	for i := range 4 {
		tk := h.task(fmt.Sprint("slow", i), 9)
		tk.cost, tk.release, tk.started = slow, release, h.started
		h.s.Submit(tk)
	}
	h.waitStarted(4)
	over := h.task("slow-over", 5)
	over.cost = slow
	h.s.Submit(over)
	h.expect("slow-over:limited")
	other := h.task("fast", 5)
	other.cost = fast
	h.s.Submit(other)
	h.expect("fast:ran")
	if l := slow.Limit(); l.Limit != 4 || l.InFlight != 4 || l.Limited != 1 {
		t.Fatalf("slow method's limit: %+v", l)
	}
	close(release)
	for range 4 {
		h.next()
	}
	h.s.Close()
	h.s.Wait() // the scheduler counts a task out once its Run returned
	if l := slow.Limit(); l.InFlight != 0 {
		t.Fatalf("%d calls still counted in flight after they ended", l.InFlight)
	}
}

// flowTask is a test task that belongs to a flow.
type flowTask struct {
	*task
	f *Flow
}

func (t flowTask) Flow() *Flow { return t.f }

// At a binding limit, a flow that is not the heaviest gets its call in up
// to twice its share or four calls; the heaviest, which holds the limit,
// is refused.
func TestFlowWithinItsShareIsAdmitted(t *testing.T) {
	h := newHarness(t, Options{})
	h.fakeCPU(cpuReading{})
	cost := new(ServiceTime)
	cost.lim.limit.Store(4)
	var flooder, honest Flow
	release := make(chan struct{})
	for i := range 4 {
		tk := h.task(fmt.Sprint("flood", i), 5)
		tk.cost, tk.release, tk.started = cost, release, h.started
		h.s.Submit(flowTask{tk, &flooder})
	}
	h.waitStarted(4)
	tk := h.task("flood-over", 5)
	tk.cost = cost
	h.s.Submit(flowTask{tk, &flooder})
	h.expect("flood-over:limited")
	// The honest flow, not the heaviest, passes until it holds four
	// calls (twice its share of 4 between 2 flows, and at least four).
	for i := range 4 {
		tk = h.task(fmt.Sprint("honest", i), 5)
		tk.cost, tk.release, tk.started = cost, release, h.started
		h.s.Submit(flowTask{tk, &honest})
		h.waitStarted(1)
	}
	tk = h.task("honest-over", 5)
	tk.cost = cost
	h.s.Submit(flowTask{tk, &honest})
	h.expect("honest-over:limited")
	if honest.InFlight() != 4 || flooder.InFlight() != 4 {
		t.Fatalf("in flight: honest %d, flooder %d", honest.InFlight(), flooder.InFlight())
	}
	close(release)
	for range 8 {
		h.next()
	}
	// A task reports it ran from inside Run; the scheduler counts it out
	// once Run has returned. Close and Wait for the workers to have done so.
	h.s.Close()
	h.s.Wait()
	if honest.InFlight() != 0 || flooder.InFlight() != 0 || h.s.flows.active.Load() != 0 {
		t.Fatalf("flows still counted: honest %d, flooder %d, active %d", honest.InFlight(), flooder.InFlight(), h.s.flows.active.Load())
	}
}

// A full queue makes room for a flow within its share by evicting the
// newest queued call of a flow above it, even of the same priority.
func TestFullQueueEvictsTheFlooder(t *testing.T) {
	h := newHarness(t, Options{Workers: 1, QueueSize: 4})
	var flooder, honest Flow
	release := h.blocker("block")
	for i := range 4 {
		h.s.Submit(flowTask{h.task(fmt.Sprint("flood", i), 5), &flooder})
	}
	h.s.Submit(flowTask{h.task("honest", 5), &honest})
	h.expect("flood3:evicted")
	h.s.Submit(flowTask{h.task("flood4", 5), &flooder})
	h.expect("flood4:refused")
	close(release)
	h.expect("block:ran", "flood0:ran", "flood1:ran", "flood2:ran", "honest:ran")
}

// Under random concurrent load on the elastic pool, every task ends
// exactly once, the ceiling holds, and the flows and limits count every
// task out again.
func TestElasticConcurrentInvariants(t *testing.T) {
	const ceiling, total = 16, 4000
	s := New(Options{MaxInFlight: ceiling, QueueSize: 32, MaxWait: 5 * time.Millisecond})
	var running, peak, ended atomic.Int64
	var wg sync.WaitGroup
	wg.Add(total)
	costs := []*ServiceTime{new(ServiceTime), new(ServiceTime)}
	costs[0].lim.limit.Store(6)
	flows := make([]Flow, 4)
	for g := range 8 {
		go func() {
			for i := range total / 8 {
				c := &countTask{prio: (g + i) % Levels, running: &running, peak: &peak, ended: &ended, wg: &wg, spin: i % 50}
				s.Submit(costFlowTask{c, costs[i%2], &flows[g%4]})
			}
		}()
	}
	wg.Wait()
	checkEveryTaskEndedOnce(t, s, total, ceiling, peak.Load(), ended.Load())
	for i, c := range costs {
		if n := c.lim.inflight.Load(); n != 0 {
			t.Errorf("method %d: %d counted in flight after every task ended", i, n)
		}
	}
	for i := range flows {
		if n := flows[i].InFlight(); n != 0 {
			t.Errorf("flow %d: %d counted in flight", i, n)
		}
	}
	if n := s.flows.active.Load(); n != 0 {
		t.Errorf("%d flows counted active", n)
	}
}

type costFlowTask struct {
	*countTask
	cost *ServiceTime
	f    *Flow
}

func (t costFlowTask) Cost() *ServiceTime { return t.cost }
func (t costFlowTask) Flow() *Flow        { return t.f }

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

// At a method's limit a call competes only with the calls in flight as
// important or more: the least important are refused first, and the most
// important pass while the others fill the limit, within a bound on all
// that rises with priority: 1.5 times the limit for priority 5, 1.9 for 9.
func TestMethodLimitByPriority(t *testing.T) {
	h := newHarness(t, Options{})
	h.fakeCPU(cpuReading{})
	cost := new(ServiceTime)
	cost.lim.limit.Store(10)
	release := make(chan struct{})
	defer close(release)
	submit := func(name string, p int) {
		tk := h.task(name, p)
		tk.cost, tk.release, tk.started = cost, release, h.started
		h.s.Submit(tk)
	}
	for i := range 5 { // priority 0 meets half the limit
		submit(fmt.Sprint("p0-", i), 0)
	}
	h.waitStarted(5)
	submit("p0-over", 0)
	h.expect("p0-over:limited")
	for i := range 10 { // priority 5 the limit, not counting priority 0
		submit(fmt.Sprint("p5-", i), 5)
	}
	h.waitStarted(10)
	submit("p5-over", 5)
	h.expect("p5-over:limited")
	for i := range 4 { // priority 9 while all in flight stay under 1.9 times the limit
		submit(fmt.Sprint("p9-", i), 9)
	}
	h.waitStarted(4)
	submit("p9-over", 9)
	h.expect("p9-over:limited")
	if l := cost.Limit(); l.InFlight != 19 {
		t.Fatalf("%d in flight, want 19", l.InFlight)
	}
}

// A surge starts the method limit before the window ends, once the window
// has lasted two service times and the calls in flight are ten times what
// the rate and service time explain: every millisecond more would pile more calls before the
// dependency.
func TestMethodLimitStartsEarlyInASurge(t *testing.T) {
	c := newLimitClock()
	for range 3 {
		c.window(64, 20*time.Millisecond)
	}
	// 640 calls/s at 20ms explain about 13 calls in flight; 500 are.
	c.l.inflight.Store(500)
	for range limitSamples {
		c.now = c.now.Add(5 * time.Millisecond)
		c.l.end(5, 20*time.Millisecond, true, c.now, 0)
	}
	if c.l.limit.Load() == 0 {
		t.Fatalf("no limit %v into a surge of 500 calls in flight", time.Duration(limitSamples)*5*time.Millisecond)
	}
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
	tk := h.task("frozen", 5)
	tk.cost, tk.release, tk.started = cost, release, h.started
	h.s.Submit(tk)
	h.waitStarted(1)
	advance(3 * pauseGap) // nothing arrives or ends: the process is stopped
	close(release)
	h.expect("frozen:ran")
	h.s.Submit(&task{name: "after", prio: 5, ended: h.ended, cost: cost})
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

// A window does not span an idle spell: the rate it read would be far
// below the method's, and a few calls in flight after it would look like
// a surge (a provider whose callers were all stuck on a frozen peer for
// seconds was limited so).
func TestMethodLimitWindowSkipsIdleSpells(t *testing.T) {
	c := newLimitClock()
	for range 3 {
		c.window(64, 2*time.Millisecond)
	}
	c.l.inflight.Store(4)
	c.l.end(5, 2*time.Millisecond, true, c.now, 0)
	c.now = c.now.Add(5 * time.Second) // nothing ends meanwhile
	// 800 calls/s at 2ms: 6 in flight is no surge.
	for range 100 {
		c.l.inflight.Store(6)
		c.now = c.now.Add(1250 * time.Microsecond)
		c.l.end(5, 2*time.Millisecond, true, c.now, 0)
	}
	if got := c.l.limit.Load(); got != 0 {
		t.Fatalf("limit %d after an idle spell, 800 calls/s at 2ms with 6 in flight, want off", got)
	}
}

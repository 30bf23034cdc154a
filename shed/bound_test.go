package shed

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// depSim drives a method's limit on a fake clock against a simulated
// dependency of slots connections (0: unbounded), each serving one call
// at a time in service, first come first served. Calls arrive (open loop
// at rate, or a closed loop of callers), wait in the method's lane while
// the bound in force leaves no room, and end when the dependency is done
// with them. Nothing warms it up: the first call is the surge's.
type depSim struct {
	t       *testing.T
	c       *ServiceTime
	start   time.Time
	now     time.Time
	slots   int
	service time.Duration
	stall   [2]time.Duration // while the dependency serves no call, from the start
	cpu     cpuSignal

	rate    float64 // open-loop arrivals per second
	owed    float64
	lane    []time.Time   // arrival times of the calls waiting in the lane
	free    []time.Time   // when each connection frees
	pending []simCall     // calls in the dependency
	peak    int64         // the most calls in the pool
	ends    map[int]int   // calls ended by 100ms bucket
	waits   time.Duration // the longest a call waited in the lane
}

type simCall struct{ admit, end time.Time }

func newDepSim(t *testing.T, slots int, service time.Duration) *depSim {
	now := time.Unix(1000, 0)
	return &depSim{t: t, c: new(ServiceTime), start: now, now: now, slots: slots, service: service, free: make([]time.Time, slots), ends: map[int]int{}}
}

// arrive brings n calls at now.
func (s *depSim) arrive(n int) {
	for range n {
		s.c.lim.arrive(s.now)
		if len(s.lane) > 0 || !s.c.lim.room() {
			s.c.lim.held.Add(1) // it waits in the lane, as the scheduler counts
		}
		s.lane = append(s.lane, s.now)
	}
}

// admit lets calls from the lane into the dependency while the bound has
// room. A call starts its service when a connection frees.
func (s *depSim) admit() {
	l := &s.c.lim
	for len(s.lane) > 0 && l.room() {
		s.waits = max(s.waits, s.now.Sub(s.lane[0]))
		s.lane = s.lane[1:]
		l.admitted()
		s.peak = max(s.peak, l.inflight.Load())
		begin := s.now
		i := -1
		if s.slots > 0 {
			i = 0
			for j := range s.free {
				if s.free[j].Before(s.free[i]) {
					i = j
				}
			}
			begin = maxTime(begin, s.free[i])
		}
		end := s.finish(begin)
		if i >= 0 {
			s.free[i] = end
		}
		s.pending = append(s.pending, simCall{admit: s.now, end: end})
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// finish is when a call that starts service at begin ends: a service time
// later, past any stall.
func (s *depSim) finish(begin time.Time) time.Time {
	end := begin.Add(s.service)
	from, to := s.start.Add(s.stall[0]), s.start.Add(s.stall[0]+s.stall[1])
	if s.stall[1] > 0 && end.After(from) && begin.Before(to) {
		end = end.Add(to.Sub(maxTime(begin, from)))
	}
	return end
}

// run advances the clock by d in steps of 250µs; each step, the calls
// whose service ended end (closed: each calls again), the open loop's
// calls arrive, and the lane lets calls in.
func (s *depSim) run(d time.Duration, closed bool) {
	const step = 250 * time.Microsecond
	for until := s.now.Add(d); s.now.Before(until); {
		s.now = s.now.Add(step)
		slices.SortFunc(s.pending, func(a, b simCall) int { return a.end.Compare(b.end) })
		n := 0
		for n < len(s.pending) && !s.pending[n].end.After(s.now) {
			call := s.pending[n]
			s.c.lim.end(call.end.Sub(call.admit), true, call.end, s.cpu, time.Second)
			s.ends[int(call.end.Sub(s.start)/(100*time.Millisecond))]++
			n++
		}
		s.pending = s.pending[n:]
		if closed {
			s.arrive(n)
		}
		s.owed += s.rate * step.Seconds()
		s.arrive(int(s.owed))
		s.owed -= float64(int(s.owed))
		s.admit()
	}
}

func (s *depSim) elapsed() time.Duration { return s.now.Sub(s.start) }

func (s *depSim) rules() []string {
	var out []string
	for _, d := range s.c.Limit().Decisions {
		out = append(out, d.Rule)
	}
	return out
}

// A cold surge at five times a dependency's capacity (64 connections ×
// 20ms: 3,200 calls/s), with no warm-up: the method is bounded from its
// first call, its limit starts within the first round trips, and the
// dependency is kept busy in every 100ms bucket from 100ms on, while the
// calls in the pool stay a few times its connections, not thousands.
func TestBoundHoldsAColdSurgeFromTheFirstCall(t *testing.T) {
	s := newDepSim(t, 64, 20*time.Millisecond)
	s.rate = 16000
	s.run(10*time.Millisecond, false)
	if got := s.c.lim.inflight.Load(); got != initialBound {
		t.Fatalf("%d calls in the pool 10ms into a cold surge, want the initial bound %d", got, initialBound)
	}
	s.run(990*time.Millisecond, false)
	if s.c.lim.limit.Load() == 0 || !slices.Contains(s.rules(), "surge") {
		t.Fatalf("no limit after a second of a cold surge; decisions %v", s.rules())
	}
	if first := s.c.Limit().Decisions[0]; first.Rule != "surge" || first.At.Sub(s.start) > 100*time.Millisecond {
		t.Errorf("first decision %+v, want a surge within 100ms", first)
	}
	if s.peak > 4*64 {
		t.Errorf("%d calls in the pool at the peak, want at most 256 (4 × the dependency's connections)", s.peak)
	}
	for b := 1; b < 10; b++ {
		if got := s.ends[b]; got < 288 {
			t.Errorf("bucket %d: %d calls ended, want at least 288 (0.9 × 320)", b, got)
		}
	}
}

// A closed loop of 2,000 callers on an unbounded 50ms dependency,
// starting together: the bound holds the first round trip to the initial
// bound, doubles each round trip while the service time holds, and lets
// every caller in within twelve round trips (eight of doubling, and a
// probe of the floor on the way). Calls arrive only as they end, so no
// surge is seen and no limit starts.
func TestBoundSlowStartsAClosedLoop(t *testing.T) {
	s := newDepSim(t, 0, 50*time.Millisecond)
	s.arrive(2000)
	s.run(40*time.Millisecond, true)
	if got := s.c.lim.inflight.Load(); got != initialBound {
		t.Fatalf("%d in the pool in the first round trip, want the initial bound %d", got, initialBound)
	}
	s.run(560*time.Millisecond, true)
	if got := s.c.lim.inflight.Load(); got != 2000 {
		t.Fatalf("%d in the pool after 600ms (12 round trips), want all 2,000", got)
	}
	s.run(time.Second, true)
	if s.c.lim.limit.Load() != 0 || slices.Contains(s.rules(), "surge") {
		t.Fatalf("limit %d, decisions %v for a closed loop; want none", s.c.lim.limit.Load(), s.rules())
	}
	if s.waits > 600*time.Millisecond {
		t.Errorf("a call waited %v in the lane, want no more than the ramp's 600ms", s.waits)
	}
}

// The callers of a closed loop may not all start at once: half of 2,000
// arrive a round trip after the others, before the floor is measured.
// Their calls then arrive as they end: no surge.
func TestClosedLoopStartingLateIsNoSurge(t *testing.T) {
	s := newDepSim(t, 0, 50*time.Millisecond)
	s.arrive(1000)
	s.run(60*time.Millisecond, true)
	s.arrive(1000)
	s.run(time.Second, true)
	if s.c.lim.limit.Load() != 0 || s.c.lim.inflight.Load() != 2000 {
		t.Fatalf("limit %d, %d in flight, decisions %v; want no limit, all 2,000 in flight", s.c.lim.limit.Load(), s.c.lim.inflight.Load(), s.rules())
	}
}

// A CPU that other work keeps busy (goroutines wait 10ms for a CPU) does
// not hide a surge of calls that wait on a dependency: few goroutines are
// runnable, and thousands of calls arrive. (Rounds last longer, the floor
// plus the rise the CPU's wait explains, so the surge is seen a few
// rounds later; the bound holds meanwhile.) The same wait vetoes, at
// first, the limit of a method whose calls are the runnable ones.
func TestSurgeSeenThroughACPUWait(t *testing.T) {
	s := newDepSim(t, 64, 20*time.Millisecond)
	s.rate = 16000
	s.cpu = cpuSignal{wait: 10 * time.Millisecond, runnable: 3}
	s.run(150*time.Millisecond, false)
	if s.c.lim.limit.Load() == 0 || slices.Contains(s.rules(), "cpu veto") {
		t.Fatalf("decisions %v 150ms into a surge, with the CPU's wait at 10ms; want a limit, no veto", s.rules())
	}
	s.run(450*time.Millisecond, false)
	if s.peak > 5*64 {
		t.Errorf("%d calls in the pool at the peak, want at most 320 (the rounds are longer)", s.peak)
	}
	s = newDepSim(t, 64, 20*time.Millisecond)
	s.rate = 16000
	s.cpu = cpuSignal{wait: 10 * time.Millisecond, runnable: 1000}
	s.run(300*time.Millisecond, false)
	if r := s.rules(); len(r) == 0 || r[0] != "cpu veto" {
		t.Fatalf("decisions %v with every call runnable; want a CPU veto first", r)
	}
}

// A dependency that stalls for 120ms, then a burst at five times its
// capacity: the calls in the pool do not follow the arrivals, and the
// limit starts from the arrival rate against the end rate.
func TestSurgeAfterAStall(t *testing.T) {
	s := newDepSim(t, 64, 20*time.Millisecond)
	s.rate = 640 // a fifth of its capacity
	s.stall = [2]time.Duration{500 * time.Millisecond, 120 * time.Millisecond}
	s.run(500*time.Millisecond, false)
	if s.c.lim.limit.Load() != 0 {
		t.Fatalf("limit %d at a fifth of the capacity; decisions %v", s.c.lim.limit.Load(), s.rules())
	}
	quiet := s.peak
	s.run(120*time.Millisecond, false) // the stall
	s.rate = 16000
	s.run(40*time.Millisecond, false)
	if s.c.lim.limit.Load() == 0 {
		t.Fatalf("no limit 40ms into a burst after a stall; decisions %v", s.rules())
	}
	s.run(400*time.Millisecond, false)
	if s.peak > 4*64 {
		t.Errorf("%d calls in the pool at the peak (%d before the stall), want at most 256", s.peak, quiet)
	}
}

// Calls over the bound from the first call wait in the method's lane,
// not refused for a queue longer than Options.QueueSize: the lane holds
// what the pool would have held, and a call starts as one ends.
func TestBoundQueuesInTheLaneWithoutRefusing(t *testing.T) {
	h := newHarness(t, Options{QueueSize: 8})
	h.fakeClock()
	h.fakeCPU(cpuReading{})
	c := new(ServiceTime)
	release := make(chan struct{})
	for i := range initialBound {
		h.call(fmt.Sprint("run", i), 5, c, nil, release)
	}
	h.waitStarted(initialBound)
	for i := range 100 {
		h.call(fmt.Sprint("wait", i), 5, c, nil, nil)
	}
	if l := c.Limit(); l.InFlight != initialBound || l.Queued != 100 || l.Limited != 0 || l.Bound != initialBound {
		t.Fatalf("method: %+v; want %d in the pool, 100 queued, none refused", l, initialBound)
	}
	close(release)
	for range initialBound + 100 {
		if got := h.next(); !strings.HasSuffix(got, ":ran") {
			t.Fatalf("%s, want every call run", got)
		}
	}
}

// A limit lowered below the calls in the pool leaves a backlog to drain
// before a queued call starts; in overload mode it is not charged to
// each priority's share: a call is admitted if it can start by its
// deadline once the backlog drained, and refused if it cannot.
func TestBacklogIsNotChargedToTheShare(t *testing.T) {
	h := newHarness(t, Options{})
	now, _ := h.fakeClock()
	h.fakeCPU(cpuReading{})
	c := limited(8)
	c.lim.gapNS.Store(int64(10 * time.Millisecond))
	release := make(chan struct{})
	defer close(release)
	for i := range 8 {
		h.call(fmt.Sprint("run", i), 9, c, nil, release)
	}
	h.waitStarted(8)
	c.lim.limit.Store(1) // 7 calls beyond it: 70ms to drain
	h.s.mu.Lock()
	c.lane.init(now())
	c.lane.overload, c.lane.load = true, 2*overloadLoad
	h.s.mu.Unlock()
	call := func(name string, in time.Duration) {
		tk := h.task(name, 9)
		tk.cost, tk.deadline = c, now().Add(in)
		h.s.Submit(costTask{tk, nil})
	}
	call("in-time", time.Second)
	call("too-soon", 50*time.Millisecond)
	h.expect("too-soon:limited")
	if l := c.Limit(); l.Queued != 1 {
		t.Fatalf("lane: %+v; want the priority-9 call that can start in time queued", l)
	}
}

// While no call of a limited method has ended for long, its calls end no
// faster than that: a new call's predicted start counts the time since
// the last end, and the head-of-line sojourn, not only the last window's
// rate.
func TestPredictionCountsTheStallAndTheSojourn(t *testing.T) {
	h := newHarness(t, Options{MaxWait: 100 * time.Millisecond})
	now, advance := h.fakeClock()
	h.fakeCPU(cpuReading{})
	c := limited(2)
	c.lim.gapNS.Store(int64(5 * time.Millisecond)) // the last window's rate
	c.lim.lastEnd.Store(now().UnixNano())
	release := make(chan struct{})
	defer close(release)
	h.call("a", 5, c, nil, release)
	h.call("b", 5, c, nil, release)
	h.waitStarted(2)
	h.call("q1", 5, c, nil, nil)
	h.call("q2", 5, c, nil, nil)
	advance(90 * time.Millisecond) // no call ends meanwhile
	h.call("late", 5, c, nil, nil) // (2+1) × 5ms by the rate; the queue waited 90ms already
	h.expect("late:limited")
}

// While the limit is on, the run time expected of a call is not capped
// below the last window's service time: a call whose deadline is closer
// than what the slowed dependency takes now is not started.
func TestSkipEstimateFollowsTheRecentServiceTime(t *testing.T) {
	h := newHarness(t, Options{})
	now, _ := h.fakeClock()
	h.fakeCPU(cpuReading{})
	c := limited(100)
	for range minObservations {
		c.Observe(100 * time.Millisecond)
	}
	c.lim.lastEnd.Store(now().UnixNano())
	c.lim.floorNS.Store(int64(20 * time.Millisecond))
	c.lim.latencyNS.Store(int64(100 * time.Millisecond))
	tk := h.task("short", 5)
	tk.cost, tk.deadline = c, now().Add(60*time.Millisecond)
	h.s.Submit(tk)
	h.expect("short:deadline")
}

// The method limits read the CPU's wait as the median of the last
// readings: one reading's spike (a competing process for a moment) is no
// wait, and a wait that holds is.
func TestCPUWaitIsTheMedianOfTheReadings(t *testing.T) {
	h := newHarness(t, Options{})
	_, advance := h.fakeClock()
	set := h.fakeCPU(cpuReading{})
	read := func(r cpuReading) time.Duration {
		set(r)
		advance(cpuEvery)
		h.s.mu.Lock()
		h.s.cpuCheck(h.s.now())
		h.s.mu.Unlock()
		return time.Duration(h.s.cpuWait.Load())
	}
	busy := cpuReading{runnable: 64, latency: 10 * time.Millisecond}
	if got := read(busy); got != 0 {
		t.Fatalf("CPU wait %v after one busy reading, want 0", got)
	}
	for range cpuReadings {
		read(cpuReading{})
	}
	for range cpuReadings/2 + 1 {
		read(busy)
	}
	if got := time.Duration(h.s.cpuWait.Load()); got != 10*time.Millisecond {
		t.Fatalf("CPU wait %v after most readings waited 10ms, want 10ms", got)
	}
}

// A limit keeps its last historySize decisions, oldest first.
func TestDecisionHistoryKeepsTheLast(t *testing.T) {
	var h history
	for i := range historySize + 3 {
		h.add(record{Decision: Decision{Window: i}})
	}
	got := h.list()
	var d history
	d.add(record{Decision: Decision{Rule: "surge"}, format: "%d calls arrived, %d ended in %v", durs: dur(2), args: [4]int64{320, 32, int64(20 * time.Millisecond)}})
	if s := d.list()[0].Signal; s != "320 calls arrived, 32 ended in 20ms" {
		t.Errorf("signal %q, want it formatted with its duration", s)
	}
	if len(got) != historySize || got[0].Window != 3 || got[historySize-1].Window != historySize+2 {
		t.Fatalf("history %v, want windows 3 to %d", got, historySize+2)
	}
}

// A CPU starved by other work slows calls that only wait (they wake
// late): 400 callers of a 20ms sleep take 90ms each while goroutines wait
// 60ms for a CPU. The CPU's wait explains the rise, so the slow start
// goes on and every caller gets in.
func TestBoundRampsOnAStarvedCPU(t *testing.T) {
	s := newDepSim(t, 0, 20*time.Millisecond)
	s.arrive(400)
	s.run(20*time.Millisecond, true) // the floor is measured at 20ms
	s.service = 90 * time.Millisecond
	s.cpu = cpuSignal{wait: 60 * time.Millisecond, runnable: 4}
	s.run(time.Second, true)
	if got := s.c.lim.inflight.Load(); got != 400 {
		t.Fatalf("%d of 400 callers in flight after a second, decisions %v; want all", got, s.rules())
	}
}

// A method of a couple of milliseconds can wait on a dependency too: 8
// connections held 2ms each (4,000 calls/s), surged at three times that
// from its first call, is bounded, and its limit starts as a surge
// within the first 50ms, with the calls in the pool a few rounds, not
// the thousands an unbounded method took in.
func TestBoundHoldsAMethodOfMilliseconds(t *testing.T) {
	s := newDepSim(t, 8, 2*time.Millisecond)
	s.rate = 12000
	s.run(200*time.Millisecond, false)
	if s.c.lim.limit.Load() == 0 || !slices.Contains(s.rules(), "surge") {
		t.Fatalf("no limit 200ms into a 3× surge of a 2ms method; decisions %v", s.rules())
	}
	if first := s.c.Limit().Decisions[0]; first.Rule != "surge" || first.At.Sub(s.start) > 50*time.Millisecond {
		t.Errorf("first decision %+v at %v, want a surge within 50ms", first, first.At.Sub(s.start))
	}
	if s.peak > initialBound {
		t.Errorf("%d calls in the pool at the peak, want at most the initial bound, %d", s.peak, initialBound)
	}
}

package shed

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// task is a test Task that records how it ended.
type task struct {
	name     string
	prio     int
	deadline time.Time
	canceled atomic.Bool
	cost     *ServiceTime
	release  chan struct{} // Run blocks on it when non-nil
	started  chan string   // Run reports here when non-nil
	ended    chan string   // Run and Drop report "name:ran" / "name:reason"
}

func (t *task) Priority() int { return t.prio }
func (t *task) Deadline() (time.Time, bool) {
	return t.deadline, !t.deadline.IsZero()
}
func (t *task) Canceled() bool     { return t.canceled.Load() }
func (t *task) Cost() *ServiceTime { return t.cost }
func (t *task) Run() {
	if t.started != nil {
		t.started <- t.name
	}
	if t.release != nil {
		<-t.release
	}
	t.ended <- t.name + ":ran"
}
func (t *task) Drop(r Reason) { t.ended <- t.name + ":" + r.String() }

// harness builds tasks that share channels.
type harness struct {
	t       *testing.T
	s       *Scheduler
	ended   chan string
	started chan string
}

func newHarness(t *testing.T, o Options) *harness {
	h := &harness{t: t, s: New(o), ended: make(chan string, 1000), started: make(chan string, 1000)}
	t.Cleanup(func() {
		h.s.Close()
		if !t.Failed() { // a failed test may leave a blocker running
			h.s.Wait()
		}
	})
	return h
}

// fakeClock makes the scheduler read a clock that stands still until
// advance moves it, and returns both.
func (h *harness) fakeClock() (now func() time.Time, advance func(time.Duration)) {
	clock := time.Now()
	var mu sync.Mutex
	now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance = func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	h.s.now = now
	return now, advance
}

// runTime makes the scheduler's estimate of every task's run time d.
func (h *harness) runTime(d time.Duration) {
	for range minObservations {
		h.s.all.Observe(d)
	}
}

// overloadNow puts the scheduler in overload mode, as if its queue had
// stayed busy for an interval.
func (h *harness) overloadNow() {
	h.s.mu.Lock()
	h.s.q.overload, h.s.q.winStart = true, h.s.now()
	h.s.mu.Unlock()
}

func (h *harness) task(name string, prio int) *task {
	return &task{name: name, prio: prio, ended: h.ended}
}

// blocker submits a task that runs until released, and waits until it
// runs, so the scheduler's workers are known to be busy.
func (h *harness) blocker(name string) chan struct{} {
	t := h.task(name, 9)
	t.release = make(chan struct{})
	t.started = h.started
	h.s.Submit(t)
	if got := <-h.started; got != name {
		h.t.Fatalf("started %s, want %s", got, name)
	}
	return t.release
}

func (h *harness) next() string {
	h.t.Helper()
	select {
	case e := <-h.ended:
		return e
	case <-time.After(5 * time.Second): // a safety net, not synchronization
		h.t.Fatal("no task ended within 5s")
		return ""
	}
}

func (h *harness) expect(want ...string) {
	h.t.Helper()
	for _, w := range want {
		if got := h.next(); got != w {
			h.t.Fatalf("got %q, want %q", got, w)
		}
	}
}

func TestHighestPriorityRunsFirst(t *testing.T) {
	h := newHarness(t, Options{Workers: 1})
	release := h.blocker("block")
	for _, p := range []int{3, 7, 5, 9, 5, 0} {
		h.s.Submit(h.task(fmt.Sprintf("p%d-%d", p, h.s.Stats().Queued[p]), p))
	}
	if st := h.s.Stats(); st.Queued != [Levels]int{0: 1, 3: 1, 5: 2, 7: 1, 9: 1} || st.Running != 1 {
		t.Fatalf("stats = %+v", st)
	}
	close(release)
	h.expect("block:ran", "p9-0:ran", "p7-0:ran", "p5-0:ran", "p5-1:ran", "p3-0:ran", "p0-0:ran")
}

func TestFullQueueEvictsLowestNewestThenRefuses(t *testing.T) {
	h := newHarness(t, Options{Workers: 1, QueueSize: 3})
	release := h.blocker("block")
	h.s.Submit(h.task("a3", 3))
	h.s.Submit(h.task("b3", 3))
	h.s.Submit(h.task("c5", 5))
	h.s.Submit(h.task("d7", 7)) // full: evicts the newest of the lowest, b3
	h.expect("b3:evicted")
	h.s.Submit(h.task("e1", 1)) // nothing lower than 1: refused
	h.expect("e1:refused")
	h.s.Submit(h.task("f3", 3)) // a3 has the same priority: not lower, refused
	h.expect("f3:refused")
	h.s.Submit(h.task("g9", 9)) // evicts a3
	h.expect("a3:evicted")
	close(release)
	h.expect("block:ran", "g9:ran", "d7:ran", "c5:ran")
	// A task reports it ran from inside Run; the scheduler counts it once
	// Run has returned. Close and Wait for the worker to have done so.
	h.s.Close()
	h.s.Wait()
	st := h.s.Stats()
	if st.DroppedFor(Evicted) != 2 || st.DroppedFor(Refused) != 2 || st.Ran != 4 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestQueuedCallExpiresWhileWorkersAreBusy(t *testing.T) {
	h := newHarness(t, Options{Workers: 1, MaxWait: 20 * time.Millisecond})
	release := h.blocker("block")
	h.s.Submit(h.task("late", 5))
	// The worker stays busy: only the sweep timer can answer "late".
	h.expect("late:expired")
	close(release)
	h.expect("block:ran")
	if st := h.s.Stats(); st.DroppedFor(Expired) != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestExpiredAtDequeue(t *testing.T) {
	h := newHarness(t, Options{Workers: 1, MaxWait: 50 * time.Millisecond})
	_, advance := h.fakeClock()
	h.s.timer.Stop() // only the dequeue check should act here
	release := h.blocker("block")
	h.s.Submit(h.task("old", 5))
	advance(60 * time.Millisecond)
	h.s.Submit(h.task("new", 5))
	close(release)
	h.expect("block:ran", "old:expired", "new:ran")
}

func TestDeadlineSkips(t *testing.T) {
	h := newHarness(t, Options{Workers: 1})
	gone := h.task("gone", 5)
	gone.deadline = time.Now().Add(-time.Millisecond)
	h.s.Submit(gone)
	h.expect("gone:deadline")

	// A method that takes ~50ms is not started with 5ms left.
	cost := new(ServiceTime)
	for range minObservations {
		cost.Observe(50 * time.Millisecond)
	}
	short := h.task("short", 5)
	short.cost = cost
	short.deadline = time.Now().Add(5 * time.Millisecond)
	h.s.Submit(short)
	h.expect("short:deadline")

	ample := h.task("ample", 5)
	ample.cost = cost
	ample.deadline = time.Now().Add(time.Minute)
	h.s.Submit(ample)
	h.expect("ample:ran")
}

// A queued call whose deadline passes while it waits is not run.
func TestDeadlinePassesInQueue(t *testing.T) {
	h := newHarness(t, Options{Workers: 1})
	now, advance := h.fakeClock()
	release := h.blocker("block")
	soon := h.task("soon", 5)
	soon.deadline = now().Add(10 * time.Millisecond)
	h.s.Submit(soon)
	advance(20 * time.Millisecond)
	close(release)
	h.expect("block:ran", "soon:deadline")
}

func TestCanceledCallIsNotRun(t *testing.T) {
	h := newHarness(t, Options{Workers: 1})
	release := h.blocker("block")
	c := h.task("c", 5)
	h.s.Submit(c)
	c.canceled.Store(true)
	close(release)
	h.expect("block:ran", "c:canceled")
}

func TestOverloadShortensTheQueue(t *testing.T) {
	h := newHarness(t, Options{Workers: 1, QueueSize: 100, MaxWait: time.Second, Target: 5 * time.Millisecond, Interval: 100 * time.Millisecond})
	_, advance := h.fakeClock()
	h.runTime(time.Millisecond) // tasks take 1ms: one worker starts one per ms
	release := h.blocker("block")
	h.s.Submit(h.task("first", 5))
	if h.s.Stats().Overloaded {
		t.Fatal("overloaded before the queue stayed non-empty for an interval")
	}
	advance(101 * time.Millisecond)
	if !h.s.Stats().Overloaded {
		t.Fatal("not overloaded after the queue stayed non-empty for an interval")
	}
	// The overload queue holds what the worker starts in half of Target,
	// 2.5 calls, scaled by priority: priority 5 may have 3 calls ahead of
	// it (itself included), priority 2 one, priority 9 five.
	h.s.Submit(h.task("a", 5))
	h.s.Submit(h.task("b", 5))
	h.s.Submit(h.task("c", 5))
	h.expect("c:refused")
	h.s.Submit(h.task("low", 2))
	h.expect("low:refused")
	// Priority 9 calls go ahead of the others and push out the newest
	// priority-5 calls, which would no longer start in time.
	h.s.Submit(h.task("v1", 9))
	h.expect("b:evicted")
	h.s.Submit(h.task("v2", 9))
	h.expect("a:evicted")
	close(release)
	h.expect("block:ran", "v1:ran", "v2:ran", "first:ran")

	// Overload mode ends after an interval in which fewer calls arrived
	// than the worker could start.
	advance(101 * time.Millisecond)
	h.s.Stats()
	advance(101 * time.Millisecond)
	if h.s.Stats().Overloaded {
		t.Fatal("still overloaded after a quiet interval")
	}
}

// A surge ends normal mode before the queue has been busy for a whole
// Interval: once it stays longer than the overload queue for a tenth of
// the Interval.
func TestSurgeEntersOverloadEarly(t *testing.T) {
	h := newHarness(t, Options{Workers: 1, QueueSize: 100, Target: 5 * time.Millisecond, Interval: 100 * time.Millisecond})
	_, advance := h.fakeClock()
	h.runTime(time.Millisecond)
	release := h.blocker("block")
	for i := range 10 {
		h.s.Submit(h.task(fmt.Sprint(i), 9))
	}
	advance(11 * time.Millisecond)
	if !h.s.Stats().Overloaded {
		t.Fatal("a queue of 10 calls, twice the overload queue, for 11ms did not count as overload")
	}
	close(release)
	h.expect("block:ran")
	for range 10 {
		h.next()
	}
}

func TestDisabledRunsEverythingAtOnce(t *testing.T) {
	h := newHarness(t, Options{Workers: 1, QueueSize: 1, Disabled: true})
	release := make(chan struct{})
	for i := range 10 {
		tk := h.task(fmt.Sprint(i), 0)
		tk.release = release
		tk.started = h.started
		h.s.Submit(tk)
	}
	for range 10 {
		<-h.started // all 10 run at once despite Workers: 1
	}
	close(release)
	for range 10 {
		h.next()
	}
}

func TestCloseRefusesQueuedAndNew(t *testing.T) {
	s := New(Options{Workers: 1})
	ended := make(chan string, 10)
	started := make(chan string, 1)
	release := make(chan struct{})
	s.Submit(&task{name: "block", release: release, started: started, ended: ended})
	<-started
	s.Submit(&task{name: "queued", ended: ended})
	s.Close()
	if got := <-ended; got != "queued:refused" {
		t.Fatalf("got %q", got)
	}
	s.Submit(&task{name: "after", ended: ended})
	if got := <-ended; got != "after:refused" {
		t.Fatalf("got %q", got)
	}
	close(release)
	s.Wait()
	if got := <-ended; got != "block:ran" {
		t.Fatalf("got %q", got)
	}
}

// Under random concurrent load, every task ends exactly once and no more
// than Workers run at once.
func TestConcurrentInvariants(t *testing.T) {
	const workers, total = 4, 4000
	s := New(Options{Workers: workers, QueueSize: 16, MaxWait: 5 * time.Millisecond})
	var running, peak, ended atomic.Int64
	var wg sync.WaitGroup
	wg.Add(total)
	for g := range 8 {
		go func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range total / 8 {
				s.Submit(&countTask{prio: r.IntN(Levels), running: &running, peak: &peak, ended: &ended, wg: &wg, spin: r.IntN(200)})
			}
		}()
	}
	wg.Wait()
	checkEveryTaskEndedOnce(t, s, total, workers, peak.Load(), ended.Load())
}

// checkEveryTaskEndedOnce closes s, waits for its workers, and checks that
// at most limit tasks ran at once (peak) and that each of total tasks
// ended exactly once: run or dropped.
func checkEveryTaskEndedOnce(t *testing.T, s *Scheduler, total, limit int, peak, ended int64) {
	t.Helper()
	s.Close()
	s.Wait()
	if peak > int64(limit) {
		t.Errorf("%d tasks ran at once, limit %d", peak, limit)
	}
	st := s.Stats()
	var dropped uint64
	for _, n := range st.Dropped {
		dropped += n
	}
	if got := st.Ran + dropped; got != uint64(total) || ended != int64(total) {
		t.Errorf("ran %d + dropped %d = %d, ended %d; want %d each", st.Ran, dropped, got, ended, total)
	}
}

type countTask struct {
	prio                 int
	spin                 int
	spinFor              time.Duration // run for this long, if set
	running, peak, ended *atomic.Int64
	wg                   *sync.WaitGroup
	once                 atomic.Bool
}

func (c *countTask) Priority() int               { return c.prio }
func (c *countTask) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *countTask) Canceled() bool              { return false }
func (c *countTask) Cost() *ServiceTime          { return nil }
func (c *countTask) Run() {
	n := c.running.Add(1)
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
	for i := 0; i < c.spin*100; i++ {
		_ = i * i
	}
	for start := time.Now(); time.Since(start) < c.spinFor; {
	}
	c.running.Add(-1)
	c.end()
}
func (c *countTask) Drop(Reason) { c.end() }
func (c *countTask) end() {
	if c.once.Swap(true) {
		panic("task ended twice")
	}
	c.ended.Add(1)
	c.wg.Done()
}

func TestReleaseIdleLeavesNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	h := newHarness(t, Options{Workers: 4})
	for i := range 20 {
		h.s.Submit(h.task(fmt.Sprint(i), 5))
	}
	for range 20 {
		h.next()
	}
	h.s.ReleaseIdle()
}

// In overload mode, priority 9 has room for a round of workers even when
// the overload queue is shorter, and is not shed for waiting.
func TestPriority9KeepsRoomUnderOverload(t *testing.T) {
	h := newHarness(t, Options{Workers: 4, QueueSize: 100, MaxWait: time.Second, Target: time.Millisecond, Interval: 100 * time.Millisecond})
	_, advance := h.fakeClock()
	h.runTime(10 * time.Millisecond) // 10ms per task: the overload queue is tiny
	var releases []chan struct{}
	for i := range 4 {
		releases = append(releases, h.blocker(fmt.Sprint("block", i)))
	}
	h.s.Submit(h.task("first", 9))
	advance(101 * time.Millisecond)
	if !h.s.Stats().Overloaded {
		t.Fatal("not overloaded")
	}
	for i := range 3 { // with "first", a round of 4 workers
		h.s.Submit(h.task(fmt.Sprint("v", i), 9))
	}
	h.s.Submit(h.task("v3", 9))
	h.expect("v3:refused")
	advance(500 * time.Millisecond) // far past Target, within MaxWait
	for _, r := range releases {
		close(r)
	}
	got := map[string]bool{}
	for range 8 {
		got[h.next()] = true
	}
	for _, want := range []string{"first:ran", "v0:ran", "v1:ran", "v2:ran"} {
		if !got[want] {
			t.Errorf("%s missing from %v", want, got)
		}
	}
}

// overloadedOneWorker returns a scheduler in overload mode on a fake
// clock, with one worker held by a blocker until release is closed, tasks
// that take 1ms, and a Target of 5ms.
func overloadedOneWorker(t *testing.T) (h *harness, advance func(time.Duration), release chan struct{}) {
	h = newHarness(t, Options{Workers: 1, QueueSize: 100, MaxWait: time.Second, Target: 5 * time.Millisecond, Interval: 100 * time.Millisecond})
	_, advance = h.fakeClock()
	h.runTime(time.Millisecond)
	h.overloadNow()
	return h, advance, h.blocker("block")
}

// Under overload, a queued call that cannot start before its wait limit
// is answered at the first completion that shows it, not when the limit
// passes.
func TestDoomedCallAnsweredEarly(t *testing.T) {
	h, advance, release := overloadedOneWorker(t)
	// a should start within 5ms*(5+1)/10 = 3ms, and may be refused
	// within 5ms/4 = 1.25ms. 1.2ms later two priority-9 calls go ahead of
	// it (three calls fit a's share: it stays). When the worker next frees
	// up, a could start only after their 2ms, past its limit, so it is
	// answered then, not when its limit passes.
	h.s.Submit(h.task("a", 5))
	advance(1200 * time.Microsecond)
	h.s.Submit(h.task("v1", 9))
	h.s.Submit(h.task("v2", 9))
	close(release)
	h.expect("block:ran", "a:expired", "v1:ran", "v2:ran")
}

// A call still queued when its refusal window closes is kept, past its
// limit, and runs: a refusal must come quickly or not at all.
func TestNoLateRefusal(t *testing.T) {
	h, advance, release := overloadedOneWorker(t)
	// a and b may be refused within 1.25ms. Past that, neither priority-9
	// calls pushing a past its share, nor the worker freeing up after
	// their limits (a: 2.5ms, b: 3ms), nor the sweep drops them.
	h.s.Submit(h.task("a", 4))
	h.s.Submit(h.task("b", 5))
	advance(2600 * time.Microsecond) // past a's limit too
	h.s.Submit(h.task("v1", 9))
	h.s.Submit(h.task("v2", 9))
	h.s.sweep()
	advance(2 * time.Millisecond)
	h.s.sweep()
	close(release)
	h.expect("block:ran", "v1:ran", "v2:ran", "b:ran", "a:ran")
	if d := h.s.Stats().Dropped; d != ([numReasons]uint64{}) {
		t.Errorf("calls dropped after their refusal window, by reason: %v; want none", d)
	}
}

func TestDropWaitHistogram(t *testing.T) {
	h := newHarness(t, Options{Workers: 1, QueueSize: 1, MaxWait: 10 * time.Millisecond})
	_, advance := h.fakeClock()
	release := h.blocker("block")
	h.s.Submit(h.task("a", 5))
	h.s.Submit(h.task("b", 5)) // the queue is full: refused on arrival
	h.expect("b:refused")
	advance(20 * time.Millisecond)
	close(release)
	h.expect("block:ran", "a:expired")
	st := h.s.Stats()
	bounds := DropWaitBounds()
	want := [len(dropWaitBounds) + 1]uint64{}
	want[0] = 1 // b, at once
	for i, b := range bounds {
		if 20*time.Millisecond <= b {
			want[i]++ // a, after 20ms
			break
		}
	}
	if st.DropWaitBuckets != want {
		t.Fatalf("DropWaitBuckets = %v; want %v (bounds %v)", st.DropWaitBuckets, want, bounds)
	}
}

// Under overload, every call the scheduler answers after it queued it is
// answered within its refusal window, a quarter of Target: refusals are
// quick, whatever the load and the timing. (Refusals on arrival wait 0.)
func TestRefusalsAreQuick(t *testing.T) {
	const workers, total = 4, 9600
	o := Options{Workers: workers, QueueSize: 4096, MaxWait: time.Minute, Target: 2 * time.Millisecond, Interval: 5 * time.Millisecond}
	s := New(o)
	var running, peak, ended atomic.Int64
	var wg sync.WaitGroup
	wg.Add(total)
	var submitters sync.WaitGroup
	for g := range 8 {
		submitters.Add(1)
		go func() {
			defer submitters.Done()
			// Bursts of 15 calls each millisecond or so from each of 8
			// goroutines: a few times what 4 workers do with calls of
			// 50–300µs, so the queue is always busy and short.
			r := rand.New(rand.NewPCG(uint64(g), 2))
			for i := range total / 8 {
				s.Submit(&countTask{prio: r.IntN(Levels), running: &running, peak: &peak, ended: &ended, wg: &wg, spinFor: time.Duration(50+r.IntN(250)) * time.Microsecond})
				if i%15 == 14 {
					time.Sleep(time.Millisecond) // pacing the load, not synchronization
				}
			}
		}()
	}
	submitters.Wait()
	wg.Wait()
	s.Close()
	s.Wait()
	st := s.Stats()
	if st.DroppedFor(Refused)+st.DroppedFor(Evicted)+st.DroppedFor(Expired) == 0 {
		t.Fatalf("nothing was shed: the test did not overload the scheduler (ran %d)", st.Ran)
	}
	// Every refusal comes within a quarter of the target. On a machine
	// that other processes load, a scheduler descheduled for a few
	// milliseconds refuses a few calls late through no fault of its own:
	// one in 200 may.
	window := o.Target / 4
	var drops, late uint64
	for i, b := range DropWaitBounds() {
		drops += st.DropWaitBuckets[i]
		if b > window {
			late += st.DropWaitBuckets[i]
		}
	}
	if late > drops/200 {
		for i, b := range DropWaitBounds() {
			if b > window && st.DropWaitBuckets[i] > 0 {
				t.Errorf("%d calls answered after waiting up to %v in the queue; refusals should come within %v (%d of %d late, more than one in 200)", st.DropWaitBuckets[i], b, window, late, drops)
			}
		}
	}
	if n := st.DropWaitBuckets[len(DropWaitBounds())]; n > 0 {
		t.Errorf("%d calls answered after waiting more than %v", n, DropWaitBounds()[len(DropWaitBounds())-1])
	}
	t.Logf("ran %d; dropped: %d refused, %d evicted, %d expired; drop waits by bucket %v", st.Ran, st.DroppedFor(Refused), st.DroppedFor(Evicted), st.DroppedFor(Expired), st.DropWaitBuckets)
}

// goTask records the goroutine that ran it.
type goTask struct {
	task
	onCaller *bool
	caller   uint64
}

func (g *goTask) Run() {
	*g.onCaller = goid() == g.caller
	g.task.Run()
}

// goid returns the current goroutine's id, from its stack header.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

func TestRunInline(t *testing.T) {
	t.Run("idle scheduler runs it on the caller", func(t *testing.T) {
		h := newHarness(t, Options{Workers: 1})
		var onCaller bool
		g := &goTask{task: *h.task("a", 5), onCaller: &onCaller, caller: goid()}
		if !h.s.RunInline(g) {
			t.Fatal("an idle scheduler did not run the task inline")
		}
		h.expect("a:ran")
		if !onCaller {
			t.Fatal("RunInline ran the task on another goroutine")
		}
		if st := h.s.Stats(); st.Ran != 1 {
			t.Fatalf("Stats.Ran = %d after one inline run, want 1", st.Ran)
		}
	})
	t.Run("busy workers: the caller must submit", func(t *testing.T) {
		h := newHarness(t, Options{Workers: 1})
		release := h.blocker("busy")
		if h.s.RunInline(h.task("a", 9)) {
			t.Fatal("ran inline while every worker was busy")
		}
		close(release)
		h.expect("busy:ran")
	})
	t.Run("queued tasks: the caller must submit", func(t *testing.T) {
		h := newHarness(t, Options{Workers: 1})
		release := h.blocker("busy")
		h.s.Submit(h.task("queued", 1))
		close(release)
		// The queued task may or may not have started; while it is queued
		// an inline run would jump ahead of it.
		h.s.mu.Lock()
		queued := h.s.q.n
		h.s.mu.Unlock()
		ran := h.s.RunInline(h.task("a", 9))
		if queued > 0 && ran {
			t.Fatal("ran inline ahead of a queued task")
		}
		want := map[string]bool{"busy:ran": true, "queued:ran": true}
		if ran {
			want["a:ran"] = true
		}
		for range want {
			if e := h.next(); !want[e] {
				t.Fatalf("unexpected end %q", e)
			}
		}
	})
	t.Run("tasks queued meanwhile go to a worker after", func(t *testing.T) {
		h := newHarness(t, Options{Workers: 1})
		a := h.task("a", 5)
		a.release = make(chan struct{})
		a.started = h.started
		done := make(chan bool)
		go func() { done <- h.s.RunInline(a) }()
		<-h.started
		h.s.Submit(h.task("b", 5)) // the one slot is taken: queued
		close(a.release)
		h.expect("a:ran", "b:ran")
		if !<-done {
			t.Fatal("RunInline reported it did not run the task it ran")
		}
	})
	t.Run("disabled scheduler never runs inline", func(t *testing.T) {
		h := newHarness(t, Options{Disabled: true})
		if h.s.RunInline(h.task("a", 5)) {
			t.Fatal("a disabled scheduler ran a task inline")
		}
	})
	t.Run("hopeless task is left to Submit, which drops it", func(t *testing.T) {
		h := newHarness(t, Options{Workers: 1})
		a := h.task("a", 5)
		a.canceled.Store(true)
		if h.s.RunInline(a) {
			t.Fatal("ran a canceled task inline")
		}
		h.s.Submit(a)
		h.expect("a:canceled")
	})
}

// timedTask reports a run of a fixed length, without taking it.
type timedTask struct {
	task
	took    time.Duration
	refused bool // the run refused its work: no sample
}

func (t *timedTask) RunTimed(start time.Time) (end time.Time, sampled bool) {
	t.task.Run()
	return start.Add(t.took), !t.refused
}

// A TimedTask's own times are its service time: the scheduler reads no
// clock of its own around it.
func TestTimedTaskTimesItself(t *testing.T) {
	h := newHarness(t, Options{Workers: 1})
	cost := new(ServiceTime)
	for i := range minObservations {
		tt := &timedTask{task: *h.task(fmt.Sprint(i), 5), took: 5 * time.Millisecond}
		tt.cost = cost
		h.s.Submit(tt)
		h.expect(fmt.Sprint(i) + ":ran")
	}
	h.s.Close()
	h.s.Wait() // the last run's cost is recorded after it reported
	if got := cost.Estimate(); got != 5*time.Millisecond {
		t.Fatalf("service time %v after runs that each reported 5ms, want 5ms", got)
	}
}

// A run that refused its work (a handler that answered it is overloaded)
// is no sample of its method's service time: runs of a microsecond that
// refused, beside runs of 5ms, leave the estimate at 5ms, and the
// method's limit sees no window of quick calls.
func TestRefusedRunsAreNoSamples(t *testing.T) {
	h := newHarness(t, Options{Workers: 1})
	cost := new(ServiceTime)
	for i := range 2 * minObservations {
		tt := &timedTask{task: *h.task(fmt.Sprint(i), 5), took: 5 * time.Millisecond, refused: i%2 == 0}
		if tt.refused {
			tt.took = time.Microsecond
		}
		tt.cost = cost
		h.s.Submit(tt)
		h.expect(fmt.Sprint(i) + ":ran")
	}
	h.s.Close()
	h.s.Wait()
	if got := cost.Estimate(); got != 5*time.Millisecond {
		t.Fatalf("service time %v after refusals of 1µs beside runs of 5ms, want 5ms", got)
	}
	if got := cost.n.Load(); got != minObservations {
		t.Fatalf("%d samples, want %d: the refusals are none", got, minObservations)
	}
}

// startsTask records the start the scheduler gives it, and reports an end
// a fixed time later.
type startsTask struct {
	timedTask
	starts chan time.Time
}

func (t *startsTask) RunTimed(start time.Time) (end time.Time, sampled bool) {
	t.starts <- start
	return t.timedTask.RunTimed(start)
}

// The scheduler gives a TimedTask the start it has just read: for a task
// run inline, the read that admitted it; on a worker, a read made as the
// task starts, not the last task's end, since the last task's run went on
// past its end (a call sends its reply) and that time is not this one's.
func TestTimedTaskStartsAtTheSchedulersClockRead(t *testing.T) {
	h := newHarness(t, Options{Workers: 1})
	now, advance := h.fakeClock()
	starts := make(chan time.Time, 3)
	first := &startsTask{timedTask{task: *h.task("first", 5), took: 5 * time.Millisecond}, starts}
	first.release = make(chan struct{})
	first.started = h.started
	h.s.Submit(first)
	<-h.started
	h.s.Submit(&startsTask{timedTask{task: *h.task("queued", 5), took: time.Millisecond}, starts})
	firstStart := now()
	advance(2 * time.Millisecond) // the first task's end will say +5ms
	close(first.release)
	h.expect("first:ran", "queued:ran")
	if got := <-starts; !got.Equal(firstStart) {
		t.Errorf("first task handed to a worker started at %v, want the clock's %v", got, firstStart)
	}
	if got, want := <-starts, now(); !got.Equal(want) {
		t.Errorf("queued task started at %v, want the clock's %v (the first task's end was %v)", got, want, firstStart.Add(5*time.Millisecond))
	}
	h.s.Close()
	h.s.Wait() // the worker has parked or left: its slot is free
	h2 := newHarness(t, Options{Workers: 1})
	now2, _ := h2.fakeClock()
	if !h2.s.RunInline(&startsTask{timedTask{task: *h2.task("inline", 5)}, starts}) {
		t.Fatal("an idle scheduler did not run a task inline")
	}
	h2.expect("inline:ran")
	if got, want := <-starts, now2(); !got.Equal(want) {
		t.Errorf("inline task started at %v, want the clock's %v", got, want)
	}
}

// BenchmarkSubmit submits b.N quick tasks from many goroutines, each
// waiting for its task to run, as a server's readers and callers do.
func BenchmarkSubmit(b *testing.B) {
	s := New(Options{})
	defer func() {
		s.Close()
		s.Wait()
	}()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		done := make(chan struct{}, 1)
		t := &benchTask{done: done}
		for pb.Next() {
			s.Submit(t)
			<-done
		}
	})
}

// benchTask is a task that signals done when it ends.
type benchTask struct{ done chan struct{} }

func (t *benchTask) Priority() int               { return 5 }
func (t *benchTask) Deadline() (time.Time, bool) { return time.Time{}, false }
func (t *benchTask) Canceled() bool              { return false }
func (t *benchTask) Cost() *ServiceTime          { return &benchCost }
func (t *benchTask) Run()                        { t.done <- struct{}{} }
func (t *benchTask) Drop(Reason)                 { t.done <- struct{}{} }

var benchCost ServiceTime

package shed

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
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

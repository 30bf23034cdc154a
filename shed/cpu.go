package shed

import (
	"runtime"
	"runtime/metrics"
	"slices"
	"time"
)

// The elastic pool's CPU limit.
//
// With Options.Workers left zero, the number of tasks running at once is
// not fixed: calls that only wait (on a database, another service) hold
// a goroutine but no CPU, and a server should run as many of them as
// come. What is scarce is the CPU, and the Go runtime says when it is:
// goroutines that are ready to run but wait for a thread, and how long
// goroutines waited for one (/sched/latencies:seconds). The scheduler
// reads both at most every cpuEvery and keeps a limit on running tasks:
//
//   - While the CPU keeps up, a task that finds every slot taken raises
//     the limit by one and starts at once, up to a quarter of the limit
//     plus GOMAXPROCS in every growEvery: the pool grows as fast as its
//     workers block, and a surge of CPU-bound work overshoots by a
//     bounded step before the next reading stops it.
//   - The CPU is congested when goroutines waited longer than cpuTarget
//     (the 90th percentile since the last reading) and more goroutines
//     wait for a thread than there are CPUs. Then the limit stops
//     growing, and if as many goroutines wait as half the tasks running,
//     the tasks are CPU-bound: the limit falls to the knee, the tasks not
//     waiting plus two per CPU, at most halving at each reading. What
//     cannot start queues, and the scheduler's queue rules (overload
//     mode, refusals) apply to it. Tasks that wait on I/O are not
//     runnable, so a CPU busy with other work does not cut them.
//   - A limit far above the tasks running decays toward twice their
//     number, and no lower than where it started, so a workload that
//     turns CPU-bound finds it no higher than it needs.
//
// The limit never falls below where it starts, DefaultWorkers() (the
// fixed default before the pool was elastic), nor rises above
// Options.MaxInFlight.

// cpuReading is what the runtime tells of the CPU.
type cpuReading struct {
	runnable int           // goroutines ready to run, waiting for a thread
	latency  time.Duration // 90th percentile of the wait to run since the last reading
}

const (
	cpuEvery    = 5 * time.Millisecond
	growEvery   = time.Millisecond
	cpuReadings = 5
)

// medianReading returns the median wait and the median runnable count of
// rs.
func medianReading(rs [cpuReadings]cpuReading) (time.Duration, int) {
	var waits [cpuReadings]time.Duration
	var runs [cpuReadings]int
	for i, r := range rs {
		waits[i], runs[i] = r.latency, r.runnable
	}
	slices.Sort(waits[:])
	slices.Sort(runs[:])
	return waits[cpuReadings/2], runs[cpuReadings/2]
}

// minCPULimit is how many idle workers an elastic pool keeps beyond
// twice the tasks running: enough to keep every CPU busy while some
// tasks wait.
func minCPULimit() int { return 4 * runtime.GOMAXPROCS(0) }

// cpuTarget is how long goroutines may wait for a CPU before it counts as
// congested: half the overload wait limit.
func (o Options) cpuTarget() time.Duration { return o.Target }

// runtimeCPU returns a function that reads the CPU's state from the Go
// runtime; each call's latency covers the time since the one before.
func runtimeCPU() func() cpuReading {
	samples := []metrics.Sample{
		{Name: "/sched/goroutines/runnable:goroutines"},
		{Name: "/sched/latencies:seconds"},
	}
	var prev []uint64
	return func() cpuReading {
		metrics.Read(samples)
		var r cpuReading
		if samples[0].Value.Kind() == metrics.KindUint64 {
			r.runnable = int(samples[0].Value.Uint64())
		}
		if samples[1].Value.Kind() != metrics.KindFloat64Histogram {
			return r
		}
		h := samples[1].Value.Float64Histogram()
		if len(prev) != len(h.Counts) {
			prev = make([]uint64, len(h.Counts))
			copy(prev, h.Counts)
			return r
		}
		var total uint64
		for i, c := range h.Counts {
			total += c - prev[i]
		}
		if total > 0 {
			var seen uint64
			for i, c := range h.Counts {
				if seen += c - prev[i]; seen*10 >= total*9 {
					r.latency = time.Duration(min(h.Buckets[i+1], 10) * float64(time.Second))
					break
				}
			}
		}
		copy(prev, h.Counts)
		return r
	}
}

// cpuCheck reads the CPU's state, if cpuEvery has passed since the last
// reading, and sets the elastic limit from it. REQUIRES s.mu is held.
func (s *Scheduler) cpuCheck(now time.Time) {
	if !s.elastic || now.Before(s.cpuAt) {
		return
	}
	s.cpuAt = now.Add(cpuEvery)
	if now.Sub(s.peakAt) >= peakSpan {
		s.peaks[1], s.peaks[0], s.peakAt = s.peaks[0], s.running, now
	}
	r := s.readCPU()
	s.cpu = r
	congested := r.latency > s.opts.cpuTarget() && r.runnable > runtime.GOMAXPROCS(0)
	// For the method limits, the CPU's wait and its runnable goroutines
	// are the medians of the last cpuReadings readings (a reading not
	// congested waits 0): one reading's spike on a CPU that other work
	// keeps busy neither hides a dependency's congestion nor makes one.
	s.waits[s.waitAt] = cpuReading{runnable: r.runnable}
	if congested {
		s.waits[s.waitAt].latency = r.latency
	}
	s.waitAt = (s.waitAt + 1) % len(s.waits)
	wait, runnable := medianReading(s.waits)
	s.cpuWait.Store(int64(wait))
	s.cpuRun.Store(int64(runnable))
	// Held for two readings in a row, and with as many goroutines waiting
	// for a CPU as half the tasks running: the tasks themselves want the
	// CPU. Tasks that wait on I/O are not runnable, so a CPU busy with
	// other work, or a moment's burst, does not stop the pool growing.
	s.hot = congested && s.congested && 2*r.runnable >= s.running
	s.congested = congested
	if floor := min(DefaultWorkers(), s.opts.MaxInFlight); !s.hot && s.limit > 2*s.running+floor {
		s.limit -= (s.limit - max(floor, 2*s.running)) / 8
	}
}

// grow raises the elastic limit by one for a task that found every slot
// taken, if the CPU keeps up and this growEvery's step allows. REQUIRES
// s.mu is held.
func (s *Scheduler) grow(now time.Time) bool {
	if !s.elastic || s.limit >= s.opts.MaxInFlight {
		return false
	}
	s.cpuCheck(now)
	if s.hot {
		return false
	}
	if !now.Before(s.growAt) {
		s.growAt = now.Add(growEvery)
		s.growBudget = s.limit/4 + runtime.GOMAXPROCS(0)
	}
	if s.growBudget <= 0 {
		return false
	}
	s.growBudget--
	s.limit++
	return true
}

// canGrow reports whether the elastic limit could still rise: the queue
// then waits for the pool to grow, not for the CPU, and is no sign of
// overload. REQUIRES s.mu is held.
func (s *Scheduler) canGrow() bool {
	return s.elastic && !s.hot && s.limit < s.opts.MaxInFlight
}

package shed

import "time"

// waitBounds are the upper bounds of the queue-wait histogram buckets.
var waitBounds = [...]time.Duration{
	100 * time.Microsecond,
	time.Millisecond,
	5 * time.Millisecond,
	10 * time.Millisecond,
	50 * time.Millisecond,
	100 * time.Millisecond,
	500 * time.Millisecond,
	time.Second,
}

// WaitBounds returns the upper bounds of the buckets of Stats.WaitBuckets;
// the last bucket counts the waits above the last bound.
func WaitBounds() []time.Duration { return waitBounds[:] }

// dropWaitBounds are the upper bounds of the histogram of how long dropped
// tasks waited before their answer: fine around the millisecond, where
// overload refusals are judged.
var dropWaitBounds = [...]time.Duration{
	10 * time.Microsecond,
	50 * time.Microsecond,
	100 * time.Microsecond,
	200 * time.Microsecond,
	500 * time.Microsecond,
	time.Millisecond,
	2 * time.Millisecond,
	5 * time.Millisecond,
	10 * time.Millisecond,
	100 * time.Millisecond,
	time.Second,
}

// DropWaitBounds returns the upper bounds of the buckets of
// Stats.DropWaitBuckets; the last bucket counts the waits above the last
// bound.
func DropWaitBounds() []time.Duration { return dropWaitBounds[:] }

// Stats is a snapshot of a Scheduler's state and counters. Counters count
// from the scheduler's creation.
type Stats struct {
	// Queued is the number of waiting tasks by priority.
	Queued [Levels]int
	// Running is the number of tasks running now; Workers is the limit
	// on it now: Options.Workers, or the elastic limit.
	Running, Workers int
	// Elastic reports that the limit is elastic (Options.Workers zero);
	// MaxInFlight is its hard ceiling.
	Elastic     bool
	MaxInFlight int
	// CPUWait is the 90th percentile of how long goroutines waited for a
	// CPU at the last reading, Runnable how many waited then, and
	// CPUCongested whether that held the elastic limit (elastic only).
	CPUWait      time.Duration
	Runnable     int
	CPUCongested bool
	// Parked is the number of idle workers kept for the next calls.
	Parked int
	// Overloaded reports whether the queue has stayed non-empty for
	// longer than Options.Interval, so the short Target limit applies.
	Overloaded bool
	// Ran counts the tasks that ran.
	Ran uint64
	// Dropped counts the tasks dropped without running, by Reason.
	Dropped [numReasons]uint64
	// WaitTotal is the time the tasks that ran spent queued, and
	// WaitBuckets a histogram of it, with bounds WaitBounds().
	WaitTotal   time.Duration
	WaitBuckets [len(waitBounds) + 1]uint64
	// DropWaitBuckets is a histogram, with bounds DropWaitBounds(), of
	// how long the dropped tasks waited in the queue before they were
	// answered: 0 for those refused on arrival. It is the scheduler's
	// share of a refusal's latency.
	DropWaitBuckets [len(dropWaitBounds) + 1]uint64
	// ServiceTime is the moving average run time of all tasks.
	ServiceTime time.Duration
}

// DroppedFor returns the count of tasks dropped for reason r.
func (st Stats) DroppedFor(r Reason) uint64 {
	if r >= numReasons {
		return 0
	}
	return st.Dropped[r]
}

// Reasons lists every drop Reason, in order, for iterating over
// Stats.Dropped.
func Reasons() []Reason { return []Reason{Evicted, Refused, Expired, Deadline, Canceled, Limited} }

// Stats returns a snapshot of the scheduler's state and counters.
func (s *Scheduler) Stats() Stats {
	var st Stats
	now := s.now()
	s.mu.Lock()
	for level := range s.q.lv {
		st.Queued[level] = s.q.lv[level].len()
	}
	st.Running = s.running
	st.Overloaded = s.q.overloaded(now, s.poolSlots(), &s.opts)
	st.Workers = s.limit
	st.CPUWait, st.Runnable, st.CPUCongested = s.cpu.latency, s.cpu.runnable, s.hot
	st.Parked = len(s.idle)
	s.mu.Unlock()
	st.Elastic, st.MaxInFlight = s.elastic, s.opts.MaxInFlight
	st.Ran = s.ran.Load()
	for r := range st.Dropped {
		st.Dropped[r] = s.dropped[r].Load()
	}
	st.WaitTotal = time.Duration(s.waitSum.Load())
	for i := range st.WaitBuckets {
		st.WaitBuckets[i] = s.waitHist[i].Load()
	}
	for i := range st.DropWaitBuckets {
		st.DropWaitBuckets[i] = s.dropWaitHist[i].Load()
	}
	st.ServiceTime = time.Duration(s.all.avg.Load())
	return st
}

func (s *Scheduler) recordDropWait(d time.Duration) {
	i := 0
	for i < len(dropWaitBounds) && d > dropWaitBounds[i] {
		i++
	}
	s.dropWaitHist[i].Add(1)
}

func (s *Scheduler) recordWait(d time.Duration) {
	s.waitSum.Add(int64(d))
	i := 0
	for i < len(waitBounds) && d > waitBounds[i] {
		i++
	}
	s.waitHist[i].Add(1)
}

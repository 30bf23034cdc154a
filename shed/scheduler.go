package shed

import (
	"sync"
	"sync/atomic"
	"time"
)

// maxIdle bounds the worker goroutines kept parked between bursts. A
// parked goroutine keeps the stack its calls grew, which spares the next
// call growing one again.
const maxIdle = 256

// Scheduler queues tasks by priority and runs them on a bounded number of
// workers. Create one with New.
type Scheduler struct {
	opts Options
	now  func() time.Time // time.Now; tests swap it

	mu        sync.Mutex
	q         [Levels]deque
	n         int       // queued tasks
	running   int       // tasks running
	lastEmpty time.Time // the last time the queue was empty
	timer     *time.Timer
	timerAt   time.Time // when timer fires; zero if not armed
	closed    bool
	noPark    bool        // set by ReleaseIdle until new work comes
	idle      []chan Task // parked workers, newest last
	wg        sync.WaitGroup

	all ServiceTime // run time of every task, for the throughput estimate

	ran      atomic.Uint64
	dropped  [numReasons]atomic.Uint64
	waitSum  atomic.Int64 // nanoseconds waited by tasks that ran
	waitHist [len(waitBounds) + 1]atomic.Uint64
}

// New returns a Scheduler with o's settings; zero fields take defaults.
func New(o Options) *Scheduler {
	s := &Scheduler{opts: o.withDefaults(), now: time.Now}
	s.lastEmpty = s.now()
	s.timer = time.AfterFunc(time.Hour, s.sweep)
	s.timer.Stop()
	return s
}

// Options returns the settings in force, defaults filled in.
func (s *Scheduler) Options() Options { return s.opts }

// Submit queues t, runs it, or drops it, and returns at once. Every task
// submitted ends in exactly one call of its Run or its Drop. Drop may be
// called on the submitting goroutine, or later on a worker or timer
// goroutine; Run is always called on a worker goroutine.
func (s *Scheduler) Submit(t Task) {
	if s.opts.Disabled {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			t.Run()
		}()
		return
	}
	now := s.now()
	if r, ok := s.hopeless(t, now); ok {
		s.drop(t, r)
		return
	}
	p := clamp(t.Priority())

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.drop(t, Refused)
		return
	}
	if s.n == 0 && s.running < s.opts.Workers {
		s.running++
		s.lastEmpty = now
		s.mu.Unlock()
		s.recordWait(0)
		s.start(t)
		return
	}
	var victim Task
	if s.n >= s.capacity(now) {
		victim = s.evictBelow(p)
		if victim == nil {
			s.mu.Unlock()
			s.drop(t, Refused)
			return
		}
	}
	s.q[p].pushBack(entry{t, now})
	s.n++
	s.arm(now)
	s.mu.Unlock()
	if victim != nil {
		s.drop(victim, Evicted)
	}
}

// hopeless reports whether t should be dropped before it runs: its caller
// left, its deadline passed, or it is closer than the task's usual run
// time.
func (s *Scheduler) hopeless(t Task, now time.Time) (Reason, bool) {
	if t.Canceled() {
		return Canceled, true
	}
	if d, ok := t.Deadline(); ok && d.Sub(now) <= t.Cost().Estimate() {
		return Deadline, true
	}
	return 0, false
}

// overloaded reports whether the queue has stayed non-empty for longer
// than Interval. Callers hold s.mu.
func (s *Scheduler) overloaded(now time.Time) bool {
	return s.n > 0 && now.Sub(s.lastEmpty) > s.opts.Interval
}

// limit is the longest a task may wait now. Callers hold s.mu.
func (s *Scheduler) limit(now time.Time) time.Duration {
	if s.overloaded(now) {
		return s.opts.Target
	}
	return s.opts.MaxWait
}

// capacity is how many tasks may wait now: QueueSize, or under overload
// about Target's worth of work at the measured throughput. Callers hold
// s.mu.
func (s *Scheduler) capacity(now time.Time) int {
	if !s.overloaded(now) {
		return s.opts.QueueSize
	}
	avg := s.all.Estimate()
	if avg <= 0 {
		return s.opts.QueueSize
	}
	perSecond := float64(s.opts.Workers) * float64(time.Second) / float64(avg)
	n := int(perSecond * s.opts.Target.Seconds())
	return min(max(n, 1), s.opts.QueueSize)
}

// evictBelow removes and returns the newest task of the lowest priority
// under p, or nil if every queued task has priority p or higher. Callers
// hold s.mu.
func (s *Scheduler) evictBelow(p int) Task {
	for level := 0; level < p; level++ {
		if s.q[level].len() > 0 {
			s.n--
			return s.q[level].popBack().t
		}
	}
	return nil
}

// start runs t on a parked worker or a new one.
func (s *Scheduler) start(t Task) {
	s.mu.Lock()
	s.noPark = false
	if n := len(s.idle); n > 0 {
		ch := s.idle[n-1]
		s.idle = s.idle[:n-1]
		s.mu.Unlock()
		ch <- t
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go s.worker(t)
}

func (s *Scheduler) worker(t Task) {
	defer s.wg.Done()
	var ch chan Task
	for t != nil {
		s.run(t)
		if t = s.next(); t != nil {
			continue
		}
		s.mu.Lock()
		if s.closed || s.noPark || len(s.idle) >= maxIdle {
			s.mu.Unlock()
			return
		}
		if ch == nil {
			ch = make(chan Task, 1)
		}
		s.idle = append(s.idle, ch)
		s.mu.Unlock()
		t = <-ch
	}
}

func (s *Scheduler) run(t Task) {
	start := s.now()
	t.Run()
	d := s.now().Sub(start)
	t.Cost().Observe(d)
	s.all.Observe(d)
	s.ran.Add(1)
}

// next takes the task a worker should run next, dropping on the way the
// ones that waited too long or can no longer finish in time. It returns
// nil, and gives up the worker's slot, when the queue is empty.
func (s *Scheduler) next() Task {
	var drops []dropped
	defer func() {
		for _, d := range drops {
			s.drop(d.t, d.r)
		}
	}()
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		level := s.top()
		if level < 0 {
			s.running--
			s.lastEmpty = now
			return nil
		}
		lifo := s.overloaded(now)
		limit := s.limit(now)
		var e entry
		if lifo {
			e = s.q[level].popBack()
		} else {
			e = s.q[level].popFront()
		}
		s.n--
		if s.n == 0 {
			s.lastEmpty = now
		}
		wait := now.Sub(e.enq)
		if wait > limit {
			drops = append(drops, dropped{e.t, Expired})
			continue
		}
		if r, ok := s.hopeless(e.t, now); ok {
			drops = append(drops, dropped{e.t, r})
			continue
		}
		s.recordWait(wait)
		return e.t
	}
}

type dropped struct {
	t Task
	r Reason
}

// top returns the highest non-empty priority level, or -1. Callers hold
// s.mu.
func (s *Scheduler) top() int {
	for level := Levels - 1; level >= 0; level-- {
		if s.q[level].len() > 0 {
			return level
		}
	}
	return -1
}

// arm makes sure the sweep timer fires by the time the oldest queued
// task expires, so expired tasks are answered even while every worker is
// busy for a long time. Callers hold s.mu.
func (s *Scheduler) arm(now time.Time) {
	if s.n == 0 {
		return
	}
	oldest := now
	for level := range s.q {
		if s.q[level].len() > 0 && s.q[level].front().enq.Before(oldest) {
			oldest = s.q[level].front().enq
		}
	}
	due := oldest.Add(s.limit(now))
	if !s.timerAt.IsZero() && !s.timerAt.After(due) {
		return
	}
	s.timerAt = due
	s.timer.Reset(max(due.Sub(now), 0) + time.Millisecond/4)
}

// sweep drops the queued tasks that have waited past the limit.
func (s *Scheduler) sweep() {
	var drops []dropped
	now := s.now()
	s.mu.Lock()
	s.timerAt = time.Time{}
	limit := s.limit(now)
	for level := range s.q {
		for s.q[level].len() > 0 {
			e := s.q[level].front()
			if now.Sub(e.enq) <= limit && !e.t.Canceled() {
				break
			}
			s.q[level].popFront()
			s.n--
			r := Expired
			if e.t.Canceled() {
				r = Canceled
			}
			drops = append(drops, dropped{e.t, r})
		}
	}
	if s.n == 0 {
		s.lastEmpty = now
	}
	if !s.closed {
		s.arm(now)
	}
	s.mu.Unlock()
	for _, d := range drops {
		s.drop(d.t, d.r)
	}
}

func (s *Scheduler) drop(t Task, r Reason) {
	s.dropped[r].Add(1)
	t.Drop(r)
}

// ReleaseIdle lets the parked worker goroutines exit, and the busy ones
// exit when their work runs out, until new work comes. kiev calls it when
// a server has no connection left, so an idle server holds no goroutines.
func (s *Scheduler) ReleaseIdle() {
	s.mu.Lock()
	s.noPark = true
	idle := s.idle
	s.idle = nil
	s.mu.Unlock()
	for _, ch := range idle {
		ch <- nil
	}
}

// Close stops the scheduler: queued tasks are dropped as Refused, new
// ones are refused, parked workers exit and busy ones exit after their
// task. Close does not wait for running tasks; Wait does.
func (s *Scheduler) Close() {
	s.mu.Lock()
	s.closed = true
	var drops []dropped
	for level := range s.q {
		for s.q[level].len() > 0 {
			drops = append(drops, dropped{s.q[level].popFront().t, Refused})
		}
	}
	s.n = 0
	s.timer.Stop()
	s.timerAt = time.Time{}
	s.mu.Unlock()
	for _, d := range drops {
		s.drop(d.t, d.r)
	}
	s.ReleaseIdle()
}

// Wait blocks until every worker goroutine has exited. Call it after
// Close, once no task can be running, or it blocks until they end.
func (s *Scheduler) Wait() { s.wg.Wait() }

func clamp(p int) int { return min(max(p, 0), Levels-1) }

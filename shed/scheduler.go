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
//
// A task passes two stages. First its method's lane, if the method's
// limit is on: a call beyond the limit waits there, or is refused. Then
// the pool: the call starts on a worker at once, or waits in the pool's
// queue. Workers are goroutines kept parked between calls; each runs one
// task at a time, then takes the next from the pool's queue, or parks.
type Scheduler struct {
	opts    Options
	now     func() time.Time  // time.Now; tests swap it
	readCPU func() cpuReading // runtimeCPU(); tests swap it
	elastic bool              // Options.Workers was left zero
	cpuWait atomic.Int64      // how long goroutines waited for a CPU lately (nanoseconds), for the method limits
	cpuRun  atomic.Int64      // how many goroutines waited for one lately, for the method limits

	// Pause detection, for the method limits: the last arrival or end,
	// and until when runs are to be ignored (unix nanoseconds).
	lastSeen, pausedUntil atomic.Int64

	mu         sync.Mutex // guards the fields below, and every method's lane
	q          queue      // tasks waiting for a worker
	running    int        // tasks running
	peaks      [2]int     // the most running in this peakSpan and the one before
	peakAt     time.Time  // when this peakSpan began
	limit      int        // how many may run: Workers, or the elastic limit
	cpuAt      time.Time  // the next CPU reading, elastic only
	cpu        cpuReading
	hot        bool                    // the CPU is congested by the tasks: the pool stops growing
	congested  bool                    // the last reading found the CPU congested
	waits      [cpuReadings]cpuReading // the last readings, latency 0 if not congested
	waitAt     int
	growAt     time.Time      // when growBudget is renewed
	growBudget int            // how much the elastic limit may still grow until growAt
	lanes      []*ServiceTime // methods whose lane has held tasks since the last sweep
	timer      *time.Timer
	timerAt    time.Time // when timer fires; zero if not armed
	closed     bool
	noPark     bool        // set by ReleaseIdle until new work comes
	idle       []chan Task // parked workers, newest last
	wg         sync.WaitGroup

	all ServiceTime // run time of every task, for the throughput estimate

	ran      atomic.Uint64
	dropped  [numReasons]atomic.Uint64
	waitSum  atomic.Int64 // nanoseconds waited by tasks that ran
	waitHist [len(waitBounds) + 1]atomic.Uint64

	dropWaitHist [len(dropWaitBounds) + 1]atomic.Uint64
}

// New returns a Scheduler with o's settings; zero fields take defaults.
// It panics if o is not valid (see Options.Validate): a server's settings
// are a program's, checked once at start.
func New(o Options) *Scheduler {
	if err := o.Validate(); err != nil {
		panic(err)
	}
	s := &Scheduler{opts: o.withDefaults(), now: time.Now, readCPU: runtimeCPU(), elastic: o.Workers == 0}
	s.limit = s.opts.Workers
	if s.elastic {
		s.limit = min(DefaultWorkers(), s.opts.MaxInFlight)
	}
	s.q.pooled = true
	s.q.init(s.now())
	s.timer = time.AfterFunc(time.Hour, s.sweep)
	s.timer.Stop()
	return s
}

// Options returns the settings in force, defaults filled in.
func (s *Scheduler) Options() Options { return s.opts }

// work is what a critical section leaves to do once the lock is released:
// tasks to answer unrun, and tasks to hand to workers.
type work struct {
	drops []dropped
	first handoff   // the first task to hand over (t nil: none), sparing starts' allocation
	more  []handoff // the others
}

// handoff is a task and the worker it goes to (nil: a new one).
type handoff struct {
	t  Task
	ch chan Task
}

// busy reports whether w has anything to do.
func (w *work) busy() bool { return len(w.drops) > 0 || w.first.t != nil }

func (w *work) do(s *Scheduler) {
	for _, d := range w.drops {
		s.drop(d)
	}
	if w.first.t != nil {
		s.hand(w.first.t, w.first.ch)
	}
	for _, h := range w.more {
		s.hand(h.t, h.ch)
	}
}

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
	s.seen(now)
	if r, ok := hopeless(t, now); ok {
		s.reject(t, r)
		return
	}
	p, f, c := clamp(t.Priority()), flowOf(t), t.Cost()
	var w work
	f.begin()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		f.end()
		s.reject(t, Refused)
		return
	}
	if c != nil && s.elastic {
		c.lim.arrive(now)
	}
	if s.limits(c) {
		c.lane.arrive(p)
		if c.lane.n > 0 || !c.lim.room() {
			ok := s.wait(c, s.entry(t, now), p, f, now, &w)
			s.mu.Unlock()
			if !ok {
				f.end()
				c.lim.limited.Add(1)
				s.reject(t, Limited)
			}
			w.do(s)
			return
		}
		c.lane.lastEmpty = now
		c.lane.fl.admitted(f, now)
	}
	s.enter(t, p, f, now, &w)
	s.mu.Unlock()
	w.do(s)
}

// entry returns t, queued at now, with when it is dropped if it has not
// started: its deadline, or for a call without one, MaxWait after now. A
// call predicted to start past MaxWait is refused on arrival; one
// admitted that waits longer, as the slots slowed meanwhile, still runs
// while it can finish in time (a refusal after a wait would only waste
// the wait), and is dropped when it no longer can (see hopeless).
func (s *Scheduler) entry(t Task, now time.Time) entry {
	if d, ok := t.Deadline(); ok {
		return entry{t: t, enq: now, expires: d}
	}
	return entry{t: t, enq: now, expires: now.Add(s.opts.MaxWait)}
}

// limits reports whether c's limit is on: its calls pass its lane.
// REQUIRES s.mu is held.
func (s *Scheduler) limits(c *ServiceTime) bool {
	return c != nil && s.elastic && (c.lim.inForce() != 0 || c.lane.n > 0)
}

// wait queues e, of priority p and flow f, in c's lane, where it waits
// for room under c's limit, and reports whether it was admitted. A call
// let through at once (the room freed meanwhile) is in w. REQUIRES s.mu
// is held.
func (s *Scheduler) wait(c *ServiceTime, e entry, p int, f *Flow, now time.Time, w *work) bool {
	l := &c.lane
	if l.winStart.IsZero() {
		l.init(now)
	}
	if c.lim.surged.Swap(false) {
		// Calls arrive far faster than they end: the lane's queue would
		// only grow, so its overload rules hold from the start.
		l.overload, l.winStart, l.arrivals, l.load = true, now, 0, max(l.load, 2*overloadLoad)
	}
	c.lim.held.Add(1)
	if _, ok := e.t.Deadline(); !ok && c.lim.probing.Load() {
		// Held back by a probe, for a step of two or three service
		// times: its wait limit is extended by two, at most by itself.
		e.expires = e.expires.Add(min(2*time.Duration(c.avg.Load()), s.opts.MaxWait))
	}
	o := &s.opts
	if c.lim.base() == 0 {
		// Under the bound from the first call, the lane holds what the
		// pool would have held, and leaves the overload mode of a limit
		// that turned off: the bound is no limit's short queue.
		l.overload = false
		cold := s.opts
		cold.QueueSize = max(cold.QueueSize, cold.MaxInFlight)
		o = &cold
	}
	var ok bool
	w.drops, ok = l.add(e, p, f, now, s.laneSlots(c, now), o, w.drops)
	if !ok {
		return false
	}
	l.queued.Store(int64(l.n))
	if !l.listed {
		l.listed = true
		s.lanes = append(s.lanes, c)
	}
	s.release(c, now, false, w) // a call may have ended since room was checked
	s.arm(now)
	return true
}

// laneSlots is what c's lane feeds: its limit's calls, one starting as
// each of its calls in the pool ends, at the rate they ended in the last
// window, once those beyond the limit (a limit that started or fell below
// the calls in the pool) have ended. It enters overload mode only under a sustained load: a
// dependency served right at its capacity has a queue that comes and
// goes, which its wait limit bounds. During a probe, the lane admits
// calls as it would at the limit the probe started from, and never
// enters overload mode: the calls it holds back wait a little longer for
// the probe's sake, and are not refused for it. REQUIRES s.mu is held.
func (s *Scheduler) laneSlots(c *ServiceTime, now time.Time) slots {
	limit := c.lim.limit.Load()
	inflight := c.lim.inflight.Load()
	if limit == 0 && !c.lim.probing.Load() {
		// The bound from the first call doubles each round trip: no
		// prediction from its rate refuses a call (gap 0), which waits
		// while it can start in time.
		b := c.lim.offBound()
		return slots{limit: int(b), backlog: int(max(inflight-b, 0)), sustained: true}
	}
	gap := time.Duration(c.lim.gapNS.Load())
	if gap == 0 && limit > 0 {
		gap = c.Estimate() / time.Duration(limit)
	}
	var stall time.Duration
	if last := c.lim.lastEnd.Load(); last != 0 {
		stall = time.Duration(now.UnixNano() - last)
	}
	if c.lim.probing.Load() {
		base := c.lim.probeBase.Load()
		return slots{limit: int(base), backlog: int(max(inflight-base, 0)), gap: gap, stall: stall, hold: true, sustained: true}
	}
	return slots{limit: int(limit), backlog: int(max(inflight-limit, 0)), gap: gap, stall: stall, sustained: true}
}

// poolSlots is what the pool's queue feeds. REQUIRES s.mu is held.
func (s *Scheduler) poolSlots() slots {
	return slots{limit: s.limit, gap: s.all.Estimate() / time.Duration(s.limit), canGrow: s.canGrow()}
}

// enter admits e, of priority p and flow f, to the pool at now: it starts
// at once if a slot is free, or is queued under the pool's rules, or is
// refused. REQUIRES s.mu is held.
func (s *Scheduler) enter(t Task, p int, f *Flow, now time.Time, w *work) {
	s.pooled(t, now)
	s.q.arrive(p)
	if s.takeSlot(now) {
		s.startNow(t, 0, w)
		return
	}
	var ok bool
	w.drops, ok = s.q.add(s.entry(t, now), p, f, now, s.poolSlots(), &s.opts, w.drops)
	if !ok {
		w.drops = append(w.drops, dropped{t: t, r: Refused, pooled: true})
		return
	}
	if s.elastic {
		s.spill(now, w)
	}
	s.arm(now)
}

// release lets the calls waiting in c's lane into the pool while its
// limit has room. They were admitted by the lane, so the pool's rules do
// not refuse them: each starts at once if a slot is free, or queues; all
// queue with toQueue set, for the worker about to take its next task.
// REQUIRES s.mu is held.
func (s *Scheduler) release(c *ServiceTime, now time.Time, toQueue bool, w *work) {
	l := &c.lane
	for l.n > 0 && c.lim.room() {
		e, ok := l.pop(now, s.laneSlots(c, now), &w.drops)
		if !ok {
			break
		}
		p := clamp(e.t.Priority())
		s.pooled(e.t, now)
		s.q.arrive(p)
		if !toQueue && s.takeSlot(now) {
			s.startNow(e.t, now.Sub(e.enq), w)
			continue
		}
		s.q.push(p, entry{t: e.t, enq: e.enq, expires: e.expires})
	}
	l.queued.Store(int64(l.n))
	if s.q.n > 0 {
		if !toQueue {
			s.spill(now, w)
		}
		s.arm(now)
	}
}

// pooled counts t, entering the pool at now, in its method's calls in
// the pool.
func (s *Scheduler) pooled(t Task, now time.Time) {
	if c := t.Cost(); c != nil {
		c.lim.admitted()
	}
}

// startNow hands e, which took a slot, to a worker. REQUIRES s.mu is held.
func (s *Scheduler) startNow(t Task, wait time.Duration, w *work) {
	s.recordWait(wait)
	h := handoff{t, s.takeWorker()}
	if w.first.t == nil {
		w.first = h
		return
	}
	w.more = append(w.more, h)
}

// spill starts queued tasks on new workers while the elastic limit grows
// for them: the queue formed because workers block, not because the CPU
// is busy. REQUIRES s.mu is held.
func (s *Scheduler) spill(now time.Time, w *work) {
	for s.q.n > 0 && (s.running < s.limit || s.grow(now)) {
		e, ok := s.q.pop(now, s.poolSlots(), &w.drops)
		if !ok {
			break
		}
		s.start1()
		s.startNow(e.t, now.Sub(e.enq), w)
	}
}

// ended counts t, of the pool, out of flight: it ran for d and ended at
// end, or (ran false) was dropped.
func (s *Scheduler) ended(t Task, d time.Duration, ran bool, end time.Time) {
	if c := t.Cost(); c != nil {
		if ran {
			s.seen(end)
			// A run that started before a pause ended took the pause's
			// length too: it says nothing of the method's dependency.
			ran = end.UnixNano()-int64(d) >= s.pausedUntil.Load()
		}
		c.lim.end(d, ran, end, cpuSignal{time.Duration(s.cpuWait.Load()), int(s.cpuRun.Load())}, s.opts.MaxWait)
	}
	flowOf(t).end()
}

// pauseGap is how long the scheduler may see no arrival and no end,
// while calls are in flight, before it takes the process to have been
// paused (stopped by a signal, a debugger, a frozen VM) rather than its
// calls to have waited: the runs then in flight are left out of their
// methods' limits.
const pauseGap = time.Second

// seen records an arrival or an end at now, and a pause if none came for
// pauseGap before it.
func (s *Scheduler) seen(now time.Time) {
	t := now.UnixNano()
	if prev := s.lastSeen.Swap(t); prev != 0 && t-prev > int64(pauseGap) {
		s.pausedUntil.Store(t)
	}
}

// RunInline runs t on the calling goroutine, as Submit would run it on a
// worker, if it would start at once: a worker's slot is free and nothing
// is queued. It reports whether it ran t; if not, the caller submits it.
// Tasks queued while t runs go to workers when it ends. A server runs a
// quick call this way on the goroutine that read it, sparing the hand-off
// to a worker, which between two idle processes costs a thread's wake-up.
// A disabled scheduler never runs a task inline.
func (s *Scheduler) RunInline(t Task) bool {
	if s.opts.Disabled {
		return false
	}
	now := s.now()
	if _, ok := hopeless(t, now); ok {
		return false // Submit drops it, with the reason
	}
	c := t.Cost()
	s.mu.Lock()
	if s.closed || s.limits(c) || !s.takeSlot(now) {
		s.mu.Unlock()
		return false // Submit applies the method's limit, or queues it
	}
	s.q.arrive(clamp(t.Priority()))
	s.pooled(t, now)
	s.mu.Unlock()
	flowOf(t).begin()
	s.recordWait(0)
	end := s.run(t, now)
	if next, _ := s.nextOrPark(end, nil, c); next != nil {
		s.start(next) // the slot passes to a worker
	}
	return true
}

// takeSlot takes a worker's slot for a task arriving at now, if the task
// would start at once: nothing is queued and a slot is free. REQUIRES
// s.mu is held.
func (s *Scheduler) takeSlot(now time.Time) bool {
	if s.q.n != 0 || s.running >= s.limit && !s.grow(now) {
		return false
	}
	s.start1()
	s.q.lastEmpty = now
	return true
}

// start1 counts a task starting, and the most running lately (see
// cpuCheck). REQUIRES s.mu is held.
func (s *Scheduler) start1() {
	s.running++
	s.peaks[0] = max(s.peaks[0], s.running)
}

// hopeless reports whether t should be dropped before it runs: its caller
// left, its deadline passed, or it is closer than the task's expected run
// time, while that estimate is fresh (see ServiceTime.stale).
func hopeless(t Task, now time.Time) (Reason, bool) {
	if t.Canceled() {
		return Canceled, true
	}
	d, ok := t.Deadline()
	if !ok {
		return 0, false
	}
	left := d.Sub(now)
	if left <= 0 {
		return Deadline, true
	}
	if c := t.Cost(); left <= c.skipEstimate() && !c.stale(now) {
		return Deadline, true
	}
	return 0, false
}

// start runs t on a parked worker or a new one.
func (s *Scheduler) start(t Task) {
	s.mu.Lock()
	ch := s.takeWorker()
	s.mu.Unlock()
	s.hand(t, ch)
}

// takeWorker takes the parked worker a task is to go to, or returns nil
// if there is none and hand is to start one. REQUIRES s.mu is held.
func (s *Scheduler) takeWorker() chan Task {
	s.noPark = false
	if n := len(s.idle); n > 0 {
		ch := s.idle[n-1]
		s.idle = s.idle[:n-1]
		return ch
	}
	s.wg.Add(1)
	return nil
}

// hand gives t to the worker takeWorker took, or to a new one.
func (s *Scheduler) hand(t Task, ch chan Task) {
	if ch != nil {
		ch <- t
		return
	}
	go s.worker(t)
}

func (s *Scheduler) worker(t Task) {
	defer s.wg.Done()
	ch := make(chan Task, 1) // where a parked worker gets its next task
	for t != nil {
		// A fresh read, not the last task's end: a task's run goes on
		// past its end (a call sends its reply), and that time is not
		// the next task's.
		end := s.run(t, s.now())
		var parked bool
		if t, parked = s.nextOrPark(end, ch, t.Cost()); t != nil {
			continue
		}
		if !parked {
			return
		}
		t = <-ch
	}
}

// run runs t, starting at start, and returns when it ended.
func (s *Scheduler) run(t Task, start time.Time) time.Time {
	var end time.Time
	sampled := true
	if tt, ok := t.(TimedTask); ok {
		end, sampled = tt.RunTimed(start)
	} else {
		t.Run()
		end = s.now()
	}
	d := end.Sub(start)
	s.all.Observe(d)
	s.ran.Add(1)
	if !sampled {
		// A run that refused its work: no sample of the method's
		// service time.
		s.seen(end)
		s.ended(t, d, false, end)
		return end
	}
	t.Cost().Observe(d)
	s.ended(t, d, true, end)
	return end
}

// nextOrPark takes the task a worker should run next, at now, when its
// task, of method c, has ended: the calls waiting in c's lane are let
// into the pool first, as the end made room under c's limit. It drops on
// the way the tasks that waited too long or can no longer finish in time.
// When the queue is empty, it gives up the worker's slot, and parks the
// worker, in the same critical section, unless workers are to exit
// (Close, ReleaseIdle) or enough are parked: parked reports that the
// worker is to wait on ch; with neither a task nor parked, it exits. A
// nil ch never parks.
func (s *Scheduler) nextOrPark(now time.Time, ch chan Task, c *ServiceTime) (t Task, parked bool) {
	var w work
	s.mu.Lock()
	t, parked = s.nextLocked(now, ch, c, &w)
	s.mu.Unlock()
	if w.busy() {
		w.do(s)
	}
	return t, parked
}

// nextLocked is nextOrPark under s.mu, leaving what follows to w.
// REQUIRES s.mu is held.
func (s *Scheduler) nextLocked(now time.Time, ch chan Task, c *ServiceTime, w *work) (Task, bool) {
	s.cpuCheck(now)
	if c != nil && c.lane.n > 0 && !s.closed {
		s.release(c, now, true, w)
	}
	if s.q.n > 0 && s.running <= s.limit {
		if e, ok := s.q.pop(now, s.poolSlots(), &w.drops); ok {
			s.recordWait(now.Sub(e.enq))
			if s.elastic && s.q.n > 0 {
				s.spill(now, w) // more were let in than this worker takes
				s.arm(now)
			}
			return e.t, false
		}
	}
	// The queue is empty, or the elastic limit fell below the tasks
	// running: the slot goes.
	s.running--
	if s.q.n == 0 {
		s.q.lastEmpty = now
	}
	if ch == nil || s.closed || s.noPark || len(s.idle) >= s.maxParked() {
		return nil, false
	}
	s.idle = append(s.idle, ch)
	return nil, true
}

// maxParked is how many idle workers are kept: maxIdle, and for an
// elastic pool no more than the most tasks that ran at once lately (over
// one to two peakSpans) plus its floor, so that the pool shrinks once a
// burst is over, while a load that comes and goes finds its workers, and
// their grown stacks, parked. REQUIRES s.mu is held.
func (s *Scheduler) maxParked() int {
	if !s.elastic {
		return maxIdle
	}
	return min(maxIdle, max(s.peaks[0], s.peaks[1])+minCPULimit())
}

// peakSpan is how long the most tasks running at once is remembered for,
// for the workers an elastic pool keeps parked.
const peakSpan = time.Second

// arm makes sure the sweep timer fires by the time the first queued task
// at the front of a level, of the pool or of a lane, expires, so expired
// tasks are answered even while every worker is busy for a long time.
// REQUIRES s.mu is held.
func (s *Scheduler) arm(now time.Time) {
	due := s.q.due(now)
	if s.q.n > 0 && s.elastic && s.limit < s.opts.MaxInFlight {
		// Queued tasks wait for the pool to grow: at the next step, or
		// at the next reading if the CPU stopped it.
		wake := s.growAt
		if s.hot {
			wake = s.cpuAt
		}
		if wake.Before(now) {
			wake = now
		}
		due = earliest(due, wake)
	}
	for _, c := range s.lanes {
		due = earliest(due, c.lane.due(now))
	}
	if due.IsZero() || !s.timerAt.IsZero() && !s.timerAt.After(due) {
		return
	}
	s.timerAt = due
	s.timer.Reset(max(due.Sub(now), 0) + time.Millisecond/20)
}

// earliest returns the earlier of a and b, a zero time being none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// sweep drops the queued tasks that have waited past the limit, in the
// pool and in the lanes, and starts those the elastic pool has grown room
// for since.
func (s *Scheduler) sweep() {
	var w work
	now := s.now()
	s.mu.Lock()
	s.timerAt = time.Time{}
	w.drops = s.q.expire(now, w.drops)
	lanes := s.lanes[:0]
	for _, c := range s.lanes {
		l := &c.lane
		w.drops = l.expire(now, w.drops)
		l.queued.Store(int64(l.n))
		if l.listed = l.n > 0; l.listed {
			lanes = append(lanes, c)
		}
	}
	clear(s.lanes[len(lanes):])
	s.lanes = lanes
	if !s.closed {
		if s.elastic {
			s.spill(now, &w)
		}
		s.arm(now)
	}
	s.mu.Unlock()
	w.do(s)
}

// drop answers d's task, admitted, without running it.
func (s *Scheduler) drop(d dropped) {
	if d.pooled {
		s.ended(d.t, 0, false, time.Time{})
		if c := d.t.Cost(); c != nil && c.lane.queued.Load() > 0 {
			s.refill(c) // its end made room under c's limit
		}
	} else {
		flowOf(d.t).end()
		if d.r == Evicted || d.r == Expired {
			d.r = Limited // its method's lane could not start it in time
		}
	}
	s.answer(d.t, d.r, d.waited)
}

// refill lets the calls waiting in c's lane into the pool, as far as its
// limit has room.
func (s *Scheduler) refill(c *ServiceTime) {
	var w work
	s.mu.Lock()
	if !s.closed {
		s.release(c, s.now(), false, &w)
	}
	s.mu.Unlock()
	w.do(s)
}

// reject answers t without running it, before it was admitted: its
// answer comes at once.
func (s *Scheduler) reject(t Task, r Reason) { s.answer(t, r, 0) }

func (s *Scheduler) answer(t Task, r Reason, waited time.Duration) {
	s.dropped[r].Add(1)
	s.recordDropWait(waited)
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

// Close stops the scheduler: queued tasks, in the pool and in the lanes,
// are dropped as Refused, new ones are refused, parked workers exit and
// busy ones exit after their task. Close does not wait for running tasks;
// Wait does.
func (s *Scheduler) Close() {
	s.mu.Lock()
	s.closed = true
	now := s.now()
	drops := s.q.drain(now, Refused, nil)
	for _, c := range s.lanes {
		drops = c.lane.drain(now, Refused, drops)
		c.lane.queued.Store(0)
		c.lane.listed = false
	}
	s.lanes = nil
	s.timer.Stop()
	s.timerAt = time.Time{}
	s.mu.Unlock()
	for _, d := range drops {
		s.drop(d)
	}
	s.ReleaseIdle()
}

// Wait blocks until every worker goroutine has exited. Call it after
// Close, once no task can be running, or it blocks until they end.
func (s *Scheduler) Wait() { s.wg.Wait() }

func clamp(p int) int { return min(max(p, 0), Levels-1) }

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
	opts    Options
	now     func() time.Time  // time.Now; tests swap it
	readCPU func() cpuReading // runtimeCPU(); tests swap it
	elastic bool              // Options.Workers was left zero
	flows   flows
	cpuWait atomic.Int64 // the last reading's CPU wait, for the method limits

	// Pause detection, for the method limits: the last arrival or end,
	// and until when runs are to be ignored (unix nanoseconds).
	lastSeen, pausedUntil atomic.Int64

	mu         sync.Mutex
	q          [Levels]deque
	n          int       // queued tasks
	running    int       // tasks running
	limit      int       // how many may run: Workers, or the elastic limit
	cpuAt      time.Time // the next CPU reading, elastic only
	cpu        cpuReading
	hot        bool      // the CPU is congested by the tasks: the pool stops growing
	congested  bool      // the last reading found the CPU congested
	growAt     time.Time // when growBudget is renewed
	growBudget int       // how much the elastic limit may still grow until growAt
	lastEmpty  time.Time // the last time the queue was empty
	lastShort  time.Time // the last time it was no longer than the overload queue
	overload   bool      // in overload mode: short wait limit, short queue
	winStart   time.Time // start of the current measuring window
	arrivals   int       // tasks submitted in the window
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
	s.lastEmpty = s.now()
	s.lastShort = s.lastEmpty
	s.winStart = s.lastEmpty
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
	s.seen(now)
	if r, ok := s.hopeless(t, now); ok {
		s.reject(t, r)
		return
	}
	p := clamp(t.Priority())
	f := flowOf(t)
	if s.atLimit(t, p, f) {
		s.reject(t, Limited)
		return
	}
	s.admit(t, p, f)

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.drop(t, Refused, 0)
		return
	}
	s.arrivals++
	if s.takeSlot(now) {
		ch := s.takeWorker()
		s.mu.Unlock()
		s.recordWait(0)
		s.hand(t, ch)
		return
	}
	var victim *entry
	e := entry{t: t, enq: now, expires: now.Add(s.opts.MaxWait)}
	if s.overloaded(now) {
		// Admit a call only if the calls that will start before it (those
		// of its priority or higher) fit its priority's share of the short
		// queue: a call that would wait too long is refused now, while a
		// refusal is quick, not after it waited.
		if share, ahead := s.share(p), s.ahead(p); ahead >= share && !s.flows.spare(f, share, ahead) {
			s.mu.Unlock()
			s.drop(t, Refused, 0)
			return
		}
		if p < Levels-1 {
			// Less important calls should start sooner: they are the
			// ones pushed back by later arrivals, and the sooner one
			// that will not start is answered, the better for its
			// caller. It may be refused only for a short while (the
			// refusal window, a quarter of the limit); one still
			// queued after that is kept and runs, so that a refusal
			// never comes late. The most important calls are bounded
			// by their share alone: none is shed for a wait the CPU,
			// not the queue, made longer.
			limit := s.overloadLimit()
			e.limit = now.Add(limit * time.Duration(p+1) / Levels)
			e.commit = now.Add(limit / 4)
		}
	}
	if s.n >= s.opts.QueueSize {
		victim = s.evictBelow(p)
		if victim == nil && !s.flows.overShare(f, s.opts.QueueSize) {
			victim = s.evictOverShare(p, f)
		}
		if victim == nil {
			s.mu.Unlock()
			s.drop(t, Refused, 0)
			return
		}
	}
	s.q[p].pushBack(e)
	s.n++
	var pushed []dropped
	if s.overload {
		pushed = s.pushOut(p, now)
	}
	var spilled []handoff
	if s.elastic {
		spilled, pushed = s.spill(now, pushed)
	}
	s.arm(now)
	s.mu.Unlock()
	if victim != nil {
		s.drop(victim.t, Evicted, now.Sub(victim.enq))
	}
	for _, d := range pushed {
		s.drop(d.t, d.r, d.waited)
	}
	for _, h := range spilled {
		s.hand(h.t, h.ch)
	}
}

// handoff is a task and the worker it goes to (nil: a new one).
type handoff struct {
	t  Task
	ch chan Task
}

// spill starts queued tasks on new workers while the elastic limit grows
// for them: the queue formed because workers block, not because the CPU
// is busy. It returns the tasks to hand to new workers, and drops adds
// what it found expired on the way. REQUIRES s.mu is held.
func (s *Scheduler) spill(now time.Time, drops []dropped) ([]handoff, []dropped) {
	var out []handoff
	for s.n > 0 && (s.running < s.limit || s.grow(now)) {
		s.running++
		t := s.pop(now, &drops)
		if t == nil {
			s.running--
			break
		}
		out = append(out, handoff{t, s.takeWorker()})
	}
	return out, drops
}

// atLimit reports whether t, of priority p and flow f, meets its method's
// adaptive limit and is to be refused at once: its method has as many
// calls in flight as its limit allows priority p, and f holds its share
// of the limit or more.
func (s *Scheduler) atLimit(t Task, p int, f *Flow) bool {
	c := t.Cost()
	if c == nil || !s.elastic || s.opts.Disabled {
		return false // a fixed pool keeps its behaviour from before method limits
	}
	ok, n, ahead := c.lim.admits(p)
	if ok || s.flows.spare(f, int(n), int(ahead)) {
		return false
	}
	c.lim.refused.Add(1)
	c.lim.limited.Add(1)
	return true
}

// admit counts t, of priority p, in flight, for its method's limit and
// its flow's share.
func (s *Scheduler) admit(t Task, p int, f *Flow) {
	if c := t.Cost(); c != nil {
		c.lim.inflight.Add(1)
		c.lim.atLevel[p].Add(1)
	}
	s.flows.admit(f)
}

// ended counts t out of flight: it ran for d and ended at end, or (ran
// false) was dropped.
func (s *Scheduler) ended(t Task, d time.Duration, ran bool, end time.Time) {
	if c := t.Cost(); c != nil {
		if ran {
			s.seen(end)
			// A run that started before a pause ended took the pause's
			// length too: it says nothing of the method's dependency.
			ran = end.Add(-d).UnixNano() >= s.pausedUntil.Load()
		}
		c.lim.end(clamp(t.Priority()), d, ran, end, time.Duration(s.cpuWait.Load()))
	}
	s.flows.end(flowOf(t))
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
	if _, ok := s.hopeless(t, now); ok {
		return false // Submit drops it, with the reason
	}
	f := flowOf(t)
	if c := t.Cost(); c != nil && c.lim.limit.Load() != 0 {
		return false // Submit applies the method's limit
	}
	s.mu.Lock()
	if s.closed || !s.takeSlot(now) {
		s.mu.Unlock()
		return false
	}
	s.arrivals++
	s.mu.Unlock()
	s.admit(t, clamp(t.Priority()), f)
	s.recordWait(0)
	end := s.run(t, now)
	if next := s.next(end); next != nil {
		s.start(next) // the slot passes to a worker
	}
	return true
}

// takeSlot takes a worker's slot for a task arriving at now, if the task
// would start at once: nothing is queued and a slot is free. Callers hold
// s.mu.
func (s *Scheduler) takeSlot(now time.Time) bool {
	if s.n != 0 || s.running >= s.limit && !s.grow(now) {
		return false
	}
	s.running++
	s.lastEmpty = now
	return true
}

// pushOut evicts, under overload, the calls that a new call of priority p
// pushed past their own priority's share: they would not start in time,
// so they are answered now, while their wait is short. The newest of each
// level goes first. Calls past their refusal window, and those admitted
// before overload mode began, keep their place: they have waited long
// already, and answering them now would only make a late refusal. Callers
// hold s.mu.
func (s *Scheduler) pushOut(p int, now time.Time) []dropped {
	var out []dropped
	for level := p - 1; level >= 0; level-- {
		for s.q[level].len() > 0 && s.q[level].back().refusable(now) && s.ahead(level) > s.share(level) {
			e := s.q[level].popBack()
			out = append(out, dropped{e.t, Evicted, now.Sub(e.enq)})
			s.n--
		}
	}
	return out
}

// hopeless reports whether t should be dropped before it runs: its caller
// left, its deadline passed, or it is closer than the task's usual run
// time (while its method's limit is on, at most the floor with
// tolerance: the limit keeps the queue before the dependency short, so a
// call admitted now runs about that long, whatever the calls before it
// took), while that estimate is fresh: once no call of its kind has ended
// for as long as the estimate, calls run again, so that one spell of long
// runs cannot leave every later call judged hopeless and the estimate
// never updated.
func (s *Scheduler) hopeless(t Task, now time.Time) (Reason, bool) {
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

// overloaded updates and reports the overload mode. The scheduler enters
// it when the queue has not been empty for Interval, as CoDel does, and
// leaves it after an Interval in which fewer calls arrived than the
// workers could have started: a short queue that empties now and then
// under overload does not flip it back to long waits. Callers hold s.mu.
func (s *Scheduler) overloaded(now time.Time) bool {
	if elapsed := now.Sub(s.winStart); elapsed >= s.opts.Interval {
		if s.overload {
			avg := s.all.Estimate()
			could := float64(s.limit) * float64(elapsed) / float64(max(avg, time.Microsecond))
			if float64(s.arrivals) < 0.95*could || s.canGrow() {
				s.overload = false
			}
		}
		s.winStart, s.arrivals = now, 0
	}
	if !s.overload && !s.canGrow() {
		if s.n <= s.share(Levels-1) {
			s.lastShort = now
		}
		// CoDel's rule: the queue has not been empty for an Interval. A
		// queue that has stayed longer than the overload queue for a tenth
		// of that is a surge: act on it before it turns into long waits.
		if s.n > 0 && (now.Sub(s.lastEmpty) > s.opts.Interval || now.Sub(s.lastShort) > s.opts.Interval/10) {
			s.overload = true
		}
	}
	return s.overload
}

// overloadLimit is the wait limit under overload: Target, or two gaps
// between task completions if that is longer, so a queued task can still
// be taken by the next worker to finish. Callers hold s.mu.
func (s *Scheduler) overloadLimit() time.Duration {
	gap := s.all.Estimate() / time.Duration(s.limit)
	return max(s.opts.Target, 2*gap)
}

// share is how many calls may be queued ahead of a new call of priority
// p under overload: what the workers start within half the overload wait
// limit, scaled by priority from a fifth of that for priority 0 to twice
// that for priority 9, so important calls are refused last. Callers hold
// s.mu.
func (s *Scheduler) share(p int) int {
	avg := s.all.Estimate()
	if avg <= 0 {
		return s.opts.QueueSize
	}
	c := float64(s.limit) * float64(s.overloadLimit()) / float64(avg) / 2
	n := int(c * float64(p+1) / 5)
	if p == Levels-1 {
		n = max(n, s.limit) // room for a round of the most important calls
	}
	return min(max(n, 1), s.opts.QueueSize)
}

// ahead counts the queued calls that start before a new call of priority
// p: those of priority p or higher. Callers hold s.mu.
func (s *Scheduler) ahead(p int) int {
	n := 0
	for level := p; level < Levels; level++ {
		n += s.q[level].len()
	}
	return n
}

// evictBelow removes and returns the newest task of the lowest priority
// under p, the one that would run last, or nil if every queued task has
// priority p or higher. Callers hold s.mu.
func (s *Scheduler) evictBelow(p int) *entry {
	for level := 0; level < p; level++ {
		if s.q[level].len() > 0 {
			s.n--
			e := s.q[level].popBack()
			return &e
		}
	}
	return nil
}

// evictOverShare removes and returns the newest queued task, of priority p
// or lower, of a flow other than f that holds more than its share of the
// queue, or nil if there is none: a full queue makes room for a flow
// within its share at the expense of one above it. REQUIRES s.mu is held.
func (s *Scheduler) evictOverShare(p int, f *Flow) *entry {
	if f == nil {
		return nil
	}
	for level := 0; level <= p; level++ {
		q := &s.q[level]
		for i := q.len() - 1; i >= 0; i-- {
			if g := flowOf(q.at(i).t); g != f && s.flows.overShare(g, s.opts.QueueSize) {
				s.n--
				e := q.removeAt(i)
				return &e
			}
		}
	}
	return nil
}

// start runs t on a parked worker or a new one.
func (s *Scheduler) start(t Task) {
	s.mu.Lock()
	ch := s.takeWorker()
	s.mu.Unlock()
	s.hand(t, ch)
}

// takeWorker takes the parked worker a task is to go to, or returns nil
// if there is none and hand is to start one. Callers hold s.mu.
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
		if t, parked = s.nextOrPark(end, ch); t != nil {
			continue
		}
		if !parked {
			return
		}
		t = <-ch
	}
}

// run runs t, starting at start, and returns when it ended, for next.
func (s *Scheduler) run(t Task, start time.Time) time.Time {
	var end time.Time
	if tt, ok := t.(TimedTask); ok {
		end = tt.RunTimed(start)
	} else {
		t.Run()
		end = s.now()
	}
	d := end.Sub(start)
	t.Cost().Observe(d)
	s.all.Observe(d)
	s.ran.Add(1)
	s.ended(t, d, true, end)
	return end
}

// next takes the task a worker should run next, at now, dropping on the
// way the ones that waited too long or can no longer finish in time. It
// returns nil, and gives up the worker's slot, when the queue is empty.
func (s *Scheduler) next(now time.Time) Task {
	t, _ := s.nextOrPark(now, nil)
	return t
}

// nextOrPark is next for a worker whose channel is ch: when the queue is
// empty, it also parks the worker, in the same critical section, unless
// workers are to exit (Close, ReleaseIdle) or enough are parked. parked
// reports that the worker is to wait on ch; with neither a task nor
// parked, it exits. With a nil ch, nextOrPark is next.
func (s *Scheduler) nextOrPark(now time.Time, ch chan Task) (t Task, parked bool) {
	var drops []dropped
	defer func() {
		for _, d := range drops {
			s.drop(d.t, d.r, d.waited)
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cpuCheck(now)
	if s.running <= s.limit {
		if t := s.pop(now, &drops); t != nil {
			return t, false
		}
	}
	// The queue is empty, or the elastic limit fell below the tasks
	// running: the slot goes.
	s.running--
	if s.n == 0 {
		s.lastEmpty = now
	}
	if ch == nil || s.closed || s.noPark || len(s.idle) >= s.maxParked() {
		return nil, false
	}
	s.idle = append(s.idle, ch)
	return nil, true
}

// maxParked is how many idle workers are kept: maxIdle, and for an
// elastic pool no more than twice the tasks running plus its floor, so
// that the pool shrinks when a burst is over. REQUIRES s.mu is held.
func (s *Scheduler) maxParked() int {
	if !s.elastic {
		return maxIdle
	}
	return min(maxIdle, 2*s.running+minCPULimit())
}

// pop takes the task to run next, at now, for a worker holding a slot,
// adding to drops the ones that waited too long or can no longer finish
// in time. It returns nil when the queue is empty. REQUIRES s.mu is held.
func (s *Scheduler) pop(now time.Time, drops *[]dropped) Task {
	for {
		level := s.top()
		if level < 0 {
			return nil
		}
		e := s.q[level].popFront()
		s.n--
		if s.n == 0 {
			s.lastEmpty = now
		}
		wait := now.Sub(e.enq)
		if e.expired(now) {
			*drops = append(*drops, dropped{e.t, Expired, wait})
			continue
		}
		if r, ok := s.hopeless(e.t, now); ok {
			*drops = append(*drops, dropped{e.t, r, wait})
			continue
		}
		s.recordWait(wait)
		if s.overload {
			*drops = s.doomed(now, *drops)
		}
		return e.t
	}
}

// doomed drops, under overload, the queued calls that cannot start by
// their limit: a call starts once the calls ahead of it and itself have
// each had a worker's completion, one every average run time divided by
// the workers. Answering them now, rather than at their limit, makes the
// refusal as quick as the prediction allows. Only calls in their refusal
// window are judged; within a level they follow those past it, and the
// oldest of them is judged first. Callers hold s.mu.
func (s *Scheduler) doomed(now time.Time, drops []dropped) []dropped {
	gap := s.all.Estimate() / time.Duration(s.limit)
	if gap <= 0 {
		return drops
	}
	ahead := 0
	for level := Levels - 1; level >= 0; level-- {
		q := &s.q[level]
		i := 0
		for i < q.len() && !q.at(i).refusable(now) {
			i++
		}
		for i < q.len() {
			e := q.at(i)
			if !e.refusable(now) || !now.Add(time.Duration(ahead+i+1)*gap).After(e.limit) {
				break
			}
			d := q.removeAt(i)
			s.n--
			drops = append(drops, dropped{d.t, Expired, now.Sub(d.enq)})
		}
		ahead += q.len()
	}
	if s.n == 0 {
		s.lastEmpty = now
	}
	return drops
}

type dropped struct {
	t      Task
	r      Reason
	waited time.Duration
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

// arm makes sure the sweep timer fires by the time the first queued task
// at the front of its level expires, so expired tasks are answered even while every worker is
// busy for a long time. Callers hold s.mu.
func (s *Scheduler) arm(now time.Time) {
	if s.n == 0 {
		return
	}
	var due time.Time
	for level := range s.q {
		if s.q[level].len() > 0 {
			if e := s.q[level].front().due(now); due.IsZero() || e.Before(due) {
				due = e
			}
		}
	}
	if s.elastic && s.limit < s.opts.MaxInFlight {
		// Queued tasks wait for the pool to grow: at the next step, or
		// at the next reading if the CPU stopped it.
		wake := s.growAt
		if s.hot {
			wake = s.cpuAt
		}
		if wake.Before(now) {
			wake = now
		}
		if wake.Before(due) {
			due = wake
		}
	}
	if !s.timerAt.IsZero() && !s.timerAt.After(due) {
		return
	}
	s.timerAt = due
	s.timer.Reset(max(due.Sub(now), 0) + time.Millisecond/20)
}

// sweep drops the queued tasks that have waited past the limit, and
// starts those the elastic pool has grown room for since.
func (s *Scheduler) sweep() {
	var drops []dropped
	now := s.now()
	s.mu.Lock()
	s.timerAt = time.Time{}
	for level := range s.q {
		for s.q[level].len() > 0 {
			e := s.q[level].front()
			if !e.expired(now) && !e.t.Canceled() {
				break
			}
			s.q[level].popFront()
			s.n--
			r := Expired
			if e.t.Canceled() {
				r = Canceled
			}
			drops = append(drops, dropped{e.t, r, now.Sub(e.enq)})
		}
	}
	if s.n == 0 {
		s.lastEmpty = now
	}
	var spilled []handoff
	if s.elastic && !s.closed {
		spilled, drops = s.spill(now, drops)
	}
	if !s.closed {
		s.arm(now)
	}
	s.mu.Unlock()
	for _, d := range drops {
		s.drop(d.t, d.r, d.waited)
	}
	for _, h := range spilled {
		s.hand(h.t, h.ch)
	}
}

// drop answers t, admitted, without running it; it waited in the queue
// for waited.
func (s *Scheduler) drop(t Task, r Reason, waited time.Duration) {
	s.ended(t, 0, false, time.Time{})
	s.answer(t, r, waited)
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

// Close stops the scheduler: queued tasks are dropped as Refused, new
// ones are refused, parked workers exit and busy ones exit after their
// task. Close does not wait for running tasks; Wait does.
func (s *Scheduler) Close() {
	s.mu.Lock()
	s.closed = true
	var drops []dropped
	for level := range s.q {
		for s.q[level].len() > 0 {
			e := s.q[level].popFront()
			drops = append(drops, dropped{e.t, Refused, time.Since(e.enq)})
		}
	}
	s.n = 0
	s.timer.Stop()
	s.timerAt = time.Time{}
	s.mu.Unlock()
	for _, d := range drops {
		s.drop(d.t, d.r, d.waited)
	}
	s.ReleaseIdle()
}

// Wait blocks until every worker goroutine has exited. Call it after
// Close, once no task can be running, or it blocks until they end.
func (s *Scheduler) Wait() { s.wg.Wait() }

func clamp(p int) int { return min(max(p, 0), Levels-1) }

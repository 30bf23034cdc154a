package shed

import (
	"math"
	"time"
)

// queue is ten priority levels of calls waiting for slots, with the rules
// that keep their wait short (see the package documentation). The
// Scheduler has one before its workers, and each method whose limit is on
// has one before its dependency (its lane). A queue is guarded by its
// Scheduler's mu.
type queue struct {
	lv        [Levels]deque
	n         int             // queued entries
	lastEmpty time.Time       // the last time the queue was empty
	lastShort time.Time       // the last time it was no longer than the overload queue
	overload  bool            // in overload mode: short wait limit, short queue
	winStart  time.Time       // start of the current measuring window
	arrivals  int             // calls that arrived in the window
	byLevel   [Levels]int     // the same by priority
	rates     [Levels]float64 // calls arriving per second by priority, a moving average over Intervals
	load      float64         // calls arriving over calls the slots start, a moving average over Intervals
	pooled    bool            // the pool's queue: its calls count in their methods' calls in the pool
	fl        flows           // the flows it admits, for fairness
}

// slots is what a queue feeds: how many calls run at once, how many run
// beyond that (a limit lowered below the calls running), the expected
// time between two of them starting (0 until known), and how the queue
// enters overload mode: not while the number may still grow (canGrow: the
// queue then waits for it to grow, which is no sign of overload) or is
// lowered for a while (hold: a probe); with sustained, only while more
// calls arrive than the slots start, over a second or so.
type slots struct {
	limit     int
	backlog   int // calls running beyond limit, to end before any queued call starts
	gap       time.Duration
	stall     time.Duration // how long since one of them last ended; 0 if unknown
	canGrow   bool
	hold      bool
	sustained bool
}

// overloadLoad is the load (calls arriving over calls the slots start,
// averaged over about four Intervals) past which a queue that enters
// overload mode only under a sustained load does: enough above 1 that a
// load right at capacity, whose queue comes and goes, does not.
const overloadLoad = 1.1

// arrive counts a call of priority p arriving at the queue's slots,
// queued or not.
func (q *queue) arrive(p int) {
	q.arrivals++
	q.byLevel[p]++
}

// capacity is how many calls the slots start per second; +Inf if
// unknown.
func (sl slots) capacity() float64 {
	if sl.gap <= 0 {
		return math.Inf(1)
	}
	return float64(time.Second) / float64(sl.gap)
}

func (q *queue) init(now time.Time) {
	q.lastEmpty, q.lastShort, q.winStart, q.load = now, now, now, 1
}

// add queues e, of priority p and flow f, at now, or reports that it is
// refused. It applies the admission rules: in overload mode, the share of
// the short queue; otherwise, a start predicted within MaxWait; and a
// full queue's evictions. Where a rule would refuse a call, a flow
// lighter than the heaviest takes the place of the heaviest's newest
// queued call (longest-queue drop), so a flooder gets what the others
// leave. It appends to drops the calls it pushed out.
func (q *queue) add(e entry, p int, f *Flow, now time.Time, sl slots, o *Options, drops []dropped) ([]dropped, bool) {
	over := q.overloaded(now, sl, o)
	var full bool
	if over {
		// Admit a call only if the calls that will start before it (those
		// of its priority or higher) fit its priority's share of the short
		// queue: a call that would wait too long is refused now, while a
		// refusal is quick, not after it waited.
		// The calls running beyond the limit (a backlog to drain) are
		// not charged to the share: a call is admitted if, once they
		// ended, it can still start by its deadline.
		full = q.ahead(p) >= q.share(p, sl, o) ||
			sl.gap > 0 && now.Add(time.Duration(sl.backlog+q.ahead(p)+1)*sl.gap).After(e.expires)
	} else if !sl.canGrow && sl.gap > 0 {
		// A call predicted to start past the wait limit would only wait
		// to be refused: refuse it now.
		full = q.wait(p, sl, now) > o.MaxWait
	}
	light := q.fl.light(f, sl.capacity(), now) // a flow within its share of the slots
	if full {
		if v := q.evictHeavier(p, f, now); v != nil {
			drops = append(drops, dropped{t: v.t, r: Evicted, waited: now.Sub(v.enq), pooled: q.pooled})
		} else if !light {
			return drops, false
		}
	}
	if over && p < Levels-1 && !light {
		// Less important calls should start sooner: they are the ones
		// pushed back by later arrivals, and the sooner one that will not
		// start is answered, the better for its caller. It may be refused
		// only for a short while (the refusal window, a quarter of the
		// limit); one still queued after that is kept and runs, so that a
		// refusal never comes late. The most important calls are bounded
		// by their share alone: none is shed for a wait the CPU, not the
		// queue, made longer; nor is a call of a flow within its share.
		limit := q.overloadLimit(sl, o)
		e.limit = now.Add(limit * time.Duration(p+1) / Levels)
		e.commit = now.Add(limit / 4)
	}
	if q.n >= o.QueueSize {
		v := q.evictBelow(p)
		if v == nil {
			v = q.evictHeavier(p, f, now)
		}
		if v == nil {
			return drops, false
		}
		drops = append(drops, dropped{t: v.t, r: Evicted, waited: now.Sub(v.enq), pooled: q.pooled})
	}
	q.push(p, e)
	q.fl.admitted(f, now)
	if over {
		drops = q.pushOut(p, now, sl, o, drops)
	}
	return drops, true
}

func (q *queue) push(p int, e entry) {
	q.lv[p].pushBack(e)
	q.n++
}

// overloaded updates and reports the overload mode. The queue enters it
// when it has not been empty for Interval, as CoDel does, and leaves it
// after an Interval in which fewer calls arrived than the slots could
// have started: a short queue that empties now and then under overload
// does not flip it back to long waits. A queue that needs a sustained
// load enters it only while its load is past overloadLoad: at a load
// right at capacity its queue comes and goes, and the wait limit, not
// overload mode, bounds it.
func (q *queue) overloaded(now time.Time, sl slots, o *Options) bool {
	if elapsed := now.Sub(q.winStart); elapsed >= o.Interval {
		could := float64(elapsed) / float64(max(sl.gap, time.Nanosecond))
		if sl.gap > 0 {
			q.load += (float64(q.arrivals)/could - q.load) / 4
		}
		for level, n := range q.byLevel {
			q.rates[level] += (float64(n)/elapsed.Seconds() - q.rates[level]) / 4
		}
		q.byLevel = [Levels]int{}
		if q.overload {
			if float64(q.arrivals) < 0.95*could || sl.canGrow || sl.hold {
				q.overload = false
			}
		}
		q.winStart, q.arrivals = now, 0
	}
	if !q.overload && !sl.canGrow && !sl.hold && (!sl.sustained || q.load > overloadLoad) {
		if q.n <= q.share(Levels-1, sl, o) {
			q.lastShort = now
		}
		// CoDel's rule: the queue has not been empty for an Interval. A
		// queue that has stayed longer than the overload queue for a tenth
		// of that is a surge: act on it before it turns into long waits.
		if q.n > 0 && (now.Sub(q.lastEmpty) > o.Interval || now.Sub(q.lastShort) > o.Interval/10) {
			q.overload = true
		}
	}
	return q.overload
}

// overloadLimit is the wait limit under overload: Target, or two gaps
// between call starts if that is longer, so a queued call can still be
// taken by the next slot to free.
func (q *queue) overloadLimit(sl slots, o *Options) time.Duration {
	return max(o.Target, 2*sl.gap)
}

// share is how many calls may be queued ahead of a new call of priority
// p under overload: what the slots start within half the overload wait
// limit, scaled by priority from a fifth of that for priority 0 to twice
// that for priority 9, so important calls are refused last.
func (q *queue) share(p int, sl slots, o *Options) int {
	if sl.gap <= 0 {
		return o.QueueSize
	}
	c := float64(q.overloadLimit(sl, o)) / float64(sl.gap) / 2
	n := int(c * float64(p+1) / 5)
	if p == Levels-1 {
		n = max(n, sl.limit) // room for a round of the most important calls
	}
	return min(max(n, 1), o.QueueSize)
}

// wait predicts how long a new call of priority p would wait to start at
// now: the calls running beyond the limit end, and the calls queued ahead
// of it start, one every gap, but only in the share of the slots that the
// more important calls arriving meanwhile leave it (as in a priority
// queue's waiting time). With no share left, it would never start. While
// no call has ended for longer than the slots' gap times their number,
// calls end no faster than that: the gap is at least the time since the
// last end over the slots. And it waits no less than the oldest call
// ahead of it has waited so far, its head-of-line sojourn. (The time
// since the last end counts only while calls waited: a method idle for a
// while has a stale last end, not a stalled dependency.)
func (q *queue) wait(p int, sl slots, now time.Time) time.Duration {
	above := 0.0
	for level := p + 1; level < Levels; level++ {
		above += q.rates[level]
	}
	// How long the queue has made no progress: no end while its oldest
	// call waited.
	var oldest, hol time.Duration
	for level := range q.lv {
		if q.lv[level].len() > 0 {
			age := now.Sub(q.lv[level].front().enq)
			oldest = max(oldest, age)
			if level >= p {
				hol = max(hol, age)
			}
		}
	}
	gap := max(sl.gap, min(sl.stall, oldest)/time.Duration(max(sl.limit, 1)))
	left := 1 - above*gap.Seconds()
	if left <= 0 {
		return time.Duration(math.MaxInt64)
	}
	return max(hol, time.Duration(float64(time.Duration(q.ahead(p)+sl.backlog+1)*gap)/left))
}

// ahead counts the queued calls that start before a new call of priority
// p: those of priority p or higher.
func (q *queue) ahead(p int) int {
	n := 0
	for level := p; level < Levels; level++ {
		n += q.lv[level].len()
	}
	return n
}

// top returns the highest non-empty priority level, or -1.
func (q *queue) top() int {
	for level := Levels - 1; level >= 0; level-- {
		if q.lv[level].len() > 0 {
			return level
		}
	}
	return -1
}

// evictBelow removes and returns the newest call of the lowest priority
// under p, the one that would run last, or nil if every queued call has
// priority p or higher.
func (q *queue) evictBelow(p int) *entry {
	for level := 0; level < p; level++ {
		if q.lv[level].len() > 0 {
			q.n--
			e := q.lv[level].popBack()
			return &e
		}
	}
	return nil
}

// evictScan bounds how many entries of a level evictHeavier looks at,
// newest first, so that a refusal stays cheap in a long queue.
const evictScan = 64

// evictHeavier removes and returns the newest queued call, of priority p
// or lower, of the heaviest flow, if f is admitted at less than half its
// rate at now; nil otherwise.
func (q *queue) evictHeavier(p int, f *Flow, now time.Time) *entry {
	h := q.fl.heavier(f, now)
	if h == nil {
		return nil
	}
	for level := 0; level <= p; level++ {
		d := &q.lv[level]
		for i := d.len() - 1; i >= max(0, d.len()-evictScan); i-- {
			if flowOf(d.at(i).t) == h {
				q.n--
				e := d.removeAt(i)
				return &e
			}
		}
	}
	return nil
}

// pushOut evicts, under overload, the calls that a new call of priority p
// pushed past their own priority's share: they would not start in time,
// so they are answered now, while their wait is short. The newest of each
// level goes first. Calls past their refusal window, and those admitted
// before overload mode began, keep their place: they have waited long
// already, and answering them now would only make a late refusal.
func (q *queue) pushOut(p int, now time.Time, sl slots, o *Options, out []dropped) []dropped {
	for level := p - 1; level >= 0; level-- {
		for q.lv[level].len() > 0 && q.lv[level].back().refusable(now) && q.ahead(level) > q.share(level, sl, o) {
			e := q.lv[level].popBack()
			out = append(out, dropped{t: e.t, r: Evicted, waited: now.Sub(e.enq), pooled: q.pooled})
			q.n--
		}
	}
	return out
}

// pop takes the call to start next, at now, adding to drops the ones
// that waited too long or can no longer finish in time. It reports false
// when the queue is empty.
func (q *queue) pop(now time.Time, sl slots, drops *[]dropped) (entry, bool) {
	for q.n > 0 {
		level := q.top()
		if level < 0 {
			return entry{}, false
		}
		e := q.lv[level].popFront()
		q.n--
		if q.n == 0 {
			q.lastEmpty = now
		}
		wait := now.Sub(e.enq)
		if e.expired(now) {
			*drops = append(*drops, dropped{t: e.t, r: e.reason(now), waited: wait, pooled: q.pooled})
			continue
		}
		if r, ok := hopeless(e.t, now); ok {
			*drops = append(*drops, dropped{t: e.t, r: r, waited: wait, pooled: q.pooled})
			continue
		}
		if q.overload {
			*drops = q.doomed(now, sl, *drops)
		}
		return e, true
	}
	return entry{}, false
}

// doomed drops, under overload, the queued calls that cannot start by
// their limit: a call starts once the calls ahead of it and itself have
// each had a slot, one every gap. Answering them now, rather than at
// their limit, makes the refusal as quick as the prediction allows. Only
// calls in their refusal window are judged; within a level they follow
// those past it, and the oldest of them is judged first.
func (q *queue) doomed(now time.Time, sl slots, drops []dropped) []dropped {
	gap := sl.gap
	if gap <= 0 {
		return drops
	}
	ahead := sl.backlog
	for level := Levels - 1; level >= 0; level-- {
		d := &q.lv[level]
		i := 0
		for i < d.len() && !d.at(i).refusable(now) {
			i++
		}
		for i < d.len() {
			e := d.at(i)
			if !e.refusable(now) || !now.Add(time.Duration(ahead+i+1)*gap).After(e.limit) {
				break
			}
			v := d.removeAt(i)
			q.n--
			drops = append(drops, dropped{t: v.t, r: Expired, waited: now.Sub(v.enq), pooled: q.pooled})
		}
		ahead += d.len()
	}
	if q.n == 0 {
		q.lastEmpty = now
	}
	return drops
}

// expire removes the queued calls that waited past their limit or whose
// caller left, adding them to drops. Limits differ (a deadline, MaxWait),
// so it looks at every call, not only each level's oldest.
func (q *queue) expire(now time.Time, drops []dropped) []dropped {
	for level := range q.lv {
		d := &q.lv[level]
		kept := 0
		for i := range d.len() {
			e := *d.at(i)
			canceled := e.t.Canceled()
			if !canceled && !e.expired(now) {
				*d.at(kept) = e
				kept++
				continue
			}
			r := e.reason(now)
			if canceled {
				r = Canceled
			}
			drops = append(drops, dropped{t: e.t, r: r, waited: now.Sub(e.enq), pooled: q.pooled})
		}
		for d.len() > kept {
			d.popBack()
			q.n--
		}
	}
	if q.n == 0 {
		q.lastEmpty = now
	}
	return drops
}

// drain removes every queued call, adding them to drops as r.
func (q *queue) drain(now time.Time, r Reason, drops []dropped) []dropped {
	for level := range q.lv {
		for q.lv[level].len() > 0 {
			e := q.lv[level].popFront()
			drops = append(drops, dropped{t: e.t, r: r, waited: now.Sub(e.enq), pooled: q.pooled})
		}
	}
	q.n = 0
	return drops
}

// due returns when the queue should next be swept for expired calls:
// when the oldest call of a level next becomes expired, and no later
// than sweepEvery from now while calls are queued (a call behind the
// oldest may expire first: limits differ). Zero if the queue is empty.
func (q *queue) due(now time.Time) time.Time {
	if q.n == 0 {
		return time.Time{}
	}
	due := now.Add(sweepEvery)
	for level := range q.lv {
		if q.lv[level].len() > 0 {
			if e := q.lv[level].front().due(now); e.Before(due) {
				due = e
			}
		}
	}
	return due
}

// sweepEvery bounds how late a queued call is answered past its limit,
// when an older call of its level has a later one.
const sweepEvery = 20 * time.Millisecond

// dropped is a call to answer without running, why, and how long it
// waited; pooled if it was counted in its method's calls in the pool.
type dropped struct {
	t      Task
	r      Reason
	waited time.Duration
	pooled bool
}

// entry is a queued task, when it was queued, and when it expires: its
// caller's deadline, or for a call without one the wait limit in force
// when it was queued, kept even if the limit changes, so a call admitted
// to a long queue is not rejected late for it.
//
// A call of priority below 9 admitted in overload mode also has a refusal
// window: until commit it may be answered early, pushed out by a more
// important call or dropped once it can no longer start by limit; from
// commit on it is kept and runs, unless it reaches expires. A refusal is
// then always quick, never the end of a long wait. Other calls have zero
// limit and commit.
type entry struct {
	t       Task
	enq     time.Time
	expires time.Time
	limit   time.Time // when it should have started
	commit  time.Time // the end of its refusal window
}

// refusable reports whether e may still be answered early at now: its
// refusal window is open.
func (e entry) refusable(now time.Time) bool { return now.Before(e.commit) }

// expired reports whether e is to be dropped for its wait at now: past its
// wait limit, or refusable and past the time it should have started.
func (e entry) expired(now time.Time) bool {
	return now.After(e.expires) || e.refusable(now) && now.After(e.limit)
}

// reason is why e, expired at now, is dropped: Deadline if its caller's
// deadline passed, Expired otherwise.
func (e entry) reason(now time.Time) Reason {
	if d, ok := e.t.Deadline(); ok && !now.Before(d) {
		return Deadline
	}
	return Expired
}

// due returns when, after now, e next becomes expired.
func (e entry) due(now time.Time) time.Time {
	if e.refusable(now) && !now.After(e.limit) && e.limit.Before(e.commit) {
		return e.limit
	}
	return e.expires
}

// deque is a ring buffer of entries, oldest at the front.
type deque struct {
	buf  []entry
	head int
	n    int
}

func (d *deque) len() int { return d.n }

func (d *deque) pushBack(e entry) {
	if d.n == len(d.buf) {
		grown := make([]entry, max(8, 2*len(d.buf)))
		for i := range d.n {
			grown[i] = d.buf[(d.head+i)%len(d.buf)]
		}
		d.buf, d.head = grown, 0
	}
	d.buf[(d.head+d.n)%len(d.buf)] = e
	d.n++
}

func (d *deque) front() entry { return d.buf[d.head] }

// at returns the i-th entry from the front.
func (d *deque) at(i int) *entry { return &d.buf[(d.head+i)%len(d.buf)] }

// removeAt removes and returns the i-th entry from the front.
func (d *deque) removeAt(i int) entry {
	e := *d.at(i)
	for j := i; j < d.n-1; j++ {
		*d.at(j) = *d.at(j + 1)
	}
	*d.at(d.n - 1) = entry{}
	d.n--
	return e
}

func (d *deque) back() entry { return d.buf[(d.head+d.n-1)%len(d.buf)] }

func (d *deque) popFront() entry {
	e := d.buf[d.head]
	d.buf[d.head] = entry{}
	d.head = (d.head + 1) % len(d.buf)
	d.n--
	return e
}

func (d *deque) popBack() entry {
	i := (d.head + d.n - 1) % len(d.buf)
	e := d.buf[i]
	d.buf[i] = entry{}
	d.n--
	return e
}

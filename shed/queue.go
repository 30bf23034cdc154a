package shed

import "time"

// entry is a queued task, when it was queued, and when it expires: the
// wait limit in force when it was queued, kept even if the limit changes,
// so a call admitted to a long queue is not rejected late for it.
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

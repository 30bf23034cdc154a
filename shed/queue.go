package shed

import "time"

// entry is a queued task, when it was queued, and when it expires: the
// wait limit in force when it was queued, kept even if the limit changes,
// so a call admitted to a long queue is not rejected late for it.
type entry struct {
	t       Task
	enq     time.Time
	expires time.Time
	short   bool // admitted in overload mode, to the short queue
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

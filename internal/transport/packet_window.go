package transport

import "math/bits"

// answeredWindow is how many call ids above its base a session's
// answered window marks: fixed, so that no id, however far ahead, makes
// the server allocate.
const answeredWindow = 1024

// answered is what a server remembers of a session's calls once it has
// forgotten them, in constant memory, as an anti-replay window does
// (RFC 4303, 3.4.3): the calls below base, and those marked above it,
// were answered, and never run again. The client numbers its calls from
// 1 up, so the marks gather at base, which they move up. A call forgotten
// answeredWindow ids or more above base moves base up to keep it in the
// window: the calls it passes that the server never saw are refused
// unrun, as if answered.
type answered struct {
	base uint64
	bits [answeredWindow / 64]uint64 // bit i: call base+i was answered
}

// has reports whether call id was answered, or is below the window.
func (w *answered) has(id uint64) bool {
	if id < w.base {
		return true
	}
	off := id - w.base
	return off < answeredWindow && w.bits[off/64]&(1<<(off%64)) != 0
}

// any reports whether the window remembers a call: one marked, or
// below a base past the client's first id, 1.
func (w *answered) any() bool {
	return w.base > 1 || w.bits != [answeredWindow / 64]uint64{}
}

// mark remembers that call id was answered, moving the window up if id
// is past it, and base over the calls answered at its start.
func (w *answered) mark(id uint64) {
	if id < w.base {
		return
	}
	if id-w.base >= answeredWindow {
		w.advance(id - answeredWindow + 1)
	}
	off := id - w.base
	w.bits[off/64] |= 1 << (off % 64)
	n := uint64(0)
	for i := 0; i < len(w.bits) && w.bits[i] == ^uint64(0); i++ {
		n += 64
	}
	if n < answeredWindow {
		n += uint64(bits.TrailingZeros64(^w.bits[n/64]))
	}
	w.advance(w.base + n)
}

// advance moves base up to to (if it is below), shifting the marks.
func (w *answered) advance(to uint64) {
	if to <= w.base {
		return
	}
	shift := to - w.base
	w.base = to
	if shift >= answeredWindow {
		w.bits = [answeredWindow / 64]uint64{}
		return
	}
	words, b := int(shift/64), shift%64
	for i := range w.bits {
		var v uint64
		if j := i + words; j < len(w.bits) {
			v = w.bits[j] >> b
			if b != 0 && j+1 < len(w.bits) {
				v |= w.bits[j+1] << (64 - b)
			}
		}
		w.bits[i] = v
	}
}

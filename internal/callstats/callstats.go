package callstats

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Latency buckets are log-linear, as in HdrHistogram: latSub buckets of
// latUnit below latBase, then latSub equal buckets for each doubling from
// latBase to latBase<<latOctaves (about 42s), and one for the rest. A
// bucket is at most 1/latSub (12.5%) of its lower bound wide, and a
// percentile is interpolated within its bucket. The doublings of latBase
// are the bounds of the Prometheus histograms (see Histogram).
const (
	latSubBits = 3
	latSub     = 1 << latSubBits // buckets per doubling
	latBase    = 10 * time.Microsecond
	latUnit    = latBase / latSub // 1.25µs, the width of the first buckets
	latOctaves = 22
	latBuckets = latSub + latOctaves*latSub + 1 // 185
)

// The rolling window: calls and errors by the second, latencies by five
// seconds, for a smaller footprint (a method's Stats is about 12 KiB).
// The percentiles thus cover the last 55 to 60 seconds.
const (
	windowLen  = 60 // seconds: the last minute
	latSlotLen = 5  // seconds a latency slot counts
	latSlots   = windowLen / latSlotLen
)

// Stats counts a method's calls: totals since start, and a rolling
// window over the last minute for rates and latency percentiles. Updates
// are a few atomic adds; a slot is reset by the first call of its second
// (or five seconds), so counts are exact over totals and approximate
// within a window.
type Stats struct {
	Totals
	slots    [windowLen]statSlot
	latSlots [latSlots]latSlot
}

// Totals are the counts since start, which metrics export.
type Totals struct {
	Calls, Errors atomic.Int64
	Codes         [NumCodes + 1]atomic.Int64 // calls by code; the last counts codes of NumCodes and up
	Lat           [latBuckets]atomic.Int64   // latencies since start, by bucket
	LatSum        atomic.Int64               // nanoseconds, since start
}

// NumCodes is the number of codes kiev defines: kiev.CodeOK (0) to
// kiev.CodeAnswered. The root pins it to its own table at compile
// time.
const NumCodes = 12

// codeIndex is the slot of code c in Totals.Codes.
func codeIndex(c uint32) int {
	if c < NumCodes {
		return int(c)
	}
	return NumCodes
}

// statSlot counts the calls of one second.
type statSlot struct {
	sec    atomic.Int64 // the Unix second the slot counts
	calls  atomic.Int64
	errors atomic.Int64
}

// latSlot counts the latencies of latSlotLen seconds.
type latSlot struct {
	start atomic.Int64 // the first Unix second the slot counts
	lat   [latBuckets]atomic.Int32
}

// latBucket returns the bucket of latency d >= 0.
func latBucket(d time.Duration) int {
	v := uint64(d / latUnit)
	if v < latSub {
		return int(v)
	}
	shift := bits.Len64(v) - latSubBits - 1 // v>>shift is in [latSub, 2*latSub)
	return min(shift*latSub+int(v>>shift), latBuckets-1)
}

// latLower returns the lower bound of bucket i, and of bucket i-1 the
// upper bound.
func latLower(i int) time.Duration {
	if i < latSub {
		return time.Duration(i) * latUnit
	}
	shift := i/latSub - 1
	return time.Duration((i%latSub+latSub)<<shift) * latUnit
}

// Record counts one call that ended with code (a kiev.Code; 0 is OK)
// after d. A call that never ran (dropped by the scheduler, say) has
// d < 0 and counts in no latency.
func (s *Stats) Record(now time.Time, d time.Duration, code uint32) {
	failed := code != 0
	s.Calls.Add(1)
	if failed {
		s.Errors.Add(1)
	}
	s.Codes[codeIndex(code)].Add(1)
	sec := now.Unix()
	sl := &s.slots[sec%windowLen]
	if old := sl.sec.Load(); old != sec && sl.sec.CompareAndSwap(old, sec) {
		sl.calls.Store(0)
		sl.errors.Store(0)
	}
	sl.calls.Add(1)
	if failed {
		sl.errors.Add(1)
	}
	if d < 0 {
		return
	}
	b := latBucket(d)
	s.Lat[b].Add(1)
	s.LatSum.Add(int64(d))
	start := sec - sec%latSlotLen
	ls := &s.latSlots[start/latSlotLen%latSlots]
	if old := ls.start.Load(); old != start && ls.start.CompareAndSwap(old, start) {
		for i := range ls.lat {
			ls.lat[i].Store(0)
		}
	}
	ls.lat[b].Add(1)
}

// Window is what the last minute of calls looked like, or the time since
// counting started if that is shorter.
type Window struct {
	Calls, Errors int64
	Span          time.Duration // the time the window covers
	Rate, ErrRate float64       // calls and errors per second over Span
	P50, P99      time.Duration
}

// Summary sums the slots of the last minute, the current second included,
// for the calls counted since start. Its rates divide by the time the
// slots cover: the 59 seconds before the current one and the part of the
// current one gone by, or the time since start if that is shorter (at
// least a second), so that a server up for 5 seconds shows its true rate
// and not a twelfth of it.
func (s *Stats) Summary(now, start time.Time) Window {
	var w Window
	cur := now.Unix()
	for i := range s.slots {
		sl := &s.slots[i]
		if sec := sl.sec.Load(); sec <= cur-windowLen || sec > cur {
			continue
		}
		w.Calls += sl.calls.Load()
		w.Errors += sl.errors.Load()
	}
	w.Span = WindowSpan(now, start)
	w.Rate = float64(w.Calls) / w.Span.Seconds()
	w.ErrRate = float64(w.Errors) / w.Span.Seconds()
	var lat [latBuckets]int64
	for i := range s.latSlots {
		ls := &s.latSlots[i]
		if start := ls.start.Load(); start <= cur-windowLen || start > cur {
			continue
		}
		for b := range lat {
			lat[b] += int64(ls.lat[b].Load())
		}
	}
	w.P50, w.P99 = percentile(lat[:], 0.50), percentile(lat[:], 0.99)
	return w
}

// WindowSpan is the time a Summary at now covers, for counts that began
// at start: from the start of the oldest second in the window, or from
// start if later, to now; at least a second.
func WindowSpan(now, start time.Time) time.Duration {
	from := time.Unix(now.Unix()-windowLen+1, 0)
	if start.After(from) {
		from = start
	}
	return max(now.Sub(from), time.Second)
}

// percentile estimates the q-quantile of the bucketed latencies: it finds
// the bucket that holds it and interpolates linearly within the bucket, as
// Prometheus's histogram_quantile does. In the last bucket, which has no
// upper bound, it returns the bucket's lower bound.
func percentile(lat []int64, q float64) time.Duration {
	var n int64
	for _, c := range lat {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank := q * float64(n) // how many calls are faster, in (0, n]
	var below int64
	for i, c := range lat {
		if c == 0 || float64(below+c) < rank {
			below += c
			continue
		}
		lo := latLower(i)
		if i == len(lat)-1 {
			return lo
		}
		width := latLower(i+1) - lo
		return lo + time.Duration(float64(width)*(rank-float64(below))/float64(c))
	}
	return latLower(len(lat) - 1)
}

// Add adds o's counts to s.
func (s *Totals) Add(o *Totals) {
	s.Calls.Add(o.Calls.Load())
	s.Errors.Add(o.Errors.Load())
	for i := range s.Codes {
		s.Codes[i].Add(o.Codes[i].Load())
	}
	for i := range s.Lat {
		s.Lat[i].Add(o.Lat[i].Load())
	}
	s.LatSum.Add(o.LatSum.Load())
}

// Buckets are latency counts by bucket, as Totals.Lat holds them.
type Buckets [latBuckets]int64

// Read copies s's latency counts into b.
func (s *Totals) Read(b *Buckets) {
	for i := range b {
		b[i] = s.Lat[i].Load()
	}
}

// Sub subtracts o's counts from b's: b then counts the calls between the
// reading o and the reading b.
func (b *Buckets) Sub(o *Buckets) {
	for i := range b {
		b[i] -= o[i]
	}
}

// Add adds o's counts to b's.
func (b *Buckets) Add(o *Buckets) {
	for i := range b {
		b[i] += o[i]
	}
}

// Percentile estimates the q-quantile of the latencies b counts, as
// Summary does; 0 if b counts none.
func (b *Buckets) Percentile(q float64) time.Duration { return percentile(b[:], q) }

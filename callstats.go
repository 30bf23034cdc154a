package kiev

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
// are the bounds of the Prometheus histograms (see histogram).
const (
	latSubBits = 3
	latSub     = 1 << latSubBits // buckets per doubling
	latBase    = 10 * time.Microsecond
	latUnit    = latBase / latSub // 1.25µs, the width of the first buckets
	latOctaves = 22
	latBuckets = latSub + latOctaves*latSub + 1 // 185
)

// The rolling window: calls and errors by the second, latencies by five
// seconds, for a smaller footprint (a method's callStats is about 12 KiB).
// The percentiles thus cover the last 55 to 60 seconds.
const (
	windowLen  = 60 // seconds: the last minute
	latSlotLen = 5  // seconds a latency slot counts
	latSlots   = windowLen / latSlotLen
)

// callStats counts a method's calls: totals since start, and a rolling
// window over the last minute for rates and latency percentiles. Updates
// are a few atomic adds; a slot is reset by the first call of its second
// (or five seconds), so counts are exact over totals and approximate
// within a window.
type callStats struct {
	callTotals
	slots    [windowLen]statSlot
	latSlots [latSlots]latSlot
}

// callTotals are the counts since start, which metrics export.
type callTotals struct {
	calls, errors atomic.Int64
	codes         [numCodes + 1]atomic.Int64 // calls by Code; the last counts codes of 100 and up
	lat           [latBuckets]atomic.Int64   // latencies since start, by bucket
	latSum        atomic.Int64               // nanoseconds, since start
}

// codeIndex is the slot of code c in callStats.codes.
func codeIndex(c Code) int {
	if int(c) < numCodes {
		return int(c)
	}
	return numCodes
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

// record counts one call that ended with code after d. A call that never
// ran (dropped by the scheduler, say) has d < 0 and counts in no latency.
func (s *callStats) record(now time.Time, d time.Duration, code Code) {
	failed := code != CodeOK
	s.calls.Add(1)
	if failed {
		s.errors.Add(1)
	}
	s.codes[codeIndex(code)].Add(1)
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
	s.lat[b].Add(1)
	s.latSum.Add(int64(d))
	start := sec - sec%latSlotLen
	ls := &s.latSlots[start/latSlotLen%latSlots]
	if old := ls.start.Load(); old != start && ls.start.CompareAndSwap(old, start) {
		for i := range ls.lat {
			ls.lat[i].Store(0)
		}
	}
	ls.lat[b].Add(1)
}

// windowSummary is what the last minute of calls looked like.
type windowSummary struct {
	Calls, Errors int64
	Rate          float64 // calls per second
	P50, P99      time.Duration
}

// summary sums the slots of the last minute, the current second included.
func (s *callStats) summary(now time.Time) windowSummary {
	var w windowSummary
	cur := now.Unix()
	for i := range s.slots {
		sl := &s.slots[i]
		if sec := sl.sec.Load(); sec <= cur-windowLen || sec > cur {
			continue
		}
		w.Calls += sl.calls.Load()
		w.Errors += sl.errors.Load()
	}
	w.Rate = float64(w.Calls) / windowLen
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

package kiev

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Latency buckets of the rolling window: bucket i counts calls that took
// less than latBase<<i, the last one the rest.
const (
	latBuckets = 24
	latBase    = 10 * time.Microsecond // bucket 23 starts at about 84s
	windowLen  = 60                    // one-second slots: the last minute
)

// callStats counts a method's calls: totals since start, and a rolling
// window over the last minute for rates and latency percentiles. Updates
// are a few atomic adds; a slot is reset by the first call of its second,
// so counts are exact over totals and approximate within a window.
type callStats struct {
	calls, errors atomic.Int64
	codes         [numCodes + 1]atomic.Int64 // calls by Code; the last counts codes of 100 and up
	lat           [latBuckets]atomic.Int64   // latencies since start, by bucket
	latSum        atomic.Int64               // nanoseconds, since start
	slots         [windowLen]statSlot
}

// numCodes is the number of codes kiev defines.
const numCodes = int(CodeTooLarge) + 1

// codeIndex is the slot of code c in callStats.codes.
func codeIndex(c Code) int {
	if int(c) < numCodes {
		return int(c)
	}
	return numCodes
}

type statSlot struct {
	sec    atomic.Int64 // the Unix second the slot counts
	calls  atomic.Int64
	errors atomic.Int64
	lat    [latBuckets]atomic.Int64
}

func latBucket(d time.Duration) int {
	if d < latBase {
		return 0
	}
	return min(bits.Len64(uint64(d/latBase)), latBuckets-1)
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
	if d >= 0 {
		s.lat[latBucket(d)].Add(1)
		s.latSum.Add(int64(d))
	}
	sec := now.Unix()
	sl := &s.slots[sec%windowLen]
	if old := sl.sec.Load(); old != sec && sl.sec.CompareAndSwap(old, sec) {
		sl.calls.Store(0)
		sl.errors.Store(0)
		for i := range sl.lat {
			sl.lat[i].Store(0)
		}
	}
	sl.calls.Add(1)
	if failed {
		sl.errors.Add(1)
	}
	if d >= 0 {
		sl.lat[latBucket(d)].Add(1)
	}
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
	var lat [latBuckets]int64
	cur := now.Unix()
	for i := range s.slots {
		sl := &s.slots[i]
		if sec := sl.sec.Load(); sec <= cur-windowLen || sec > cur {
			continue
		}
		w.Calls += sl.calls.Load()
		w.Errors += sl.errors.Load()
		for b := range lat {
			lat[b] += sl.lat[b].Load()
		}
	}
	w.Rate = float64(w.Calls) / windowLen
	w.P50, w.P99 = percentile(lat[:], 0.50), percentile(lat[:], 0.99)
	return w
}

// percentile estimates the q-quantile of the bucketed latencies as the
// upper bound of the bucket it falls in.
func percentile(lat []int64, q float64) time.Duration {
	var n int64
	for _, c := range lat {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank := int64(q*float64(n-1)) + 1
	for i, c := range lat {
		rank -= c
		if rank <= 0 {
			return latBase << i
		}
	}
	return latBase << (latBuckets - 1)
}

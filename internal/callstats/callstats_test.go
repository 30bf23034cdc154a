package callstats

import (
	"testing"
	"time"
	"unsafe"
)

func TestCallStatsWindow(t *testing.T) {
	var s Stats
	now := time.Unix(1_000_000, 0)
	for i := range 99 {
		s.Record(now.Add(time.Duration(i)*time.Millisecond), 100*time.Microsecond, codeOK)
	}
	s.Record(now, 50*time.Millisecond, codeApplication)
	w := s.Summary(now.Add(time.Second), now)
	if w.Calls != 100 || w.Errors != 1 {
		t.Fatalf("summary = %+v; want 100 calls, 1 error", w)
	}
	// One slow call in 100 is the 100th percentile: p99 stays in the
	// bucket of 100µs, [100µs, 110µs).
	if !near(w.P50, 100*time.Microsecond) || !near(w.P99, 100*time.Microsecond) {
		t.Errorf("p50, p99 = %v, %v; want 100µs for both", w.P50, w.P99)
	}
	s.Record(now, 50*time.Millisecond, codeApplication)
	if w := s.Summary(now, now); !near(w.P99, 50*time.Millisecond) {
		t.Errorf("p99 with two slow calls in 101 = %v; want 50ms", w.P99)
	}
	// A minute later the window is empty; totals stay.
	if w := s.Summary(now.Add(61*time.Second), now); w.Calls != 0 || w.P99 != 0 {
		t.Errorf("a minute later the window holds %d calls, p99 %v", w.Calls, w.P99)
	}
	s.Record(now.Add(61*time.Second), time.Millisecond, codeOK)
	if w := s.Summary(now.Add(61*time.Second), now); w.Calls != 1 || s.Calls.Load() != 102 || !near(w.P99, time.Millisecond) {
		t.Errorf("after the slot was reused: window %d calls, p99 %v, total %d; want 1, 1ms and 102", w.Calls, w.P99, s.Calls.Load())
	}
}

// TestRateIsOverTheTimeCovered checks the rates of a server that takes
// 350 calls a second, 5 and 90 seconds after it started. The rates once
// divided the last minute's count by 60 seconds, so 5 seconds after a
// start the page showed 29 calls a second.
func TestRateIsOverTheTimeCovered(t *testing.T) {
	const perSec = 350
	start := time.Unix(1_000_000, 300_000_000) // mid-second, as a real start
	for _, tc := range []struct {
		up       time.Duration
		wantSpan time.Duration
	}{
		{5 * time.Second, 5 * time.Second},
		{90 * time.Second, 59*time.Second + 300*time.Millisecond}, // 59 whole seconds and the current one's part
	} {
		var s Stats
		now := start.Add(tc.up)
		// The clock is the time each call is recorded at: one every
		// 1/350 s, with one call in 20 failing.
		n := 0
		for at := start; at.Before(now); at = at.Add(time.Second / perSec) {
			code := codeOK
			if n%20 == 0 {
				code = codeApplication
			}
			s.Record(at, time.Millisecond, code)
			n++
		}
		w := s.Summary(now, start)
		if w.Span != tc.wantSpan {
			t.Errorf("after %v: the window spans %v; want %v", tc.up, w.Span, tc.wantSpan)
		}
		if w.Rate < perSec*0.995 || w.Rate > perSec*1.005 {
			t.Errorf("after %v: rate %.1f calls/s; want %d within 0.5%%", tc.up, w.Rate, perSec)
		}
		if want := perSec / 20.0; w.ErrRate < want*0.98 || w.ErrRate > want*1.02 {
			t.Errorf("after %v: error rate %.2f/s; want %.1f within 2%%", tc.up, w.ErrRate, want)
		}
	}
}

// near reports whether got is within 10% of want.
func near(got, want time.Duration) bool {
	return got >= want*9/10 && got <= want*11/10
}

// TestPercentiles checks the status page's percentiles against the truth.
// Before they were interpolated, they were the upper bounds of power-of-two
// buckets: a method that always took 100ms showed p50 = p99 = 163.84ms.
func TestPercentiles(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name     string
		samples  map[time.Duration]int // latency: how many calls took it
		p50, p99 time.Duration
	}{
		{"fixed 100ms", map[time.Duration]int{100 * ms: 1000}, 100 * ms, 100 * ms},
		{"fixed 100.4ms", map[time.Duration]int{100*ms + 400*time.Microsecond: 1000}, 100 * ms, 100 * ms},
		{"fixed 1ms", map[time.Duration]int{ms: 1000}, ms, ms},
		{"fixed 15µs", map[time.Duration]int{15 * time.Microsecond: 1000}, 15 * time.Microsecond, 15 * time.Microsecond},
		{"fixed 3s", map[time.Duration]int{3 * time.Second: 10}, 3 * time.Second, 3 * time.Second},
		{"fixed 20s", map[time.Duration]int{20 * time.Second: 10}, 20 * time.Second, 20 * time.Second},
		{"one call", map[time.Duration]int{100 * ms: 1}, 100 * ms, 100 * ms},
		{"1ms and 100ms, 95:5", map[time.Duration]int{ms: 950, 100 * ms: 50}, ms, 100 * ms},
		{"1ms and 100ms, 40:60", map[time.Duration]int{ms: 400, 100 * ms: 600}, 100 * ms, 100 * ms},
		{"1 to 100ms evenly", spread(ms, 100*ms, 1000), 50 * ms, 99 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Stats
			now := time.Unix(1_000_000, 0)
			for d, n := range tc.samples {
				for range n {
					s.Record(now, d, codeOK)
				}
			}
			w := s.Summary(now, now)
			if !near(w.P50, tc.p50) || !near(w.P99, tc.p99) {
				t.Errorf("p50, p99 = %v, %v; want %v, %v within 10%%", w.P50, w.P99, tc.p50, tc.p99)
			}
		})
	}
}

// spread returns n latencies evenly from lo to hi.
func spread(lo, hi time.Duration, n int) map[time.Duration]int {
	m := make(map[time.Duration]int, n)
	for i := range n {
		m[lo+(hi-lo)*time.Duration(i)/time.Duration(n-1)]++
	}
	return m
}

// TestLatBuckets checks that the buckets tile the latencies with no gap,
// each at most an eighth of its lower bound wide.
func TestLatBuckets(t *testing.T) {
	for i := range latBuckets - 1 {
		lo, hi := latLower(i), latLower(i+1)
		if got := latBucket(lo); got != i {
			t.Errorf("latBucket(%v) = %d; want %d", lo, got, i)
		}
		if got := latBucket(hi - 1); got != i {
			t.Errorf("latBucket(%v) = %d; want %d", hi-1, got, i)
		}
		if i >= latSub && hi-lo > lo/latSub {
			t.Errorf("bucket %d, [%v, %v), is over an eighth of its lower bound wide", i, lo, hi)
		}
	}
	if last := latLower(latBuckets - 1); last != latBase<<latOctaves || latBucket(time.Hour) != latBuckets-1 || latBucket(last) != latBuckets-1 {
		t.Errorf("the last bucket starts at %v, holds an hour in %d; want %v, %d", last, latBucket(time.Hour), latBase<<latOctaves, latBuckets-1)
	}
}

// TestCallStatsSize guards the footprint of a method's statistics.
func TestCallStatsSize(t *testing.T) {
	if size := unsafe.Sizeof(Stats{}); size > 16<<10 {
		t.Errorf("a Stats takes %d bytes; want at most 16 KiB", size)
	}
}

func TestCallStatsRecordAllocs(t *testing.T) {
	var s Stats
	now := time.Now()
	if n := testing.AllocsPerRun(100, func() { s.Record(now, time.Millisecond, codeOK) }); n != 0 {
		t.Errorf("record allocates %v times", n)
	}
}

// The codes the tests record, as kiev numbers them.
const (
	codeOK          uint32 = 0
	codeApplication uint32 = 1
)

package kiev

import (
	"testing"
	"time"
)

func TestCallStatsWindow(t *testing.T) {
	var s callStats
	now := time.Unix(1_000_000, 0)
	for i := range 99 {
		s.record(now.Add(time.Duration(i)*time.Millisecond), 100*time.Microsecond, CodeOK)
	}
	s.record(now, 50*time.Millisecond, CodeApplication)
	w := s.summary(now.Add(time.Second))
	if w.Calls != 100 || w.Errors != 1 {
		t.Fatalf("summary = %+v; want 100 calls, 1 error", w)
	}
	// 100µs falls in the bucket [80µs, 160µs); 50ms in [40.96ms, 81.92ms).
	if w.P50 != 160*time.Microsecond || w.P99 != 160*time.Microsecond {
		t.Errorf("p50, p99 = %v, %v; want 160µs for both (one slow call in 100 is the 100th percentile)", w.P50, w.P99)
	}
	s.record(now, 50*time.Millisecond, CodeApplication)
	if w := s.summary(now); w.P99 != 81920*time.Microsecond {
		t.Errorf("p99 with two slow calls in 101 = %v; want 81.92ms", w.P99)
	}
	// A minute later the window is empty; totals stay.
	if w := s.summary(now.Add(61 * time.Second)); w.Calls != 0 {
		t.Errorf("a minute later the window holds %d calls", w.Calls)
	}
	s.record(now.Add(61*time.Second), time.Millisecond, CodeOK)
	if w := s.summary(now.Add(61 * time.Second)); w.Calls != 1 || s.calls.Load() != 102 {
		t.Errorf("after the slot was reused: window %d calls, total %d; want 1 and 102", w.Calls, s.calls.Load())
	}
}

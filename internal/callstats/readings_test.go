package callstats

import (
	"testing"
	"time"
)

// Rates from readings cover the last minute, from the oldest reading in
// it, or the time since start before the first reading.
func TestReadingsRatesCoverTheLastMinute(t *testing.T) {
	var r Readings
	start := time.Unix(1_000_000, 0)
	if rates, span := r.Rates(start.Add(4*time.Second), start, [4]int64{40, 8, 0, 0}); span != 4*time.Second || rates != [4]float64{10, 2, 0, 0} {
		t.Errorf("before any reading: %v over %v; want 10 and 2 per second over the 4 s since start", rates, span)
	}
	// A counter that rises by 10 a second, read every 5 s for 2 minutes.
	for s := 0; s <= 120; s += 5 {
		r.Add(start.Add(time.Duration(s)*time.Second), [4]int64{int64(10 * s), 0, int64(s), 0})
	}
	now := start.Add(122 * time.Second)
	rates, span := r.Rates(now, start, [4]int64{1220, 0, 122, 0})
	if span != 57*time.Second || rates[0] != 10 || rates[2] != 1 {
		t.Errorf("after 2 minutes: %v over %v; want 10 and 1 per second, from the oldest reading of the last minute (65 s), 57 s ago", rates, span)
	}
	// Long after the last reading (the sampler stopped), none is recent:
	// the rates are since start.
	now = start.Add(1000 * time.Second)
	if rates, span := r.Rates(now, start, [4]int64{1000, 0, 0, 0}); span != 1000*time.Second || rates[0] != 1 {
		t.Errorf("with no reading in the last minute: %v over %v; want 1 per second since start", rates, span)
	}
}

package kiev

import (
	"testing"
	"time"
)

// TestHedgerAdaptiveDelayIsThe95thPercentile checks the adaptive delay:
// none before 64 answers, then the 95th percentile of the last 256.
func TestHedgerAdaptiveDelayIsThe95thPercentile(t *testing.T) {
	h := newHedger(Hedging{})
	for i := range 63 {
		h.observe(time.Duration(i+1) * time.Millisecond)
	}
	if _, ok := h.wait(); ok {
		t.Fatal("a delay after 63 answers; want none before 64")
	}
	for i := 63; i < 256; i++ {
		h.observe(time.Duration(i+1) * time.Millisecond)
	}
	if d, ok := h.wait(); !ok || d != 244*time.Millisecond {
		t.Fatalf("delay after answers of 1..256 ms = %v, %v; want the 95th percentile, 244ms", d, ok)
	}
	for range 256 { // the window moves on
		h.observe(time.Millisecond)
	}
	if d, _ := h.wait(); d != time.Millisecond {
		t.Fatalf("delay after 256 answers of 1ms = %v; want 1ms", d)
	}
}

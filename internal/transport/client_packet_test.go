package transport

import (
	"testing"
	"time"
)

func TestRTOEstimator(t *testing.T) {
	pk := newPacketClient[struct{}](PacketConfig{InitialRTO: time.Second, MinRTO: 20 * time.Millisecond, MaxRTO: 3 * time.Second}, nil)
	if got := pk.rto(); got != time.Second {
		t.Fatalf("RTO before any sample = %v; want InitialRTO", got)
	}
	// RFC 6298: the first sample R sets SRTT = R and RTTVAR = R/2, so
	// RTO = R + 4*R/2.
	pk.sample(100 * time.Millisecond)
	if got := pk.rto(); got != 300*time.Millisecond {
		t.Fatalf("RTO after one 100ms sample = %v; want 300ms", got)
	}
	// Then RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R|, SRTT = 7/8 SRTT + 1/8 R.
	pk.sample(100 * time.Millisecond)
	if got := pk.rto(); got != 250*time.Millisecond {
		t.Fatalf("RTO after two 100ms samples = %v; want 100ms + 4*37.5ms", got)
	}
	for range 100 {
		pk.sample(50 * time.Microsecond)
	}
	if got := pk.rto(); got != 20*time.Millisecond {
		t.Fatalf("RTO after loopback-fast samples = %v; want the MinRTO floor", got)
	}
	for range 100 {
		pk.sample(10 * time.Second)
	}
	if got := pk.rto(); got != 3*time.Second {
		t.Fatalf("RTO after 10s samples = %v; want the MaxRTO cap", got)
	}
}

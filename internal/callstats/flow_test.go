package callstats

import (
	"testing"
	"time"
	"unsafe"
)

// A stream method's message rates cover the last minute, or the time
// since start when shorter, each way apart; a minute later they are gone.
func TestFlowRatesCoverTheLastMinuteEachWay(t *testing.T) {
	var f Flow
	start := time.Unix(1_000_000, 0)
	for i := range 10 {
		at := start.Add(time.Duration(i) * 500 * time.Millisecond)
		f.Record(at, true, 100)
		f.Record(at, true, 100)
		f.Record(at, false, 10)
	}
	w := f.Summary(start.Add(5*time.Second), start)
	if w.MsgsOut != 20 || w.MsgsIn != 10 || w.BytesOut != 2000 || w.BytesIn != 100 {
		t.Fatalf("window = %+v; want 20 messages (2000 bytes) out, 10 (100 bytes) in", w)
	}
	if w.Span != 5*time.Second || w.MsgOutRate != 4 || w.MsgInRate != 2 || w.ByteOutRate != 400 || w.ByteInRate != 20 {
		t.Errorf("rates = %+v over %v; want 4 and 2 messages/s, 400 and 20 bytes/s, over the 5 s since start", w, w.Span)
	}
	if w := f.Summary(start.Add(70*time.Second), start); w.MsgsOut != 0 || w.MsgsIn != 0 || w.Span != 59*time.Second {
		t.Errorf("70 s later the window is %+v; want empty, over the 59 s before this one", w)
	}
	f.Record(start.Add(64*time.Second), false, 7) // reuses the slot of second 4
	if w := f.Summary(start.Add(64*time.Second), start); w.MsgsIn != 1 || w.BytesIn != 7 || w.MsgsOut != 0 {
		t.Errorf("after the slot was reused the window is %+v; want 1 message of 7 bytes in", w)
	}
}

func TestFlowSizeAndAllocs(t *testing.T) {
	if size := unsafe.Sizeof(Flow{}); size > 3<<10 {
		t.Errorf("a Flow takes %d bytes; want at most 3 KiB", size)
	}
	var f Flow
	now := time.Now()
	if n := testing.AllocsPerRun(100, func() { f.Record(now, true, 10) }); n != 0 {
		t.Errorf("Record allocates %v times", n)
	}
}

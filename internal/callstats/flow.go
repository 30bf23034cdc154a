package callstats

import (
	"sync/atomic"
	"time"
)

// Flow counts a stream method's messages and their bytes each way, by the
// second over the last minute, for rates, as Stats counts calls: a few
// atomic adds a message, a slot reset by the first message of its
// second. It takes about 2.4 KiB.
type Flow struct {
	slots [windowLen]flowSlot
}

// flowSlot counts the messages of one second, by direction: in (received)
// and out (sent).
type flowSlot struct {
	sec   atomic.Int64 // the Unix second the slot counts
	msgs  [2]atomic.Int64
	bytes [2]atomic.Int64
}

// Record counts one message of n bytes, sent if out, else received.
func (f *Flow) Record(now time.Time, out bool, n int) {
	d := 0
	if out {
		d = 1
	}
	sec := now.Unix()
	sl := &f.slots[sec%windowLen]
	if old := sl.sec.Load(); old != sec && sl.sec.CompareAndSwap(old, sec) {
		for i := range sl.msgs {
			sl.msgs[i].Store(0)
			sl.bytes[i].Store(0)
		}
	}
	sl.msgs[d].Add(1)
	sl.bytes[d].Add(int64(n))
}

// FlowWindow is what the last minute of messages looked like, or the time
// since counting started if that is shorter: counts, and rates per second
// over Span.
type FlowWindow struct {
	MsgsIn, MsgsOut, BytesIn, BytesOut int64
	Span                               time.Duration
	MsgInRate, MsgOutRate              float64
	ByteInRate, ByteOutRate            float64
}

// Summary sums the slots of the last minute, the current second
// included, for the messages counted since start, over the same span as
// Stats.Summary (see WindowSpan).
func (f *Flow) Summary(now, start time.Time) FlowWindow {
	var w FlowWindow
	cur := now.Unix()
	for i := range f.slots {
		sl := &f.slots[i]
		if sec := sl.sec.Load(); sec <= cur-windowLen || sec > cur {
			continue
		}
		w.MsgsIn += sl.msgs[0].Load()
		w.MsgsOut += sl.msgs[1].Load()
		w.BytesIn += sl.bytes[0].Load()
		w.BytesOut += sl.bytes[1].Load()
	}
	w.Span = WindowSpan(now, start)
	secs := w.Span.Seconds()
	w.MsgInRate, w.MsgOutRate = float64(w.MsgsIn)/secs, float64(w.MsgsOut)/secs
	w.ByteInRate, w.ByteOutRate = float64(w.BytesIn)/secs, float64(w.BytesOut)/secs
	return w
}

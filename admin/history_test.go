package admin

import (
	"math"
	"slices"
	"testing"
	"time"
	"unsafe"
)

// TestHistoryRates checks that a sample holds the rates and limits of
// its interval, and that the ring keeps the last HistoryLen samples.
func TestHistoryRates(t *testing.T) {
	var h History
	t0 := time.Unix(1_000_000, 0)
	reading := func(i int) Counters {
		c := Counters{Time: t0.Add(time.Duration(i) * HistoryEvery), Dropped: map[string]uint64{"expired": uint64(10 * i), "refused": 0}}
		c.DroppedByPriority[0] = uint64(5 * i) // 1/s at priority 0
		c.DroppedByPriority[9] = uint64(5 * i) // and 1/s at 9
		m := MethodCounters{Name: "Shop.Place", Calls: int64(100 * i), Errors: int64(5 * i), Limit: 8 + i%2, InFlight: i % 3}
		m.Latency[40] = int64(100 * i) // the calls of each interval, all in one bucket
		c.Methods = []MethodCounters{m}
		return c
	}
	h.Add(reading(0))
	if h.Len() != 0 {
		t.Fatalf("the first reading made %d samples; want none", h.Len())
	}
	for i := 1; i <= HistoryLen+20; i++ {
		h.Add(reading(i))
	}
	samples, reasons, methods, _ := h.samples()
	if len(samples) != HistoryLen {
		t.Fatalf("the history holds %d samples; want %d", len(samples), HistoryLen)
	}
	if first := samples[0].Time; !first.Equal(t0.Add(21 * HistoryEvery)) {
		t.Errorf("the oldest sample ends at %v; want the 21st interval's end", first)
	}
	if len(reasons) != 2 || reasons[0] != "expired" || len(methods) != 1 {
		t.Fatalf("reasons %v, methods %v", reasons, methods)
	}
	last := samples[len(samples)-1]
	m := last.Methods[0]
	if last.Calls != 20 || last.Errors != 1 || m.Calls != 20 || m.Errors != 1 || last.Dropped[0] != 2 || last.Dropped[1] != 0 {
		t.Errorf("last sample: %v calls/s, %v errors/s, drops %v; want 20, 1 and [2 0]", last.Calls, last.Errors, last.Dropped)
	}
	if last.Bands != [numBands]float32{1, 0, 1} {
		t.Errorf("drops by band %v; want [1 0 1]", last.Bands)
	}
	if i := HistoryLen + 20; m.Limit != int32(8+i%2) || m.InFlight != int32(i%3) {
		t.Errorf("limit %d, in flight %d; want the last reading's", m.Limit, m.InFlight)
	}
	if m.P50Ms <= 0 || math.Abs(float64(last.P99Ms-m.P99Ms)) > 1e-6 {
		t.Errorf("p50 %v, p99 %v (server %v): want the interval's bucket", m.P50Ms, m.P99Ms, last.P99Ms)
	}
	cs := buildCharts(&h, last.Time)
	if len(cs.Server) != 4 || len(cs.Methods) != 1 || cs.Server[0].Points != HistoryLen || cs.Server[0].Span != HistoryLen*HistoryEvery {
		t.Errorf("charts: %d of the server, %d methods, %d points over %v", len(cs.Server), len(cs.Methods), cs.Server[0].Points, cs.Server[0].Span)
	}
}

// TestHistorySize guards the memory the doc of HistoryLen states.
func TestHistorySize(t *testing.T) {
	perSample := unsafe.Sizeof(Sample{}) + 8*4 // and its drops by reason
	perMethod := unsafe.Sizeof(MethodSample{})
	perStream := unsafe.Sizeof(StreamSample{})
	if perSample > 160 || perMethod > 28 || perStream > 12 {
		t.Errorf("a sample takes %d bytes, %d per method and %d per stream method; the doc says at most 160, 28 and 12", perSample, perMethod, perStream)
	}
}

// A stream method's samples hold its messages per second each way, and
// its charts add one of them; a unary method has no such chart.
func TestHistoryStreamRates(t *testing.T) {
	var h History
	t0 := time.Unix(1_000_000, 0)
	for i := range 4 {
		h.Add(Counters{Time: t0.Add(time.Duration(i) * HistoryEvery), Dropped: map[string]uint64{}, Methods: []MethodCounters{
			{Name: "Shop.Place", Calls: int64(10 * i)},
			{Name: "Feed.Watch", Calls: int64(i), Stream: true, MsgsIn: int64(5 * i), MsgsOut: int64(50 * i)},
		}})
	}
	samples, _, _, streams := h.samples()
	if len(samples) != 3 || len(streams) != 1 || streams[0] != "Feed.Watch" {
		t.Fatalf("%d samples of streams %v; want 3 of Feed.Watch", len(samples), streams)
	}
	if s := samples[2].Streams; len(s) != 1 || s[0] != (StreamSample{MsgsIn: 1, MsgsOut: 10, Seen: true}) {
		t.Errorf("the last sample's streams: %+v; want 1 message/s in, 10 out", s)
	}
	cs := buildCharts(&h, samples[2].Time)
	for _, mc := range cs.Methods {
		var ids []string
		for _, c := range mc.Charts {
			ids = append(ids, c.ID)
		}
		if has := slices.Contains(ids, "method-messages"); has != (mc.Name == "Feed.Watch") {
			t.Errorf("%s's charts are %v", mc.Name, ids)
		}
	}
}

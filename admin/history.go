package admin

import (
	"slices"
	"sync"
	"time"

	"github.com/kievrpc/kiev/internal/callstats"
)

// A History keeps HistoryLen samples, one every HistoryEvery: the last
// 15 minutes, which the status page charts.
//
// Its memory is bounded: a sample takes at most 160 bytes, 28 more per
// method and 12 more per stream method (the names are kept once, not per
// sample), so a server with 20 methods keeps at most 127 KiB of history,
// and 2 KiB more for each stream method; the previous reading adds 1.5
// KiB a method.
const (
	HistoryEvery = 5 * time.Second
	HistoryLen   = 180
)

// Priority bands the charts group drops by: priorities 0 to 2 (shed
// first), 3 to 6 (the default, 5, among them), 7 to 9 (shed last).
const numBands = 3

var bandNames = [numBands]string{"priority 0–2", "priority 3–6", "priority 7–9"}

// band returns the band of priority p.
func band(p int) int {
	switch {
	case p <= 2:
		return 0
	case p <= 6:
		return 1
	}
	return 2
}

// Counters are a server's counters since it started, read at one time.
// A History turns two readings into a sample of what happened between
// them.
type Counters struct {
	Time              time.Time
	Methods           []MethodCounters
	Dropped           map[string]uint64 // by reason
	DroppedByPriority [10]uint64        // by priority, 0 to 9
}

// MethodCounters are a method's counters at a reading, and its adaptive
// limit's state then.
type MethodCounters struct {
	Name            string // Service.Method
	Calls, Errors   int64
	Latency         callstats.Buckets // calls by latency bucket
	Limit, InFlight int               // Limit is 0 while off
	// Stream marks a stream method, whose streams' messages MsgsIn (from
	// clients) and MsgsOut (to them) count since start.
	Stream          bool
	MsgsIn, MsgsOut int64
}

// Sample is what a server did over one interval of its History: rates
// per second and latency percentiles (in milliseconds) over the interval,
// and its methods' limits at its end.
type Sample struct {
	Time          time.Time // the end of the interval
	Calls, Errors float32
	P50Ms, P99Ms  float32
	Dropped       []float32         // per second, by reason, in the order of History.reasons
	Bands         [numBands]float32 // drops per second by priority band
	Methods       []MethodSample    // in the order of History.methods
	Streams       []StreamSample    // in the order of History.streams
}

// MethodSample is what a method did over one interval.
type MethodSample struct {
	Calls, Errors   float32 // per second
	P50Ms, P99Ms    float32
	Limit, InFlight int32
	Seen            bool // the method was registered during the interval
}

// StreamSample is what a stream method's streams did over one interval:
// their messages per second each way.
type StreamSample struct {
	MsgsIn, MsgsOut float32
	Seen            bool // the method was registered during the interval
}

// History is a ring of the last HistoryLen samples of a server. Its
// methods may be called from many goroutines at once.
type History struct {
	mu      sync.Mutex // guards the fields below
	prev    Counters
	primed  bool           // prev holds a reading
	reasons []string       // the drop reasons, sorted, from the first reading
	methods []string       // the methods, in the order they were first seen
	index   map[string]int // position in methods
	streams []string       // the stream methods, in the order they were first seen
	sindex  map[string]int // position in streams
	ring    [HistoryLen]Sample
	next, n int // the slot of the next sample; how many the ring holds
}

// Add records the counters of a reading: with the previous reading, they
// make a sample of the interval between them, which replaces the oldest
// once the ring is full. The first reading only primes the history.
func (h *History) Add(c Counters) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.primed {
		h.reasons = make([]string, 0, len(c.Dropped))
		for r := range c.Dropped {
			h.reasons = append(h.reasons, r)
		}
		slices.Sort(h.reasons)
		h.index = make(map[string]int)
		h.sindex = make(map[string]int)
		h.prev, h.primed = c, true
		return
	}
	secs := c.Time.Sub(h.prev.Time).Seconds()
	if secs <= 0 {
		return
	}
	rate := func(now, then uint64) float32 { return float32(float64(now-then) / secs) }
	s := Sample{Time: c.Time, Dropped: make([]float32, len(h.reasons))}
	for i, r := range h.reasons {
		s.Dropped[i] = rate(c.Dropped[r], h.prev.Dropped[r])
	}
	for p := range c.DroppedByPriority {
		s.Bands[band(p)] += rate(c.DroppedByPriority[p], h.prev.DroppedByPriority[p])
	}
	prev := make(map[string]*MethodCounters, len(h.prev.Methods))
	for i := range h.prev.Methods {
		prev[h.prev.Methods[i].Name] = &h.prev.Methods[i]
	}
	var all callstats.Buckets
	var calls, errs int64
	for i := range c.Methods {
		m := &c.Methods[i]
		at, ok := h.index[m.Name]
		if !ok {
			at = len(h.methods)
			h.methods = append(h.methods, m.Name)
			h.index[m.Name] = at
		}
		lat := m.Latency
		ms := MethodSample{Seen: true, Limit: int32(m.Limit), InFlight: int32(m.InFlight)}
		if p := prev[m.Name]; p != nil {
			lat.Sub(&p.Latency)
			ms.Calls = float32(float64(m.Calls-p.Calls) / secs)
			ms.Errors = float32(float64(m.Errors-p.Errors) / secs)
			calls += m.Calls - p.Calls
			errs += m.Errors - p.Errors
		} else {
			ms.Calls = float32(float64(m.Calls) / secs)
			ms.Errors = float32(float64(m.Errors) / secs)
			calls += m.Calls
			errs += m.Errors
		}
		ms.P50Ms, ms.P99Ms = msOf(lat.Percentile(0.50)), msOf(lat.Percentile(0.99))
		all.Add(&lat)
		for len(s.Methods) <= at {
			s.Methods = append(s.Methods, MethodSample{})
		}
		s.Methods[at] = ms
		if m.Stream {
			h.addStream(&s, m, prev[m.Name], secs)
		}
	}
	s.Calls, s.Errors = float32(float64(calls)/secs), float32(float64(errs)/secs)
	s.P50Ms, s.P99Ms = msOf(all.Percentile(0.50)), msOf(all.Percentile(0.99))
	h.ring[h.next] = s
	h.next = (h.next + 1) % HistoryLen
	h.n = min(h.n+1, HistoryLen)
	h.prev = c
}

// addStream adds to s the rates of stream method m over the secs since
// its previous reading p, or since start if it has none.
// REQUIRES h.mu is held.
func (h *History) addStream(s *Sample, m, p *MethodCounters, secs float64) {
	at, ok := h.sindex[m.Name]
	if !ok {
		at = len(h.streams)
		h.streams = append(h.streams, m.Name)
		h.sindex[m.Name] = at
	}
	in, out := m.MsgsIn, m.MsgsOut
	if p != nil {
		in, out = in-p.MsgsIn, out-p.MsgsOut
	}
	for len(s.Streams) <= at {
		s.Streams = append(s.Streams, StreamSample{})
	}
	s.Streams[at] = StreamSample{MsgsIn: float32(float64(in) / secs), MsgsOut: float32(float64(out) / secs), Seen: true}
}

func msOf(d time.Duration) float32 { return float32(d) / float32(time.Millisecond) }

// Len returns how many samples the history holds.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// samples returns the samples, oldest first, and the names of the
// reasons, methods and stream methods they count.
func (h *History) samples() (out []Sample, reasons, methods, streams []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out = make([]Sample, 0, h.n)
	for i := range h.n {
		out = append(out, h.ring[(h.next-h.n+i+HistoryLen)%HistoryLen])
	}
	return out, h.reasons, slices.Clone(h.methods), slices.Clone(h.streams)
}

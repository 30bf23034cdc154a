package admin

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The charts' size, in SVG units (CSS pixels at 100%).
const (
	chartW = 300
	chartH = 80
)

// chart is one chart of the status page: lines over the last 15
// minutes, drawn on the server as inline SVG.
type chart struct {
	ID, Title, Unit string
	Method          string // the method charted, or "" for the server
	Max             float64
	Span            time.Duration // the x axis's, which ends at now
	Points          int           // samples drawn
	Series          []series
}

// series is one line of a chart.
type series struct {
	Name   string
	Class  string // s0 to s5: its colour
	Points string // SVG polyline points
	Last   float64
}

// charts are the status page's charts: the server's, then each method's.
type charts struct {
	Server  []chart
	Methods []methodCharts
	Every   time.Duration
}

type methodCharts struct {
	Name   string
	Charts []chart
}

// line is a series before it is drawn: a value per sample, NaN where it
// has none.
type line struct {
	name string
	vals []float64
}

// buildCharts draws the history's samples as of now.
func buildCharts(h *History, now time.Time) charts {
	cs := charts{Every: HistoryEvery}
	if h == nil {
		return cs
	}
	samples, reasons, methods, streams := h.samples()
	times := make([]time.Time, len(samples))
	for i, s := range samples {
		times[i] = s.Time
	}
	// The x axis spans the history, from a minute to 15, so a young
	// server's charts fill their width.
	span := time.Minute
	if len(times) > 0 {
		span = min(max(span, now.Sub(times[0]).Round(time.Minute)), HistoryLen*HistoryEvery)
	}
	draw := func(id, title, unit string, lines ...line) chart {
		return draw(id, title, unit, times, now, span, lines...)
	}
	srv := func(f func(s *Sample) float32) []float64 {
		v := make([]float64, len(samples))
		for i := range samples {
			v[i] = float64(f(&samples[i]))
		}
		return v
	}
	cs.Server = []chart{
		draw("server-rate", "calls and errors", "/s",
			line{"calls/s", srv(func(s *Sample) float32 { return s.Calls })},
			line{"errors/s", srv(func(s *Sample) float32 { return s.Errors })}),
		draw("server-latency", "latency p50 and p99", "ms",
			line{"p50", srv(func(s *Sample) float32 { return s.P50Ms })},
			line{"p99", srv(func(s *Sample) float32 { return s.P99Ms })}),
	}
	var byReason []line
	for i, r := range reasons {
		byReason = append(byReason, line{r, srv(func(s *Sample) float32 { return s.Dropped[i] })})
	}
	cs.Server = append(cs.Server, draw("server-drops", "refused and dropped by reason", "/s", byReason...))
	var byBand []line
	for b, name := range bandNames {
		byBand = append(byBand, line{name, srv(func(s *Sample) float32 { return s.Bands[b] })})
	}
	cs.Server = append(cs.Server, draw("server-drops-priority", "refused and dropped by priority", "/s", byBand...))

	for i, name := range methods {
		m := func(f func(m *MethodSample) float64) []float64 {
			v := make([]float64, len(samples))
			for j := range samples {
				v[j] = math.NaN()
				if ms := samples[j].Methods; i < len(ms) && ms[i].Seen {
					v[j] = f(&ms[i])
				}
			}
			return v
		}
		mc := methodCharts{Name: name, Charts: []chart{
			draw("rate", "calls and errors", "/s",
				line{"calls/s", m(func(m *MethodSample) float64 { return float64(m.Calls) })},
				line{"errors/s", m(func(m *MethodSample) float64 { return float64(m.Errors) })}),
			draw("latency", "latency p50 and p99", "ms",
				line{"p50", m(func(m *MethodSample) float64 { return float64(m.P50Ms) })},
				line{"p99", m(func(m *MethodSample) float64 { return float64(m.P99Ms) })}),
			draw("limit", "adaptive limit and in flight", "calls",
				line{"limit (0: off)", m(func(m *MethodSample) float64 { return float64(m.Limit) })},
				line{"in flight", m(func(m *MethodSample) float64 { return float64(m.InFlight) })}),
		}}
		if k := slices.Index(streams, name); k >= 0 {
			st := func(f func(s *StreamSample) float32) []float64 {
				v := make([]float64, len(samples))
				for j := range samples {
					v[j] = math.NaN()
					if ss := samples[j].Streams; k < len(ss) && ss[k].Seen {
						v[j] = float64(f(&ss[k]))
					}
				}
				return v
			}
			mc.Charts = append(mc.Charts, draw("messages", "stream messages in and out", "/s",
				line{"in/s", st(func(s *StreamSample) float32 { return s.MsgsIn })},
				line{"out/s", st(func(s *StreamSample) float32 { return s.MsgsOut })}))
		}
		for j := range mc.Charts {
			mc.Charts[j].Method = name
			mc.Charts[j].ID = "method-" + mc.Charts[j].ID
		}
		cs.Methods = append(cs.Methods, mc)
	}
	return cs
}

// draw lays lines out on a chart whose x axis spans span to now, and
// whose y axis starts at 0.
func draw(id, title, unit string, times []time.Time, now time.Time, span time.Duration, lines ...line) chart {
	c := chart{ID: id, Title: title, Unit: unit, Span: span}
	for _, l := range lines {
		for _, v := range l.vals {
			if !math.IsNaN(v) {
				c.Max = max(c.Max, v)
			}
		}
	}
	c.Max = niceCeil(c.Max)
	for k, l := range lines {
		var b strings.Builder
		s := series{Name: l.name, Class: "s" + strconv.Itoa(k%6)}
		n := 0
		for i, v := range l.vals {
			if math.IsNaN(v) {
				continue
			}
			x := chartW * (1 - float64(now.Sub(times[i]))/float64(span))
			if x < 0 {
				continue
			}
			y := chartH * (1 - v/c.Max)
			if n > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.FormatFloat(x, 'f', 1, 64))
			b.WriteByte(',')
			b.WriteString(strconv.FormatFloat(y, 'f', 1, 64))
			s.Last = v
			n++
		}
		s.Points = b.String()
		c.Points = max(c.Points, n)
		c.Series = append(c.Series, s)
	}
	return c
}

// niceCeil rounds v up to 1, 1.5, 2, 3, 4, 5, 6 or 8 times a power of
// ten, so the axis's top reads well and the lines fill most of the
// height; 1 for an empty chart.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.5, 2, 3, 4, 5, 6, 8, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

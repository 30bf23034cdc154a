package main

// The cpu workload: a handler of exactly known capacity X (slots held for
// a fixed time each), offered 0.5 to 5 × X, then a spike.

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// cpuResult is the cpu workload's outcome.
type cpuResult struct {
	capacity float64
	phases   []phaseResult // steady phases, then the spike's three
	spikes   []spikeResult
}

// spikeResult is the spike run of one system at fine time resolution.
type spikeResult struct {
	system   string
	bucket   time.Duration
	goodput  []float64 // per bucket, ×X
	offered  []float64 // user load per bucket, ×X
	spikeEnd time.Duration
	recovery time.Duration // -1 if goodput did not come back
	after    time.Duration // how long the run watched for recovery
}

// cpuServer is the server of the cpu and neighbour workloads.
func cpuServer(cfg config, sys string) serverConfig {
	c := cfg.cpu
	return serverConfig{system: sys, slots: c.slots, service: c.slotTime, catchUp: c.slotTime, shed: cfg.shed}
}

// runCPU runs the steady phases, each for every system in turn, then the
// spike for every system.
func runCPU(ctx context.Context, cfg config, exe string, progress io.Writer) (*cpuResult, error) {
	c := cfg.cpu
	x := c.capacity()
	out := &cpuResult{capacity: x}
	seg := func(name string, load float64, d time.Duration, measured bool) segment {
		return segment{name: name, load: load, rates: []float64{load * x}, dur: d, measured: measured}
	}
	lc := loadConfig{streams: []stream{{method: methodWork, prio: mixedPriority}}, deadline: cfg.deadline, attempts: cfg.attempts}
	for i, load := range c.loads {
		for _, sys := range cfg.systems {
			segs := []segment{seg("warmup", load, cfg.warmup, false), seg(fmt.Sprintf("%gX", load), load, cfg.phase, true)}
			lc.seed = cfg.seed*1000 + uint64(i)
			t0 := time.Now()
			res, err := runServer(cfg, exe, cpuServer(cfg, sys), 1, segs, progress, openLoop(ctx, segs, lc))
			if err != nil {
				return nil, fmt.Errorf("%s, %gX: %w", sys, load, err)
			}
			p := measure(sys, res, segs, 1, 2, nil, x)
			out.phases = append(out.phases, p)
			logRow(progress, p, time.Since(t0))
		}
	}
	segs := []segment{
		seg(fmt.Sprintf("spike: %gX before", c.spikeLow), c.spikeLow, c.spikeBefore, true),
		seg(fmt.Sprintf("spike: %gX", c.spikeHigh), c.spikeHigh, c.spikeDur, true),
		seg(fmt.Sprintf("spike: %gX after", c.spikeLow), c.spikeLow, c.spikeAfter, true),
	}
	lc.seed = cfg.seed*1000 + 999
	for _, sys := range cfg.systems {
		t0 := time.Now()
		res, err := runServer(cfg, exe, cpuServer(cfg, sys), 1, segs, progress, openLoop(ctx, segs, lc))
		if err != nil {
			return nil, fmt.Errorf("%s, spike: %w", sys, err)
		}
		for i := range segs {
			p := measure(sys, res, segs, i, i+1, nil, x)
			p.spike = true
			out.phases = append(out.phases, p)
			logRow(progress, p, time.Since(t0))
		}
		s := spikeMetrics(sys, res, segs, x, cfg.bucket, cfg.window)
		out.spikes = append(out.spikes, s)
		fmt.Fprintf(progress, "[%s] recovery: %s\n", sys, recoveryText(s))
	}
	return out, nil
}

// spikeMetrics computes the timeline of a spike run whose segments are
// before, spike and after, and the recovery time: from the end of the
// spike to the start of the first window of the given length whose
// goodput is at least 90% of the load offered after the spike.
func spikeMetrics(system string, res *loadResult, segs []segment, capacity float64, bucket, window time.Duration) spikeResult {
	tl := timeline(res, bucket, nil)
	n := len(tl)
	sr := spikeResult{system: system, bucket: bucket, goodput: make([]float64, n), offered: make([]float64, n),
		spikeEnd: res.bounds[2], recovery: -1, after: res.bounds[len(segs)] - res.bounds[2]}
	for b := range n {
		sr.goodput[b] = tl[b] / capacity
		t := time.Duration(b) * bucket
		for i := range segs {
			if t >= res.bounds[i] && t < res.bounds[i+1] {
				sr.offered[b] = segs[i].load
			}
		}
	}
	w := int(window / bucket)
	need := 0.9 * segs[2].load * capacity * window.Seconds()
	for b := int(sr.spikeEnd / bucket); b+w <= n; b++ {
		got := 0.0
		for _, r := range tl[b : b+w] {
			got += r * bucket.Seconds()
		}
		if got >= need-1e-9 {
			sr.recovery = time.Duration(b)*bucket - sr.spikeEnd
			break
		}
	}
	return sr
}

func recoveryText(s spikeResult) string {
	if s.recovery < 0 {
		return fmt.Sprintf("not recovered within %v of the spike's end", s.after)
	}
	return fmt.Sprintf("%v after the spike's end", s.recovery)
}

// cpuHeader is the cpu table's columns; the test reads the table back.
var cpuHeader = []string{"system", "phase", "offered ×X", "goodput ×X", "p9 success", "p99 ok", "p99 rejected",
	"rejected", "timed out", "served ×X", "wasted", "amplification", "attempts/req", "peak goroutines"}

func (r *cpuResult) write(w io.Writer, cfg config, systems []string) []goalRow {
	c := cfg.cpu
	fmt.Fprintf(w, "## cpu: a handler of known capacity\n\n")
	fmt.Fprintf(w, "Capacity X = %d slots × %v = %.0f calls/s (each call holds a slot; a sleep, not CPU). Phases of %v after a %v warmup; "+
		"spike %gX (%v) → %gX (%v) → %gX (%v). Every call's priority is 9 for a tenth of them, uniform over 0–8 for the rest.\n\n",
		c.slots, c.slotTime, r.capacity, cfg.phase, cfg.warmup,
		c.spikeLow, c.spikeBefore, c.spikeHigh, c.spikeDur, c.spikeLow, c.spikeAfter)
	writeHeader(w, cpuHeader)
	for _, p := range r.phases {
		fmt.Fprintf(w, "| %s | %s | %.2f | %.3f | %s | %s | %s | %s | %s | %.2f | %s | %s | %s | %d |\n",
			p.system, p.phase, p.x(p.offered), p.x(p.goodput), pct(p.p9Success), ms(p.p99OK), ms(p.p99Rej),
			pct(p.rejected), pct(p.timedOut), p.x(p.served), pct(p.wasted), num(p.ampl), num(p.perUser), p.peakG)
	}
	fmt.Fprintf(w, "\noffered: attempts started per second, retries included. goodput: replies within the deadline per second.\n"+
		"p9 success: share of the priority-9 user requests arriving in the phase that got a reply within the deadline, in up to %d attempts.\n"+
		"p99 ok / p99 rejected: latency of the successful attempts / of the attempts the server refused at once (kiev.ErrOverloaded).\n"+
		"rejected, timed out: shares of the attempts that ended in the phase.\n"+
		"served, wasted, amplification come from the server's counters over the phase: handler runs per second; "+
		"share of the runs that started after their caller's deadline; requests received (retries included) per user request. "+
		"A server that cannot read its socket fast enough counts requests late, so amplification can lag attempts/req, "+
		"the client's count of attempts per user request arriving in the phase. "+
		"peak goroutines: the most the server process had during the phase (sampled every %v).\n", cfg.attempts, goroutineSample)
	writeLagging(w, r.phases)
	writeDrops(w, r.phases)
	writeRejectionLatency(w, r.phases)

	fmt.Fprintf(w, "\n### Recovery after the spike\n\n")
	for _, s := range r.spikes {
		fmt.Fprintf(w, "- %s: %s\n", s.system, recoveryText(s))
	}
	fmt.Fprintf(w, "\n### cpu targets\n\n")
	return writeGoals(w, systems, r.goals(cfg))
}

// goals are the cpu workload's targets: goodput at 1 to 5 × X, and the
// ones judged over every phase.
func (r *cpuResult) goals(cfg config) []goal {
	var gs []goal
	steady := func(sys string, load float64) (phaseResult, bool) {
		for _, p := range r.phases {
			if p.system == sys && !p.spike && p.load == load {
				return p, true
			}
		}
		return phaseResult{}, false
	}
	for _, g := range []struct{ load, min float64 }{{1, 0.97}, {2, 0.90}, {3, 0.85}, {5, 0.80}} {
		if !slices.Contains(cfg.cpu.loads, g.load) {
			continue
		}
		gs = append(gs, goal{cell: fmt.Sprintf("%gX", g.load), target: fmt.Sprintf("goodput ≥ %.2fX", g.min), eval: func(sys string) (string, bool, bool) {
			p, ok := steady(sys, g.load)
			return fmt.Sprintf("%.3f", p.x(p.goodput)), p.x(p.goodput) >= g.min, ok
		}})
	}
	// worst folds a per-phase value over the phases that apply.
	worst := func(sys string, applies func(phaseResult) bool, val func(phaseResult) float64, higherIsWorse bool) (float64, string, bool) {
		w, where, found := 0.0, "", false
		for _, p := range r.phases {
			if p.system != sys || !applies(p) || math.IsNaN(val(p)) {
				continue
			}
			v := val(p)
			if !found || (higherIsWorse && v > w) || (!higherIsWorse && v < w) {
				w, where, found = v, p.phase, true
			}
		}
		return w, where, found
	}
	gs = append(gs, goal{cell: "every phase", target: "priority 9 success ≥ 99% while its demand < 0.5X (worst phase)", eval: func(sys string) (string, bool, bool) {
		v, where, ok := worst(sys, func(p phaseResult) bool { return p.x(p.p9Demand) < 0.5-1e-9 },
			func(p phaseResult) float64 { return p.p9Success }, false)
		return fmt.Sprintf("%s (%s)", pct(v), where), v >= 0.99, ok
	}})
	gs = append(gs, goal{cell: "every phase", target: "rejection p99 ≤ 1 ms (worst phase)", eval: func(sys string) (string, bool, bool) {
		v, where, ok := worst(sys, func(p phaseResult) bool { return p.p99Rej >= 0 },
			func(p phaseResult) float64 { return float64(p.p99Rej) }, true)
		if !ok {
			return "no rejections", true, slices.ContainsFunc(r.phases, func(p phaseResult) bool { return p.system == sys })
		}
		text := fmt.Sprintf("%s (%s)", ms(time.Duration(v)), where)
		for _, p := range r.phases {
			if p.system == sys && p.phase == where && p.floor[1] >= 0 {
				text += fmt.Sprintf("; a raw-TCP round trip there: %s", ms(p.floor[1]))
			}
		}
		return text, time.Duration(v) <= time.Millisecond, true
	}})
	gs = append(gs, goal{cell: "every phase", target: "wasted work ≤ 5% (worst phase)", eval: func(sys string) (string, bool, bool) {
		v, where, ok := worst(sys, func(phaseResult) bool { return true },
			func(p phaseResult) float64 { return p.wasted }, true)
		return fmt.Sprintf("%s (%s)", pct(v), where), v <= 0.05, ok
	}})
	gs = append(gs, goal{cell: "spike", target: "full goodput within 1 s after the spike", eval: func(sys string) (string, bool, bool) {
		for _, s := range r.spikes {
			if s.system == sys {
				if s.recovery < 0 {
					return "never", false, true
				}
				return s.recovery.String(), s.recovery <= time.Second, true
			}
		}
		return "", false, false
	}})
	return gs
}

// charts draws goodput against offered load, and the spike timeline.
func (r *cpuResult) charts(dir string, cfg config, systems []string) ([]string, error) {
	var files []string
	var steady []phaseResult
	for _, p := range r.phases {
		if !p.spike {
			steady = append(steady, p)
		}
	}
	f := filepath.Join(dir, "cpu-goodput.png")
	if err := goodputChart(f, fmt.Sprintf("cpu: goodput against offered load (X = %.0f calls/s)", r.capacity), "X", steady, systems); err != nil {
		return nil, err
	}
	files = append(files, f)
	if len(r.spikes) == 0 {
		return files, nil
	}
	p := plot.New()
	c := cfg.cpu
	p.Title.Text = fmt.Sprintf("cpu: spike %gX → %gX → %gX, goodput per %v", c.spikeLow, c.spikeHigh, c.spikeLow, r.spikes[0].bucket)
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "×X"
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	var off plotter.XYs
	for b, v := range r.spikes[0].offered {
		t := (time.Duration(b) * r.spikes[0].bucket).Seconds()
		off = append(off, plotter.XY{X: t, Y: v}, plotter.XY{X: t + r.spikes[0].bucket.Seconds(), Y: v})
	}
	if err := addGuide(p, off, "offered (user requests)"); err != nil {
		return nil, err
	}
	for i, s := range r.spikes {
		var pts plotter.XYs
		for b, v := range s.goodput {
			pts = append(pts, plotter.XY{X: (time.Duration(b)*s.bucket + s.bucket/2).Seconds(), Y: v})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(slices.Index(systems, s.system))
		l.Width = vg.Points(1.5)
		if i == 0 {
			l.Width = vg.Points(2.5)
		}
		p.Add(l)
		p.Legend.Add(s.system, l)
	}
	p.Y.Min = 0
	p.Legend.ThumbnailWidth = vg.Points(20)
	f = filepath.Join(dir, "cpu-spike.png")
	if err := p.Save(9*vg.Inch, 5*vg.Inch, f); err != nil {
		return nil, err
	}
	return append(files, f), nil
}

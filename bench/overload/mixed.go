package main

// The mixed workload: a method that burns CPU beside one that waits on
// the io workload's dependency, on one server; mid-run the dependency
// slows down. A server that gives the slow method every worker, or every
// goroutine, starves the CPU method, whose work has not changed.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The mixed workload's streams, both over one connection.
const (
	mixedBurn = 0 // Burn, the CPU method
	mixedWork = 1 // Work, the I/O method
)

// mixedResult is the mixed workload's outcome.
type mixedResult struct {
	iters       int           // rounds of burn per Burn call, calibrated on the servers' CPU
	cpuWork     time.Duration // what they were calibrated to take
	cpuRate     float64       // Burn calls offered per second
	ioRate      float64       // Work calls offered per second
	fastCap     float64       // the dependency's capacity before the slowdown, calls/s
	slowCap     float64       // and after
	fastService time.Duration
	slowService time.Duration
	settle      time.Duration // the settled window starts this long after the slowdown
	slowLen     time.Duration // the slow phase's measured length
	rows        []mixedRow
	bucket      time.Duration
	slowAt      time.Duration // the slowdown, since the run's start
	timelines   []mixedTimeline
}

// mixedRow is one system's figures for one method.
type mixedRow struct {
	system                string
	stream                int // mixedBurn or mixedWork
	before, slow, settled phaseResult
}

// mixedTimeline is one system's goodput per bucket, by stream, calls/s.
type mixedTimeline struct {
	system  string
	goodput [2][]float64
	peakG   [2]int // before, slow
	burn    time.Duration
}

func runMixed(ctx context.Context, cfg config, exe string, progress io.Writer) (*mixedResult, error) {
	c := cfg.mixed
	iters, err := calibrateBurn(exe, c.cpuWork, cfg.pin, progress)
	if err != nil {
		return nil, err
	}
	fast := cfg.io.service
	slow := time.Duration(float64(fast) * c.slowdown)
	out := &mixedResult{iters: iters, cpuWork: c.cpuWork, cpuRate: c.cpuLoad / c.cpuWork.Seconds(),
		fastCap: cfg.io.capacity(), slowCap: float64(cfg.io.slots) / slow.Seconds(), fastService: fast, slowService: slow,
		settle: time.Duration(c.settle * float64(c.slow)).Round(time.Millisecond), slowLen: c.slow, slowAt: cfg.warmup + c.before}
	// A bucket of at least the slow service time: the dependency's
	// connections, all busy since the slowdown, finish their calls
	// together, once per service time.
	out.bucket = max(cfg.bucket, slow.Round(cfg.bucket))
	out.ioRate = c.ioLoad * out.fastCap
	fmt.Fprintf(progress, "mixed: %d rounds of burn take %v on the servers' CPU; Burn offered %.0f/s, Work %.0f/s\n", iters, c.cpuWork, out.cpuRate, out.ioRate)
	rates := []float64{out.cpuRate, out.ioRate}
	segs := []segment{
		{name: "warmup", rates: rates, dur: cfg.warmup},
		{name: "before", rates: rates, dur: c.before, measured: true},
	}
	if out.settle > 0 {
		segs = append(segs, segment{name: "slow: settling", rates: rates, dur: out.settle, measured: true, service: slow})
	}
	segs = append(segs, segment{name: "slow: settled", rates: rates, dur: c.slow - out.settle, measured: true})
	if out.settle == 0 {
		segs[2].service = slow
	}
	last := len(segs) - 1
	lc := loadConfig{streams: []stream{{method: methodBurn, prio: mixedPriority}, {method: methodWork, prio: mixedPriority}},
		deadline: cfg.deadline, attempts: cfg.attempts, seed: cfg.seed*1000 + 300}
	caps := [2]float64{1 / c.cpuWork.Seconds(), out.fastCap}
	for _, sys := range cfg.systems {
		sc := ioServer(cfg, sys)
		sc.burnIters = iters
		t0 := time.Now()
		res, err := runServer(cfg, exe, sc, 1, segs, progress, openLoop(ctx, segs, lc))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sys, err)
		}
		tl := mixedTimeline{system: sys}
		for s := range 2 {
			keep := func(x uint8) bool { return int(x) == s }
			row := mixedRow{system: sys, stream: s,
				before:  measure(sys, res, segs, 1, 2, keep, caps[s]),
				slow:    measure(sys, res, segs, 2, last+1, keep, caps[s]),
				settled: measure(sys, res, segs, last, last+1, keep, caps[s]),
			}
			row.slow.phase, row.settled.phase = "slow", "slow, settled"
			out.rows = append(out.rows, row)
			tl.goodput[s] = timeline(res, out.bucket, keep)
			for _, p := range []phaseResult{row.before, row.settled} {
				p.phase = mixedStreamName(s) + " " + p.phase
				logRow(progress, p, time.Since(t0))
			}
		}
		if isKiev(sys) && len(res.snaps) > 0 {
			fmt.Fprintf(progress, "[%s] what Work's limit decided (ms since the slowdown): %s\n", sys,
				decisions(res.snaps[len(res.snaps)-1], res.began.Add(out.slowAt)))
		}
		before := measure(sys, res, segs, 1, 2, nil, 1)
		tl.peakG = [2]int{before.peakG, measure(sys, res, segs, 2, last+1, nil, 1).peakG}
		if before.server.BurnRuns > 0 {
			tl.burn = time.Duration(before.server.BurnNanos / int64(before.server.BurnRuns))
		}
		out.timelines = append(out.timelines, tl)
	}
	return out, nil
}

func mixedStreamName(s int) string {
	if s == mixedBurn {
		return "Burn (cpu)"
	}
	return "Work (io)"
}

// mixedHeader is the mixed table's columns; the test reads the table back.
var mixedHeader = []string{"system", "method", "offered/s", "goodput before /s", "goodput slow /s", "goodput settled /s",
	"settled ÷ before", "p99 ok before", "p99 ok settled", "rejected settled", "timed out settled"}

func (r *mixedResult) write(w io.Writer, cfg config, systems []string) []goalRow {
	fmt.Fprintf(w, "\n## mixed: a CPU method beside an I/O method whose dependency slows down\n\n")
	fmt.Fprintf(w, "Burn burns %v of CPU (%d rounds of a loop, calibrated on the servers' CPU), offered at %.0f calls/s, %.0f%% of one CPU; "+
		"Work waits on the io workload's dependency (%d connections, %v each: %.0f calls/s), offered at %.0f calls/s. Both on one connection, priorities as in cpu. "+
		"After a %v warmup and %v measured (before), the dependency slows to %v (%.0f calls/s) for %v (slow); "+
		"settled is the slow phase from %v after the slowdown on, its last %.0f%%.\n\n",
		r.cpuWork, r.iters, r.cpuRate, 100*r.cpuRate*r.cpuWork.Seconds(),
		cfg.io.slots, r.fastService, r.fastCap, r.ioRate,
		cfg.warmup, cfg.mixed.before, r.slowService, r.slowCap, r.slowLen, r.settle, 100*(1-float64(r.settle)/float64(r.slowLen)))
	writeHeader(w, mixedHeader)
	for _, row := range r.rows {
		b, s, st := row.before, row.slow, row.settled
		fmt.Fprintf(w, "| %s | %s | %.0f | %.0f | %.0f | %.0f | %s | %s | %s | %s | %s |\n",
			row.system, mixedStreamName(row.stream), b.offered, b.goodput, s.goodput, st.goodput, num(st.goodput/b.goodput),
			ms(b.p99OK), ms(st.p99OK), pct(st.rejected), pct(st.timedOut))
	}
	fmt.Fprintf(w, "\noffered: attempts started per second before the slowdown, retries included. goodput: replies within the deadline per second, "+
		"before the slowdown, over the whole slow phase, and over its settled part. rejected, timed out: shares of the attempts that ended in the settled part.\n\n")
	fmt.Fprintf(w, "| system | peak goroutines before | peak goroutines slow | Burn's CPU time per call, before |\n|---|---|---|---|\n")
	for _, tl := range r.timelines {
		burn := "—"
		if tl.burn > 0 {
			burn = fmt.Sprintf("%.0f µs", float64(tl.burn)/float64(time.Microsecond))
		}
		fmt.Fprintf(w, "| %s | %d | %d | %s |\n", tl.system, tl.peakG[0], tl.peakG[1], burn)
	}
	fmt.Fprintf(w, "\nBurn's CPU time per call is wall time in its loop, as the server measured it: above the calibrated %v when the loop shared the CPU.\n", r.cpuWork)
	fmt.Fprintf(w, "\n### mixed targets\n\n")
	return writeGoals(w, systems, r.goals())
}

// row returns sys's row for stream s.
func (r *mixedResult) row(sys string, s int) (mixedRow, bool) {
	for _, row := range r.rows {
		if row.system == sys && row.stream == s {
			return row, true
		}
	}
	return mixedRow{}, false
}

// goals are the mixed workload's targets, judged on the settled window.
func (r *mixedResult) goals() []goal {
	return []goal{
		{cell: "Burn (cpu), dependency slow", target: "settled goodput ≥ 0.95 × before's", eval: func(sys string) (string, bool, bool) {
			row, ok := r.row(sys, mixedBurn)
			v := row.settled.goodput / row.before.goodput
			return fmt.Sprintf("%.3f (%.0f/s of %.0f/s)", v, row.settled.goodput, row.before.goodput), v >= 0.95, ok && row.before.goodput > 0
		}},
		{cell: "Work (io), dependency slow", target: fmt.Sprintf("settled goodput ≥ 0.9 × the slowed capacity (%.0f/s)", 0.9*r.slowCap), eval: func(sys string) (string, bool, bool) {
			row, ok := r.row(sys, mixedWork)
			v := row.settled.goodput / r.slowCap
			return fmt.Sprintf("%.3f (%.0f/s)", v, row.settled.goodput), v >= 0.9, ok
		}},
	}
}

// charts draws each method's goodput over time, one panel per method.
func (r *mixedResult) charts(dir string, systems []string) ([]string, error) {
	var plots [][]*plot.Plot
	for s := range 2 {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("mixed: %s goodput per %v; the dependency slows %v → %v at the first dashed line, settled from the second", mixedStreamName(s), r.bucket, r.fastService, r.slowService)
		p.X.Label.Text = "time (s)"
		p.Y.Label.Text = "calls/s"
		p.Legend.Top = true
		p.Add(plotter.NewGrid())
		ymax := 1.0
		for _, tl := range r.timelines {
			for _, v := range tl.goodput[s] {
				ymax = max(ymax, v)
			}
		}
		for _, at := range []time.Duration{r.slowAt, r.slowAt + r.settle} {
			if err := addGuide(p, plotter.XYs{{X: at.Seconds(), Y: 0}, {X: at.Seconds(), Y: ymax * 1.3}}, ""); err != nil {
				return nil, err
			}
		}
		for _, tl := range r.timelines {
			var pts plotter.XYs
			for b, v := range tl.goodput[s] {
				pts = append(pts, plotter.XY{X: (time.Duration(b)*r.bucket + r.bucket/2).Seconds(), Y: v})
			}
			if len(pts) == 0 {
				continue
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return nil, err
			}
			l.Color = plotutil.Color(slices.Index(systems, tl.system))
			l.Width = vg.Points(1.5)
			if tl.system == sysKiev {
				l.Width = vg.Points(2.5)
			}
			p.Add(l)
			p.Legend.Add(tl.system, l)
		}
		p.Y.Min, p.Y.Max = 0, ymax*1.3
		p.Legend.ThumbnailWidth = vg.Points(20)
		plots = append(plots, []*plot.Plot{p})
	}
	img := vgimg.New(9*vg.Inch, 9*vg.Inch)
	dc := draw.New(img)
	canvases := plot.Align(plots, draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Points(12), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	f := filepath.Join(dir, "mixed.png")
	file, err := os.Create(f)
	if err != nil {
		return nil, err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(file); err != nil {
		file.Close()
		return nil, err
	}
	if err := file.Close(); err != nil {
		return nil, err
	}
	return []string{f}, nil
}

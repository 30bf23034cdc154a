package main

// The cold workload: the io workload's surge as a fresh server's first
// load, with no warm-up, beside the same surge after a warm-up; each
// quiet, and noisy (a competing CPU-bound process on the server's CPU
// part of the time, and a front-loaded burst at the start); each cell
// repeated, reporting the minimum and the median of its runs, and the
// goodput of every 100 ms bucket.

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/kievrpc/kiev/shed"
)

const wlCold = "iocold"

// coldConfig is the cold workload's settings.
type coldConfig struct {
	loads    []float64 // ×C
	reps     int
	noise    string        // quiet, noisy or both
	warm     bool          // also the warm cells
	burst    float64       // noisy: the front-loaded burst, × the cell's rate
	burstDur time.Duration // and its length
	duty     time.Duration // noisy: the competing process burns this long, then rests as long
}

// coldCell names one kind of cell: its load, warm or cold, noisy or
// quiet.
type coldCell struct {
	load        float64
	warm, noisy bool
}

func (c coldCell) String() string {
	s := fmt.Sprintf("%gX ", c.load)
	if c.warm {
		s += "warm"
	} else {
		s += "cold"
	}
	if c.noisy {
		return s + ", noisy"
	}
	return s + ", quiet"
}

// coldRun is one run of a cell by one system.
type coldRun struct {
	p       phaseResult
	buckets []float64   // goodput ×C in each 100 ms bucket of the measured cell
	worst   float64     // the least from 100 ms on; NaN if none
	last    serverStats // the server's at the cell's end: the limit's decisions
	depEnds []float64   // the dependency's runs that ended, ×C, by bucket
	depBusy []float64   // the share of its slots' time they were busy, by bucket
	// worstFed is the least share of a bucket the dependency's slots were
	// busy, and worstOfDep the least goodput of a bucket over the runs
	// the dependency ended in it, from the second bucket on: a dip the
	// server caused (slots left idle, or runs that answered no caller in
	// time), apart from one the CPU caused (runs woken late). NaN without
	// the dependency's account.
	worstFed, worstOfDep float64
	start                time.Duration // when the measured cell began, since the run's start
	began                time.Time     // the run's start, wall clock
}

// coldResult is the workload's runs, by cell and system.
type coldResult struct {
	cells []coldCell
	runs  map[coldCell]map[string][]coldRun
	bound int
}

func (c coldConfig) cells() []coldCell {
	var out []coldCell
	for _, load := range c.loads {
		for _, warm := range []bool{false, true} {
			if warm && !c.warm {
				continue
			}
			for _, noisy := range []bool{false, true} {
				if noisy && c.noise == "quiet" || !noisy && c.noise == "noisy" {
					continue
				}
				out = append(out, coldCell{load: load, warm: warm, noisy: noisy})
			}
		}
	}
	return out
}

func runCold(ctx context.Context, cfg config, exe string, progress io.Writer) (*coldResult, error) {
	out := &coldResult{cells: cfg.cold.cells(), runs: map[coldCell]map[string][]coldRun{}, bound: goroutinesPerSlot * cfg.io.slots}
	for rep := range cfg.cold.reps {
		for i, cell := range out.cells {
			for _, sys := range cfg.systems {
				t0 := time.Now()
				run, err := runColdCell(ctx, cfg, exe, sys, cell, cfg.seed*1000+300+uint64(rep*len(out.cells)+i))
				if err != nil {
					return nil, fmt.Errorf("%s, %s, run %d: %w", sys, cell, rep+1, err)
				}
				if out.runs[cell] == nil {
					out.runs[cell] = map[string][]coldRun{}
				}
				out.runs[cell][sys] = append(out.runs[cell][sys], run)
				fmt.Fprintf(progress, "[%s] %s run %d: goodput %.3fX, worst 100ms bucket from 100ms %.3fX, peak goroutines %d, wasted %s  (%v)\n",
					sys, cell, rep+1, run.p.x(run.p.goodput), run.worst, run.p.peakG, pct(run.p.wasted), time.Since(t0).Round(100*time.Millisecond))
			}
		}
	}
	return out, nil
}

// runColdCell runs one cell on a fresh server of sys.
func runColdCell(ctx context.Context, cfg config, exe, sys string, cell coldCell, seed uint64) (coldRun, error) {
	c := cfg.io
	capacity := c.capacity()
	rate := []float64{cell.load * capacity}
	var segs []segment
	if cell.warm {
		segs = append(segs, segment{name: "warmup", load: cell.load, rates: rate, dur: cfg.warmup})
	}
	first := len(segs)
	if cell.noisy && cfg.cold.burst > 0 && cfg.cold.burstDur > 0 {
		segs = append(segs, segment{name: "burst", load: cell.load * cfg.cold.burst, rates: []float64{rate[0] * cfg.cold.burst}, dur: cfg.cold.burstDur, measured: true})
	}
	segs = append(segs, segment{name: cell.String(), load: cell.load, rates: rate, dur: cfg.phase, measured: true})
	lc := loadConfig{streams: []stream{{method: methodWork, prio: mixedPriority}}, deadline: cfg.deadline, attempts: cfg.attempts, seed: seed}
	if cell.noisy {
		stop, err := startNoise(exe, cfg.pin, cfg.cold.duty)
		if err != nil {
			return coldRun{}, err
		}
		defer stop()
	}
	res, err := runServer(cfg, exe, ioServer(cfg, sys), 1, segs, io.Discard, openLoop(ctx, segs, lc))
	if err != nil {
		return coldRun{}, err
	}
	p := measure(sys, res, segs, first, len(segs), nil, capacity)
	p.phase, p.load = cell.String(), cell.load
	run := coldRun{p: p, worst: math.NaN(), start: res.bounds[first], began: res.began}
	if len(res.snaps) > 0 {
		run.last = res.snaps[len(res.snaps)-1]
	}
	from, to := res.bounds[first], res.bounds[len(segs)]
	n := int((to - from) / cfg.bucket) // whole buckets
	counts := make([]int, n)
	for _, a := range res.attempts {
		if a.kind != outOK || a.end < from || a.end >= from+time.Duration(n)*cfg.bucket {
			continue
		}
		counts[(a.end-from)/cfg.bucket]++
	}
	if a := run.last.Dependency; a != nil {
		// The dependency's account, in the same buckets: its runs that
		// ended (×C) and how busy its slots were.
		at := res.began.Add(from).UnixNano() - a.Born
		perTick := int64(cfg.bucket / depTick)
		for i := range n {
			ends, busy := 0, int64(0)
			for j := range perTick {
				if t := (at+int64(i)*int64(cfg.bucket))/int64(depTick) + j; t >= 0 && t < int64(len(a.Ends)) {
					ends += int(a.Ends[t])
					busy += a.Busy[t]
				}
			}
			run.depEnds = append(run.depEnds, float64(ends)/cfg.bucket.Seconds()/capacity)
			run.depBusy = append(run.depBusy, float64(busy)/float64(int64(cfg.io.slots)*int64(cfg.bucket)))
		}
	}
	run.worstFed, run.worstOfDep = math.NaN(), math.NaN()
	for i, k := range counts {
		x := float64(k) / cfg.bucket.Seconds() / capacity
		run.buckets = append(run.buckets, x)
		if i >= 1 && !(run.worst <= x) {
			run.worst = x
		}
		// (The last bucket's runs still in flight at the account are
		// not in it.)
		if i >= 1 && i < min(len(run.depBusy), n-1) {
			run.worstFed = math.Min(nanTo(run.worstFed, 1), math.Min(run.depBusy[i], 1))
			if run.depEnds[i] > 0 {
				run.worstOfDep = math.Min(nanTo(run.worstOfDep, 1), x/run.depEnds[i])
			}
		}
	}
	return run, nil
}

// startNoise starts the competing CPU-bound process, on the server's CPU
// with pin, and returns the function that stops it.
func startNoise(exe string, pin bool, duty time.Duration) (func(), error) {
	cmd := command(exe, []string{"-noise-burn", duty.String()}, pin)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("noise process: %w", err)
	}
	return func() {
		cmd.Process.Kill()
		cmd.Wait()
	}, nil
}

// burnNoise is the noise process: on one thread, it burns the CPU for
// duty, rests as long, and so on until it is killed.
func burnNoise(duty time.Duration) {
	runtime.GOMAXPROCS(1)
	x := 0
	for {
		for t := time.Now(); time.Since(t) < duty; {
			for range 1000 {
				x++
			}
		}
		time.Sleep(duty)
	}
}

// nanTo is x, or v if x is NaN.
func nanTo(x, v float64) float64 {
	if math.IsNaN(x) {
		return v
	}
	return x
}

// fmtRow formats a row of figures with two decimals.
func fmtRow(xs []float64) string {
	var b []string
	for _, x := range xs {
		b = append(b, fmt.Sprintf("%.2f", x))
	}
	return strings.Join(b, " ")
}

// explain is what the run's limit decided, and its Resource's state.
func (c coldRun) explain() string {
	s := decisions(c.last, c.began.Add(c.start))
	if len(c.last.DropsBy) > 0 {
		var d []string
		for _, r := range shed.Reasons() {
			if n := c.last.DropsBy[r.String()]; n > 0 {
				d = append(d, fmt.Sprintf("%s %d", r, n))
			}
		}
		s += "; the scheduler dropped, in the whole run: " + strings.Join(d, ", ")
	}
	if r := c.last.Resource; r != nil {
		s += fmt.Sprintf("; resource at the end: %d of %d in use, %d waiting, hold %v", r.InUse, r.Capacity, r.Waiting, r.Hold.Round(time.Microsecond))
	}
	return s
}

// decisions lists what Work's limit decided, as the server reported it
// in st, in milliseconds since zero.
func decisions(st serverStats, zero time.Time) string {
	if st.Limit == nil {
		return "no decision"
	}
	var b []string
	for _, d := range st.Limit.Decisions {
		b = append(b, fmt.Sprintf("%d ms %s (%s; %d in flight, limit %d)", d.At.Sub(zero).Milliseconds(), d.Rule, d.Signal, d.InFlight, d.Limit))
	}
	if len(b) == 0 {
		return "no decision"
	}
	return strings.Join(b, "; ")
}

// stat returns the minimum and the median of f over runs.
func stat(runs []coldRun, f func(coldRun) float64) (lo, med float64) {
	var v []float64
	for _, r := range runs {
		if x := f(r); !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return math.NaN(), math.NaN()
	}
	slices.Sort(v)
	return v[0], v[len(v)/2]
}

// worstRun returns the run with the least bucket.
func worstRun(runs []coldRun) coldRun {
	w := runs[0]
	for _, r := range runs[1:] {
		if r.worst < w.worst {
			w = r
		}
	}
	return w
}

// coldHeader is the cold table's columns.
var coldHeader = []string{"system", "cell", "runs", "goodput ×C min / median", "worst 100 ms bucket ×C min / median",
	"slots busy, worst bucket min / median", "goodput ÷ the dependency's runs, worst bucket min / median",
	"peak goroutines max / median", "wasted max", "refused median", "p99 ok median"}

func (r *coldResult) write(w io.Writer, cfg config, systems []string) []goalRow {
	fmt.Fprintf(w, "\n## Workload iocold: a surge as the server's first load\n\n")
	fmt.Fprintf(w, "The io workload's dependency (%d connections × %v, C = %.0f calls/s). Each cell is a fresh server and generator; "+
		"a cold cell is surged from its first call, a warm one after %v at the same load. A noisy cell has a competing CPU-bound process "+
		"on the server's CPU (burning %v, resting %v), and starts with a burst at %g× the cell's rate for %v. "+
		"Each cell ran %d times; the targets hold for the minimum. Buckets are %v; the worst counts from the second on. "+
		"The dependency keeps its own account: how busy its slots were in each bucket (a dip the server caused leaves them idle), "+
		"and how many runs ended; goodput over those runs falls when runs answer no caller in time. A CPU the server shares "+
		"wakes the dependency's runs late: its slots stay busy, and fewer runs end.\n\n",
		cfg.io.slots, cfg.io.service, cfg.io.capacity(), cfg.warmup, cfg.cold.duty, cfg.cold.duty, cfg.cold.burst, cfg.cold.burstDur,
		cfg.cold.reps, cfg.bucket)
	writeHeader(w, coldHeader)
	for _, cell := range r.cells {
		for _, sys := range systems {
			runs := r.runs[cell][sys]
			if len(runs) == 0 {
				continue
			}
			gLo, gMed := stat(runs, func(c coldRun) float64 { return c.p.x(c.p.goodput) })
			bLo, bMed := stat(runs, func(c coldRun) float64 { return c.worst })
			fLo, fMed := stat(runs, func(c coldRun) float64 { return c.worstFed })
			dLo, dMed := stat(runs, func(c coldRun) float64 { return c.worstOfDep })
			_, peakMed := stat(runs, func(c coldRun) float64 { return float64(c.p.peakG) })
			peakMax := 0
			wastedMax := 0.0
			for _, c := range runs {
				peakMax = max(peakMax, c.p.peakG)
				if !math.IsNaN(c.p.wasted) {
					wastedMax = max(wastedMax, c.p.wasted)
				}
			}
			_, refMed := stat(runs, func(c coldRun) float64 { return float64(c.p.rejections) })
			_, p99Med := stat(runs, func(c coldRun) float64 { return float64(c.p.p99OK) })
			fmt.Fprintf(w, "| %s | %s | %d | %.3f / %.3f | %.3f / %.3f | %.3f / %.3f | %.3f / %.3f | %d / %.0f | %s | %.0f | %s |\n",
				sys, cell, len(runs), gLo, gMed, bLo, bMed, fLo, fMed, dLo, dMed, peakMax, peakMed, pct(wastedMax), refMed, ms(time.Duration(p99Med)))
		}
	}
	fmt.Fprintf(w, "\nGoodput ×C per %v bucket, the run with the worst bucket:\n\n", cfg.bucket)
	for _, cell := range r.cells {
		for _, sys := range systems {
			if runs := r.runs[cell][sys]; len(runs) > 0 {
				wr := worstRun(runs)
				fmt.Fprintf(w, "- %s, %s: %s\n", sys, cell, fmtRow(wr.buckets))
				if len(wr.depEnds) > 0 {
					fmt.Fprintf(w, "  - the dependency's runs ended ×C: %s\n", fmtRow(wr.depEnds))
					fmt.Fprintf(w, "  - its slots busy: %s\n", fmtRow(wr.depBusy))
				}
			}
		}
	}
	fmt.Fprintf(w, "\nWhat Work's limit decided in those runs (ms since the cell's start; the decisions it keeps, its last):\n\n")
	for _, cell := range r.cells {
		for _, sys := range systems {
			if runs := r.runs[cell][sys]; len(runs) > 0 {
				if wr := worstRun(runs); wr.last.Limit != nil {
					fmt.Fprintf(w, "- %s, %s: %s\n", sys, cell, wr.explain())
				}
			}
		}
	}
	fmt.Fprintln(w)
	return writeGoals(w, systems, r.goals())
}

// goals are the targets for the cold and warm surges, judged on
// the minimum of the runs.
func (r *coldResult) goals() []goal {
	var gs []goal
	for _, cell := range r.cells {
		runs := func(sys string) ([]coldRun, bool) {
			rs := r.runs[cell][sys]
			return rs, len(rs) > 0
		}
		if !cell.warm {
			gs = append(gs, goal{cell: cell.String(), target: "every 100 ms bucket from 100 ms ≥ 0.90 C", eval: func(sys string) (string, bool, bool) {
				rs, ok := runs(sys)
				lo, _ := stat(rs, func(c coldRun) float64 { return c.worst })
				return fmt.Sprintf("%.3f C", lo), lo >= 0.90, ok
			}})
		}
		want := 0.97
		gs = append(gs,
			goal{cell: cell.String(), target: fmt.Sprintf("goodput ≥ %.2f C", want), eval: func(sys string) (string, bool, bool) {
				rs, ok := runs(sys)
				lo, _ := stat(rs, func(c coldRun) float64 { return c.p.x(c.p.goodput) })
				return fmt.Sprintf("%.3f C", lo), lo >= want, ok
			}},
			goal{cell: cell.String(), target: "peak goroutines ≤ 512", eval: func(sys string) (string, bool, bool) {
				rs, ok := runs(sys)
				peak := 0
				for _, c := range rs {
					peak = max(peak, c.p.peakG)
				}
				return fmt.Sprint(peak), peak <= 512, ok
			}})
		if !cell.warm {
			gs = append(gs, goal{cell: cell.String(), target: "wasted work 0", eval: func(sys string) (string, bool, bool) {
				rs, ok := runs(sys)
				wasted := 0.0
				for _, c := range rs {
					if !math.IsNaN(c.p.wasted) {
						wasted = max(wasted, c.p.wasted)
					}
				}
				return pct(wasted), wasted == 0, ok
			}})
		}
	}
	return gs
}

// charts draws, for each system, the goodput of every 100 ms bucket of
// each cell's worst run (the run with the least bucket), against time
// since the cell's start.
func (r *coldResult) charts(dir string, cfg config, systems []string) ([]string, error) {
	var files []string
	for _, sys := range systems {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("iocold, %s: goodput per %v bucket, each cell's worst of its runs", sys, cfg.bucket)
		p.X.Label.Text = "time since the cell's start (s)"
		p.Y.Label.Text = "goodput (×C)"
		p.Legend.Top = true
		p.Add(plotter.NewGrid())
		drawn := 0
		for i, cell := range r.cells {
			runs := r.runs[cell][sys]
			if len(runs) == 0 {
				continue
			}
			var pts plotter.XYs
			for j, x := range worstRun(runs).buckets {
				pts = append(pts, plotter.XY{X: (float64(j) + 0.5) * cfg.bucket.Seconds(), Y: x})
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return nil, err
			}
			l.Color = plotutil.Color(i)
			l.Width = vg.Points(2)
			p.Add(l)
			p.Legend.Add(cell.String(), l)
			drawn++
		}
		if drawn == 0 {
			continue
		}
		p.Y.Min = 0
		f := filepath.Join(dir, "iocold-"+sys+".png")
		if err := p.Save(9*vg.Inch, 5.5*vg.Inch, f); err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

package main

// The io workload: handlers waiting on a dependency of a few connections
// (the CPU stays mostly idle), offered below and beyond its capacity C;
// and many callers in a closed loop on a dependency without a bound.

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// ioCatchUp is how far a slot of the io dependency may catch up on its
// previous run (see slot.hold): enough for the sleep's overshoot and a
// waiter's wake-up, so that a busy connection serves exactly one call per
// service time, and little enough that no call is served much faster
// than the service time.
const ioCatchUp = time.Millisecond

// goroutinesPerSlot bounds, in the io targets, the goroutines of a server
// whose dependency is overloaded: 16 per connection of the dependency
// (1,024 for 64). A server that never refuses holds every call offered
// until its deadline, offered rate × deadline: 6,400 at 2 × C.
const goroutinesPerSlot = 16

// ioResult is the io workload's outcome.
type ioResult struct {
	capacity float64       // C, calls per second
	phases   []phaseResult // the open-loop cells, by load, every system in turn
	closed   []phaseResult // the closed-loop cell, one per system
	slots    int
	service  time.Duration
	callers  int
	sleep    time.Duration
	bound    int // the goroutine bound of the overloaded cells
}

// ioServer is the server of the io workload's open-loop cells, and of
// the mixed workload.
func ioServer(cfg config, sys string) serverConfig {
	return serverConfig{system: sys, slots: cfg.io.slots, service: cfg.io.service, catchUp: min(ioCatchUp, cfg.io.service), shed: cfg.shed}
}

func runIO(ctx context.Context, cfg config, exe string, progress io.Writer) (*ioResult, error) {
	c := cfg.io
	out := &ioResult{capacity: c.capacity(), slots: c.slots, service: c.service, callers: c.callers, sleep: c.sleep, bound: goroutinesPerSlot * c.slots}
	lc := loadConfig{streams: []stream{{method: methodWork, prio: mixedPriority}}, deadline: cfg.deadline, attempts: cfg.attempts}
	for i, load := range c.loads {
		rate := []float64{load * out.capacity}
		segs := []segment{
			{name: "warmup", load: load, rates: rate, dur: cfg.warmup},
			{name: fmt.Sprintf("%gX", load), load: load, rates: rate, dur: cfg.phase, measured: true},
		}
		lc.seed = cfg.seed*1000 + 100 + uint64(i)
		for _, sys := range cfg.systems {
			t0 := time.Now()
			res, err := runServer(cfg, exe, ioServer(cfg, sys), 1, segs, progress, openLoop(ctx, segs, lc))
			if err != nil {
				return nil, fmt.Errorf("%s, %gX: %w", sys, load, err)
			}
			p := measure(sys, res, segs, 1, 2, nil, out.capacity)
			out.phases = append(out.phases, p)
			logRow(progress, p, time.Since(t0))
		}
	}
	if c.callers == 0 {
		return out, nil
	}
	name := fmt.Sprintf("%d callers", c.callers)
	segs := []segment{{name: "warmup", rates: []float64{0}, dur: cfg.warmup}, {name: name, rates: []float64{0}, dur: cfg.phase, measured: true}}
	cc := closedConfig{callers: c.callers, method: methodWork, deadline: cfg.deadline, perCall: c.sleep, seed: cfg.seed*1000 + 200}
	ideal := float64(c.callers) / c.sleep.Seconds()
	for _, sys := range cfg.systems {
		sc := serverConfig{system: sys, slots: 0, service: c.sleep, shed: cfg.shed}
		t0 := time.Now()
		res, err := runServer(cfg, exe, sc, 1, segs, progress, func(cs []caller, snap snapFunc, _ string) (*loadResult, error) {
			return runClosed(ctx, cs[0], segs, cc, snap)
		})
		if err != nil {
			return nil, fmt.Errorf("%s, %s: %w", sys, name, err)
		}
		p := measure(sys, res, segs, 1, 2, nil, ideal)
		out.closed = append(out.closed, p)
		fmt.Fprintf(progress, "[%s] %s: %.0f calls/s (%.2f of %d/%v)  p99 ok %s  refused %d  timed out %s  goroutines %d  (%v)\n",
			sys, name, p.goodput, p.x(p.goodput), c.callers, c.sleep, ms(p.p99OK), p.rejections, pct(p.timedOut), p.peakG, time.Since(t0).Round(100*time.Millisecond))
	}
	return out, nil
}

// row returns sys's row of the cell at load, or of the closed-loop cell
// if load is 0.
func (r *ioResult) row(sys string, load float64) (phaseResult, bool) {
	rows := r.phases
	if load == 0 {
		rows = r.closed
	}
	for _, p := range rows {
		if p.system == sys && (load == 0 || p.load == load) {
			return p, true
		}
	}
	return phaseResult{}, false
}

// ioHeader is the io table's columns; the test reads the table back.
var ioHeader = []string{"system", "cell", "offered ×C", "goodput ×C", "success", "p99 ok", "p99 rejected",
	"rejected", "timed out", "served ×C", "wasted", "peak goroutines"}

// closedHeader is the closed-loop table's columns.
var closedHeader = []string{"system", "cell", "calls/s", "× netrpc", "p99 ok", "refused", "timed out", "errors", "peak goroutines"}

func (r *ioResult) write(w io.Writer, cfg config, systems []string) []goalRow {
	c := cfg.io
	fmt.Fprintf(w, "\n## io: handlers waiting on a dependency\n\n")
	fmt.Fprintf(w, "Work waits for one of the dependency's %d connections, each serving one call at a time for %v: capacity C = %.0f calls/s, "+
		"with the CPU mostly idle. Phases of %v after a %v warmup, open loop, priorities as in cpu.\n\n",
		c.slots, c.service, r.capacity, cfg.phase, cfg.warmup)
	writeHeader(w, ioHeader)
	for _, p := range r.phases {
		fmt.Fprintf(w, "| %s | %s | %.2f | %.3f | %s | %s | %s | %s | %s | %.2f | %s | %d |\n",
			p.system, p.phase, p.x(p.offered), p.x(p.goodput), pct(p.success), ms(p.p99OK), ms(p.p99Rej),
			pct(p.rejected), pct(p.timedOut), p.x(p.served), pct(p.wasted), p.peakG)
	}
	fmt.Fprintf(w, "\nAs in cpu, ×C instead of ×X; success: share of the user requests arriving in the phase that got a reply within the deadline.\n")
	if len(r.closed) > 0 {
		fmt.Fprintf(w, "\n%d callers in a closed loop, each calling again as soon as its reply arrives, on one connection; "+
			"every call waits %v on a dependency without a bound (a plain sleep), so the handlers alone could serve %.0f calls/s. "+
			"%v measured after a %v warmup; a call's deadline is %v and it is not retried.\n\n",
			r.callers, r.sleep, float64(r.callers)/r.sleep.Seconds(), cfg.phase, cfg.warmup, cfg.deadline)
		writeHeader(w, closedHeader)
		ref, haveRef := r.row(sysNetRPC, 0)
		for _, p := range r.closed {
			rel := "—"
			if haveRef && ref.goodput > 0 {
				rel = fmt.Sprintf("%.2f", p.goodput/ref.goodput)
			}
			fmt.Fprintf(w, "| %s | %s | %.0f | %s | %s | %d | %s | %d | %d |\n",
				p.system, p.phase, p.goodput, rel, ms(p.p99OK), p.rejections, pct(p.timedOut), p.errors, p.peakG)
		}
	}
	all := append(append([]phaseResult(nil), r.phases...), r.closed...)
	writeLagging(w, r.phases)
	writeDrops(w, all)
	writeRejectionLatency(w, r.phases)
	fmt.Fprintf(w, "\n### io targets\n\n")
	return writeGoals(w, systems, r.goals(cfg))
}

// goals are the io workload's targets: below capacity and in the closed
// loop, what net/rpc does and no refusal; beyond it, the dependency kept
// busy, quick refusals and bounded goroutines.
func (r *ioResult) goals(cfg config) []goal {
	var gs []goal
	relative := func(cell string, load float64) goal {
		return goal{cell: cell, target: "goodput ≥ 0.95 × netrpc's, 0 refused", eval: func(sys string) (string, bool, bool) {
			p, ok := r.row(sys, load)
			ref, refOK := r.row(sysNetRPC, load)
			if !ok || !refOK || ref.goodput <= 0 {
				return "", false, false
			}
			rel := p.goodput / ref.goodput
			return fmt.Sprintf("%.2f× netrpc, %d refused", rel, p.rejections), rel >= 0.95 && p.rejections == 0, true
		}}
	}
	for _, load := range cfg.io.loads {
		cell := fmt.Sprintf("%gX", load)
		if load < 1 {
			gs = append(gs, relative(cell, load))
			continue
		}
		gs = append(gs,
			goal{cell: cell, target: "goodput ≥ 0.90 C", eval: func(sys string) (string, bool, bool) {
				p, ok := r.row(sys, load)
				return fmt.Sprintf("%.3f C", p.x(p.goodput)), p.x(p.goodput) >= 0.90, ok
			}},
			goal{cell: cell, target: "p99 of refusals ≤ 5 ms", eval: func(sys string) (string, bool, bool) {
				p, ok := r.row(sys, load)
				if p.p99Rej < 0 {
					return "no refusals", true, ok
				}
				return ms(p.p99Rej), p.p99Rej <= 5*time.Millisecond, ok
			}},
			goal{cell: cell, target: fmt.Sprintf("peak goroutines ≤ %d", r.bound), eval: func(sys string) (string, bool, bool) {
				p, ok := r.row(sys, load)
				return fmt.Sprint(p.peakG), p.peakG <= r.bound, ok
			}})
	}
	if len(r.closed) > 0 {
		gs = append(gs, relative(fmt.Sprintf("%d callers", r.callers), 0))
	}
	return gs
}

// charts draws goodput against offered load, and the peak goroutines.
func (r *ioResult) charts(dir string, systems []string) ([]string, error) {
	f := filepath.Join(dir, "io-goodput.png")
	title := fmt.Sprintf("io: goodput against offered load (C = %.0f calls/s: %d connections, %v each)", r.capacity, r.slots, r.service)
	if err := goodputChart(f, title, "C", r.phases, systems); err != nil {
		return nil, err
	}
	files := []string{f}

	p := plot.New()
	p.Title.Text = "io: the server's peak goroutines against the load asked"
	p.X.Label.Text = "user load asked, retries not included (×C)"
	p.Y.Label.Text = "peak goroutines of the server process"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	for i, sys := range systems {
		var pts plotter.XYs
		for _, ph := range r.phases {
			if ph.system == sys {
				pts = append(pts, plotter.XY{X: ph.load, Y: float64(max(ph.peakG, 1))})
			}
		}
		if len(pts) == 0 {
			continue
		}
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		l.Color, s.Color = plotutil.Color(i), plotutil.Color(i)
		l.Width = vg.Points(2)
		s.Shape = plotutil.Shape(i)
		p.Add(l, s)
		p.Legend.Add(sys, l, s)
	}
	p.X.Min = 0
	f = filepath.Join(dir, "io-goroutines.png")
	if err := p.Save(9*vg.Inch, 5.5*vg.Inch, f); err != nil {
		return nil, err
	}
	return append(files, f), nil
}

package main

// The neighbour workload: on the cpu workload's handler, honest clients
// each offer a little less than their share of the capacity, each on a
// connection of its own, while one more client floods. A server fair
// between its connections serves the honest ones in full.

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/kievrpc/kiev"
)

// neighbourResult is the neighbour workload's outcome.
type neighbourResult struct {
	capacity   float64 // X
	clients    int     // honest ones
	share      float64 // X / (clients+1), calls/s
	honestRate float64 // each honest client's, calls/s
	floodRate  float64
	rows       []neighbourRow
}

// neighbourRow is one system's figures.
type neighbourRow struct {
	system               string
	honest, flooder, all phaseResult
	worst                float64 // the lowest success of one honest client
}

func runNeighbour(ctx context.Context, cfg config, exe string, progress io.Writer) (*neighbourResult, error) {
	c := cfg.neighbour
	x := cfg.cpu.capacity()
	out := &neighbourResult{capacity: x, clients: c.clients, share: x / float64(c.clients+1)}
	out.honestRate, out.floodRate = c.load*out.share, c.flood*out.share
	// Every call has the default priority: the flooder is no more and no
	// less important than the others, so only fairness between
	// connections can protect them.
	prio := int(kiev.DefaultPriority)
	var streams []stream
	var rates []float64
	for i := range c.clients + 1 {
		streams = append(streams, stream{conn: i, method: methodWork, prio: prio})
		rates = append(rates, out.honestRate)
	}
	rates[c.clients] = out.floodRate
	load := (float64(c.clients)*out.honestRate + out.floodRate) / x
	segs := []segment{
		{name: "warmup", load: load, rates: rates, dur: cfg.warmup},
		{name: "flood", load: load, rates: rates, dur: cfg.phase, measured: true},
	}
	lc := loadConfig{streams: streams, deadline: cfg.deadline, attempts: cfg.attempts, seed: cfg.seed*1000 + 400}
	flooder := uint8(c.clients)
	for _, sys := range cfg.systems {
		t0 := time.Now()
		res, err := runServer(cfg, exe, cpuServer(cfg, sys), c.clients+1, segs, progress, openLoop(ctx, segs, lc))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sys, err)
		}
		row := neighbourRow{system: sys,
			honest:  measure(sys, res, segs, 1, 2, func(s uint8) bool { return s != flooder }, x),
			flooder: measure(sys, res, segs, 1, 2, func(s uint8) bool { return s == flooder }, x),
			all:     measure(sys, res, segs, 1, 2, nil, x),
			worst:   math.Inf(1),
		}
		for i := range uint8(c.clients) {
			one := measure(sys, res, segs, 1, 2, func(s uint8) bool { return s == i }, x)
			row.worst = min(row.worst, one.success)
		}
		out.rows = append(out.rows, row)
		row.honest.phase, row.flooder.phase = fmt.Sprintf("%d honest", c.clients), "flooder"
		logRow(progress, row.honest, time.Since(t0))
		logRow(progress, row.flooder, time.Since(t0))
	}
	return out, nil
}

// neighbourHeader is the neighbour table's columns; the test reads the
// table back.
var neighbourHeader = []string{"system", "honest success", "worst honest client", "honest goodput ×X", "honest p99 ok",
	"flooder offered ×X", "flooder goodput ×X", "flooder rejected", "flooder timed out", "goodput ×X", "peak goroutines"}

func (r *neighbourResult) write(w io.Writer, cfg config, systems []string) []goalRow {
	fmt.Fprintf(w, "\n## neighbour: one client floods, %d stay within their share\n\n", r.clients)
	fmt.Fprintf(w, "The cpu workload's handler (X = %.0f calls/s) on %d client connections, one client each: share = X/%d = %.0f calls/s. "+
		"%d honest clients each offer %.1f of their share (%.0f calls/s), one flooder %.0f× its share (%.0f calls/s), "+
		"every call at the default priority. %v measured after a %v warmup.\n\n",
		r.capacity, r.clients+1, r.clients+1, r.share, r.clients, cfg.neighbour.load, r.honestRate, cfg.neighbour.flood, r.floodRate, cfg.phase, cfg.warmup)
	writeHeader(w, neighbourHeader)
	for _, row := range r.rows {
		h, f := row.honest, row.flooder
		fmt.Fprintf(w, "| %s | %s | %s | %.3f | %s | %.2f | %.3f | %s | %s | %.3f | %d |\n",
			row.system, pct(h.success), pct(row.worst), h.x(h.goodput), ms(h.p99OK),
			f.x(f.offered), f.x(f.goodput), pct(f.rejected), pct(f.timedOut), row.all.x(row.all.goodput), row.all.peakG)
	}
	fmt.Fprintf(w, "\nhonest success: share of the honest clients' user requests arriving in the phase that got a reply within the deadline, "+
		"in up to %d attempts; worst honest client: the lowest of one client's. offered, goodput: attempts started / replies within the deadline per second, ×X. "+
		"rejected, timed out: shares of the flooder's attempts.\n", cfg.attempts)
	all := make([]phaseResult, 0, len(r.rows))
	for _, row := range r.rows {
		p := row.all
		p.phase = "flood"
		all = append(all, p)
	}
	writeDrops(w, all)
	fmt.Fprintf(w, "\n### neighbour targets\n\n")
	return writeGoals(w, systems, []goal{{cell: "flood", target: fmt.Sprintf("the %d honest clients' success ≥ 99%%", r.clients), eval: func(sys string) (string, bool, bool) {
		for _, row := range r.rows {
			if row.system == sys {
				return fmt.Sprintf("%s (flooder: %.3fX)", pct(row.honest.success), row.flooder.x(row.flooder.goodput)), row.honest.success >= 0.99, true
			}
		}
		return "", false, false
	}}})
}

// charts draws, per system, the honest clients' and the flooder's
// goodput.
func (r *neighbourResult) charts(dir string, systems []string) ([]string, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("neighbour: %d honest clients within their share beside a flooder (X = %.0f calls/s)", r.clients, r.capacity)
	p.Y.Label.Text = "goodput (×X)"
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	var names []string
	var honest, flood plotter.Values
	for _, sys := range systems {
		for _, row := range r.rows {
			if row.system == sys {
				names = append(names, sys)
				honest = append(honest, row.honest.x(row.honest.goodput))
				flood = append(flood, row.flooder.x(row.flooder.goodput))
			}
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	w := vg.Points(24)
	hb, err := plotter.NewBarChart(honest, w)
	if err != nil {
		return nil, err
	}
	hb.Color, hb.Offset = plotutil.Color(0), -w/2
	fb, err := plotter.NewBarChart(flood, w)
	if err != nil {
		return nil, err
	}
	fb.Color, fb.Offset = plotutil.Color(1), w/2
	p.Add(hb, fb)
	p.Legend.Add(fmt.Sprintf("%d honest clients", r.clients), hb)
	p.Legend.Add("flooder", fb)
	want := float64(r.clients) * r.honestRate / r.capacity
	if err := addGuide(p, plotter.XYs{{X: -0.5, Y: want}, {X: float64(len(names)) - 0.5, Y: want}}, "honest clients' offer"); err != nil {
		return nil, err
	}
	p.NominalX(names...)
	p.Y.Min, p.Y.Max = 0, 1.4
	f := filepath.Join(dir, "neighbour.png")
	if err := p.Save(9*vg.Inch, 5*vg.Inch, f); err != nil {
		return nil, err
	}
	return []string{f}, nil
}

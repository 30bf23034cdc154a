package main

// The Markdown report: a section per workload, each with its table of
// targets, then a summary of kiev's; and the charts.

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/kievrpc/kiev/shed"
)

// report is the outcome of a whole benchmark run.
type report struct {
	cfg       config
	kiev      string // which kiev code was measured
	cpu       *cpuResult
	io        *ioResult
	mixed     *mixedResult
	neighbour *neighbourResult
	cold      *coldResult
}

// goal is one target of a workload: the cell it is judged on, what it
// asks, and how to judge a system there: its value, whether it meets the
// target, and whether it applies at all (the system ran the cell).
type goal struct {
	cell, target string
	eval         func(sys string) (value string, pass, ok bool)
}

// goalRow is a goal judged for every system.
type goalRow struct {
	cell, target string
	values       []string // by system, as given to writeGoals
	kievPass     bool
	kievOK       bool // kiev ran the cell
}

// writeGoals prints a workload's goals as a table: every system's value,
// and whether kiev as a user gets it (no shed options) meets the target.
// It returns the rows, for the summary.
func writeGoals(w io.Writer, systems []string, gs []goal) []goalRow {
	fmt.Fprintf(w, "| cell | target | %s | kiev passes |\n|---|---|%s---|\n", strings.Join(systems, " | "), strings.Repeat("---|", len(systems)))
	var rows []goalRow
	for _, g := range gs {
		row := goalRow{cell: g.cell, target: g.target}
		for _, sys := range systems {
			v, pass, ok := g.eval(sys)
			if !ok {
				v = "n/a"
			}
			row.values = append(row.values, v)
			if sys == sysKiev {
				row.kievPass, row.kievOK = pass, ok
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", g.cell, g.target, strings.Join(row.values, " | "), row.verdict())
		rows = append(rows, row)
	}
	return rows
}

func (r goalRow) verdict() string {
	switch {
	case !r.kievOK:
		return "n/a"
	case r.kievPass:
		return "PASS"
	}
	return "**FAIL**"
}

// write prints the report as Markdown.
func (r *report) write(w io.Writer) {
	c := r.cfg
	fmt.Fprintf(w, "# Overload benchmark\n\n")
	fmt.Fprintf(w, "kiev measured: %s. Workloads: %s. Systems: %s.\n\n", r.kiev, strings.Join(c.workloads, ", "), strings.Join(c.systems, ", "))
	fmt.Fprintf(w, "- kiev: kiev.NewServer() with no shed options at all, what a user gets;\n"+
		"- kiev-fixed: kiev.WithShed(shed.Options{Workers: %d, QueueSize: %d, MaxWait: %v}), a fixed pool;\n"+
		"- kiev-noshed: kiev.WithShed(shed.Options{Disabled: true}), a goroutine per call;\n"+
		"- kiev-resource (if asked for): kiev as a user gets it, its Work handler acquiring the dependency's connections as a shed.Resource;\n"+
		"- netrpc: the standard library's net/rpc with gob; grpc: grpc-go with protobuf.\n\n",
		c.shed.Workers, c.shed.QueueSize, c.shed.MaxWait)
	pin := "not pinned to CPUs (no -pin)"
	if c.pin {
		pin = "pinned to the last CPU, the load generator to the others (-pin)"
	}
	fmt.Fprintf(w, "Every cell runs on a fresh server process, %s, the systems taking turns cell by cell, "+
		"under open-loop Poisson arrivals except where it says closed loop. Deadline %v per attempt, %d attempts in all per user request, "+
		"retried on timeout only; kiev client: %s.\n\n",
		pin, c.deadline, c.attempts, kievClientText(c.bareKiev))
	type section struct {
		name string
		rows []goalRow
	}
	var sections []section
	if r.cpu != nil {
		sections = append(sections, section{wlCPU, r.cpu.write(w, c, c.systems)})
	}
	if r.io != nil {
		sections = append(sections, section{wlIO, r.io.write(w, c, c.systems)})
	}
	if r.mixed != nil {
		sections = append(sections, section{wlMixed, r.mixed.write(w, c, c.systems)})
	}
	if r.neighbour != nil {
		sections = append(sections, section{wlNeighbour, r.neighbour.write(w, c, c.systems)})
	}
	if r.cold != nil {
		sections = append(sections, section{wlCold, r.cold.write(w, c, c.systems)})
	}

	fmt.Fprintf(w, "\n## Summary: kiev as a user gets it, against every target\n\n")
	if !slices.Contains(c.systems, sysKiev) {
		fmt.Fprintf(w, "kiev did not run.\n")
		return
	}
	fmt.Fprintf(w, "| workload | targets judged | PASS | FAIL | failed |\n|---|---|---|---|---|\n")
	total, passed := 0, 0
	for _, s := range sections {
		n, p := 0, 0
		var failed []string
		for _, row := range s.rows {
			if !row.kievOK {
				continue
			}
			n++
			if row.kievPass {
				p++
			} else {
				failed = append(failed, row.cell+": "+row.target)
			}
		}
		list := "—"
		if len(failed) > 0 {
			list = strings.Join(failed, "; ")
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %s |\n", s.name, n, p, n-p, list)
		total, passed = total+n, passed+p
	}
	if passed == total {
		fmt.Fprintf(w, "\nkiev: all %d targets PASS\n", total)
	} else {
		fmt.Fprintf(w, "\nkiev: %d of %d targets PASS\n", passed, total)
	}
}

func kievClientText(bare bool) string {
	if bare {
		return "bare (no retries of refused calls, no adaptive throttling)"
	}
	return "default (retry budget and adaptive throttling on)"
}

// lagWarn is the generator lag above which the report warns that the
// offered load was not what was asked.
const lagWarn = 10 * time.Millisecond

// writeLagging warns of the rows where the generator fell behind.
func writeLagging(w io.Writer, rows []phaseResult) {
	var lagging []string
	for _, p := range rows {
		if p.lag > lagWarn {
			lagging = append(lagging, fmt.Sprintf("%s %s (p99 %v)", p.system, p.phase, p.lag.Round(time.Millisecond)))
		}
	}
	if len(lagging) > 0 {
		fmt.Fprintf(w, "\nThe load generator fell behind its schedule by more than %v (CPU-bound; the offered load there is lower than asked): %s.\n",
			lagWarn, strings.Join(lagging, ", "))
	}
}

// writeDrops prints why the kiev scheduler dropped calls, per row, as
// fractions of the requests the server received.
func writeDrops(w io.Writer, rows []phaseResult) {
	var reasons []string
	for _, x := range shed.Reasons() {
		reasons = append(reasons, x.String())
	}
	header := false
	for _, p := range rows {
		if !p.hasServer || p.server.DropsBy == nil || p.server.Dropped == 0 {
			continue
		}
		if !header {
			fmt.Fprintf(w, "\n#### Calls the kiev scheduler dropped without running, by reason (share of requests received)\n\n")
			fmt.Fprintf(w, "| system | phase | %s |\n|---|---|%s\n", strings.Join(reasons, " | "), strings.Repeat("---|", len(reasons)))
			header = true
		}
		fmt.Fprintf(w, "| %s | %s |", p.system, p.phase)
		for _, x := range reasons {
			fmt.Fprintf(w, " %s |", pct(ratio(int(p.server.DropsBy[x]), int(p.server.Received))))
		}
		fmt.Fprintln(w)
	}
}

// writeRejectionLatency prints the spread of rejection latencies, which
// a p99 alone does not show: how many refusals are immediate, and how
// slow the slowest are.
func writeRejectionLatency(w io.Writer, rows []phaseResult) {
	header := false
	for _, p := range rows {
		if p.rejPcts[0] < 0 {
			continue
		}
		if !header {
			fmt.Fprintf(w, "\n#### Latency of rejections\n\nAs the load generator measures them (send to answer); the server's share: how long the refused calls waited in kiev's queue before their answer (p99, from the scheduler's histogram); and the machine's floor: the round trip of a %d-byte raw-TCP ping between the same two processes during the same phase (%d pings a second, one at a time), which no RPC's answer can beat.\n\n| system | phase | p50 | p90 | p99 | p99.9 | p99 queue wait in the server | raw-TCP round trip p50 / p99 |\n|---|---|---|---|---|---|---|---|\n", probeSize, probeRate)
			header = true
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s / %s |\n", p.system, p.phase, ms(p.rejPcts[0]), ms(p.rejPcts[1]), ms(p.p99Rej), ms(p.rejPcts[2]), queueWaitP99(p.server.DropWait), ms(p.floor[0]), ms(p.floor[1]))
	}
}

// writeHeader prints the header of a Markdown table with columns h.
func writeHeader(w io.Writer, h []string) {
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(h, " | "), strings.Repeat("---|", len(h)))
}

func pct(f float64) string {
	if math.IsNaN(f) {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}

func num(f float64) string {
	if math.IsNaN(f) {
		return "—"
	}
	return fmt.Sprintf("%.2f", f)
}

func ms(d time.Duration) string {
	if d < 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// charts draws every workload's charts into dir and returns the files.
func (r *report) charts(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, draw := range []func() ([]string, error){
		func() ([]string, error) {
			if r.cpu == nil {
				return nil, nil
			}
			return r.cpu.charts(dir, r.cfg, r.cfg.systems)
		},
		func() ([]string, error) {
			if r.io == nil {
				return nil, nil
			}
			return r.io.charts(dir, r.cfg.systems)
		},
		func() ([]string, error) {
			if r.mixed == nil {
				return nil, nil
			}
			return r.mixed.charts(dir, r.cfg.systems)
		},
		func() ([]string, error) {
			if r.neighbour == nil {
				return nil, nil
			}
			return r.neighbour.charts(dir, r.cfg.systems)
		},
		func() ([]string, error) {
			if r.cold == nil {
				return nil, nil
			}
			return r.cold.charts(dir, r.cfg, r.cfg.systems)
		},
	} {
		fs, err := draw()
		if err != nil {
			return nil, err
		}
		files = append(files, fs...)
	}
	return files, nil
}

// goodputChart draws goodput against offered load, both as multiples of
// the rows' capacity (unit names it), one line per system, to file.
func goodputChart(file, title, unit string, rows []phaseResult, systems []string) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "offered load, retries included (×" + unit + ")"
	p.Y.Label.Text = "goodput: replies within the deadline (×" + unit + ")"
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	maxX := 1.0
	for _, ph := range rows {
		maxX = max(maxX, ph.x(ph.offered))
	}
	if err := addGuide(p, plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}, {X: maxX, Y: 1}}, "ideal"); err != nil {
		return err
	}
	for i, sys := range systems {
		var pts plotter.XYs
		for _, ph := range rows {
			if ph.system == sys {
				pts = append(pts, plotter.XY{X: ph.x(ph.offered), Y: ph.x(ph.goodput)})
			}
		}
		if len(pts) == 0 {
			continue
		}
		slices.SortFunc(pts, func(a, b plotter.XY) int { return int(math.Copysign(1, a.X-b.X)) })
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		l.Color, s.Color = plotutil.Color(i), plotutil.Color(i)
		l.Width = vg.Points(2)
		s.Shape = plotutil.Shape(i)
		p.Add(l, s)
		p.Legend.Add(sys, l, s)
	}
	p.Y.Min = 0
	p.Y.Max = 1.55 // room for the legend above the lines
	p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 0, Label: "0"}, {Value: 0.25}, {Value: 0.5, Label: "0.5"},
		{Value: 0.75}, {Value: 1, Label: "1"}, {Value: 1.25}})
	p.X.Min = 0
	return p.Save(9*vg.Inch, 5.5*vg.Inch, file)
}

// addGuide draws xys on p as a dashed gray reference line (the offered
// load, the ideal, a moment), named label in the legend unless empty.
func addGuide(p *plot.Plot, xys plotter.XYs, label string) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	l.Color = color.Gray{Y: 100}
	p.Add(l)
	if label != "" {
		p.Legend.Add(label, l)
	}
	return nil
}

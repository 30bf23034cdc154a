package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/kievrpc/kiev/bench/internal/loadgen"
)

// cellKey names a cell across its repeats.
type cellKey struct {
	kind    string
	system  string
	payload string
	callers int
	load    int
}

// report holds every result of a run.
type report struct {
	cfg     config
	started time.Time
	took    time.Duration
	results map[cellKey][]loadgen.Result
	pinNote string
}

func keyOf(c cell) cellKey {
	return cellKey{kind: c.kind, system: c.spec.System, payload: c.spec.Payload, callers: c.spec.Callers, load: c.load}
}

func (r *report) add(c cell, res loadgen.Result) {
	r.results[keyOf(c)] = append(r.results[keyOf(c)], res)
}

// stat is a cell's results summed up over its repeats: medians, and the
// range of the throughput.
type stat struct {
	n                 int
	qps, qpsMin       float64
	qpsMax            float64
	p50, p99, p999    time.Duration
	lag               time.Duration
	cAllocs, sAllocs  float64
	cBytes, sBytes    float64
	cpuClient, cpuSrv time.Duration
	wire              float64 // bytes on the wire per call, both ways; 0 if not counted
	errors            uint64
	firstErr          string
	offered           float64
}

func median[T int | float64 | time.Duration](v []T) T {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (r *report) stat(k cellKey) (stat, bool) {
	rs := r.results[k]
	if len(rs) == 0 {
		return stat{}, false
	}
	var qps, ca, sa, cb, sb, off, wire []float64
	var p50, p99, p999, lag, cc, scpu []time.Duration
	s := stat{n: len(rs), qpsMin: math.Inf(1)}
	for _, x := range rs {
		q := x.QPS()
		qps = append(qps, q)
		s.qpsMin, s.qpsMax = min(s.qpsMin, q), max(s.qpsMax, q)
		p50, p99, p999, lag = append(p50, x.P50), append(p99, x.P99), append(p999, x.P999), append(lag, x.GenLagP99)
		ca, sa = append(ca, x.PerCall(x.Client.Allocs)), append(sa, x.PerCall(x.Server.Allocs))
		cb, sb = append(cb, x.PerCall(x.Client.Bytes)), append(sb, x.PerCall(x.Server.Bytes))
		cc = append(cc, time.Duration(x.PerCall(uint64(x.Client.CPU))))
		scpu = append(scpu, time.Duration(x.PerCall(uint64(x.Server.CPU))))
		off = append(off, x.Spec.Rate)
		wire = append(wire, x.PerCall(x.WireBytes))
		s.errors += x.Errors
		if s.firstErr == "" {
			s.firstErr = x.FirstErr
		}
	}
	s.qps, s.p50, s.p99, s.p999, s.lag = median(qps), median(p50), median(p99), median(p999), median(lag)
	s.cAllocs, s.sAllocs, s.cBytes, s.sBytes = median(ca), median(sa), median(cb), median(sb)
	s.cpuClient, s.cpuSrv, s.offered = median(cc), median(scpu), median(off)
	s.wire = median(wire)
	return s, true
}

// maxQPS is a system's highest median closed-loop throughput on payload,
// over every concurrency.
func (r *report) maxQPS(system, payload string) float64 {
	best := 0.0
	for _, n := range r.cfg.callers {
		if s, ok := r.stat(cellKey{kind: kindClosed, system: system, payload: payload, callers: n}); ok {
			best = max(best, s.qps)
		}
	}
	return best
}

func (r *report) write(w io.Writer, charts []string) {
	cfg := r.cfg
	fmt.Fprintf(w, "## kiev beside net/rpc, grpc-go and raw TCP\n\n")
	fmt.Fprintf(w, "%s, %d CPUs, %s, %s/%s, %s; %s. Server and client in separate processes on loopback; "+
		"closed-loop windows of %v after %v of warm-up, open-loop windows of %v; %d repeats with the systems interleaved; "+
		"medians, with the throughput's min–max. Run in %s.\n\n",
		cpuModel(), runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH, gcSetting(os.Getenv),
		r.started.UTC().Format("2006-01-02"),
		cfg.duration, cfg.warmup, cfg.openDuration, cfg.repeats, r.took.Round(time.Second))
	r.writeTargets(w)
	r.writeFloor(w)
	r.writeCompression(w)
	r.writeRatios(w)
	for _, p := range cfg.payloads {
		fmt.Fprintf(w, "### Closed loop, %s payload\n\n", payloadText(p))
		fmt.Fprintln(w, "| system | callers | calls/s (min–max) | p50 | p99 | p99.9 | allocs/call client / server | B/call client / server | CPU µs/call client + server | wire B/call |")
		fmt.Fprintln(w, "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
		for _, sys := range cfg.systems {
			for _, n := range cfg.callers {
				s, ok := r.stat(cellKey{kind: kindClosed, system: sys, payload: p, callers: n})
				if !ok {
					continue
				}
				fmt.Fprintf(w, "| %s | %d | %s (%s–%s)%s | %s | %s | %s | %.1f / %.1f | %.0f / %.0f | %.1f + %.1f | %s |\n",
					sys, n, num(s.qps), num(s.qpsMin), num(s.qpsMax), errText(s), lat(s.p50), lat(s.p99), lat(s.p999),
					s.cAllocs, s.sAllocs, s.cBytes, s.sBytes, us(s.cpuClient), us(s.cpuSrv), wireText(s.wire))
			}
		}
		fmt.Fprintln(w)
	}
	for _, p := range cfg.openPayloads {
		fmt.Fprintf(w, "### Open loop, %s payload: Poisson arrivals at a fraction of each system's own maximum\n\n", payloadText(p))
		fmt.Fprintln(w, "Latency counts from each call's due time, so a stall delays every call due during it. "+
			"*gen lag* is how late the load generator itself started calls (p99): the floor under every figure of its row.")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| system | load | offered calls/s | achieved calls/s | p50 | p99 | p99.9 | gen lag |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
		for _, sys := range cfg.systems {
			for _, l := range cfg.loads {
				s, ok := r.stat(cellKey{kind: kindOpen, system: sys, payload: p, load: l})
				if !ok {
					continue
				}
				fmt.Fprintf(w, "| %s | %d%% | %s | %s%s | %s | %s | %s | %s |\n",
					sys, l, num(s.offered), num(s.qps), errText(s), lat(s.p50), lat(s.p99), lat(s.p999), lat(s.lag))
			}
		}
		fmt.Fprintln(w)
	}
	if cfg.pinned {
		fmt.Fprintf(w, "### Pinned: one core each (GOMAXPROCS=1, taskset), small payload, %d callers\n\n", cfg.pinCallers)
		if r.pinNote != "" {
			fmt.Fprintf(w, "%s\n\n", r.pinNote)
		} else {
			fmt.Fprintln(w, "| system | calls/s (min–max) | p50 | p99 | p99.9 | CPU µs/call client + server |")
			fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|")
			for _, sys := range cfg.systems {
				s, ok := r.stat(cellKey{kind: kindPinned, system: sys, payload: paySmall, callers: cfg.pinCallers})
				if !ok {
					continue
				}
				fmt.Fprintf(w, "| %s | %s (%s–%s)%s | %s | %s | %s | %.1f + %.1f |\n",
					sys, num(s.qps), num(s.qpsMin), num(s.qpsMax), errText(s), lat(s.p50), lat(s.p99), lat(s.p999), us(s.cpuClient), us(s.cpuSrv))
			}
			fmt.Fprintln(w)
		}
	}
	if len(charts) > 0 {
		fmt.Fprintln(w, "### Charts")
		fmt.Fprintln(w)
		for _, f := range charts {
			fmt.Fprintf(w, "![%s](%s)\n", strings.TrimSuffix(filepath.Base(f), ".png"), filepath.Base(f))
		}
		fmt.Fprintln(w)
	}
}

// target is one of the suite's targets, measured.
type target struct {
	name, measured, want string
	ok                   bool
	missing              bool
}

func (r *report) targets() []target {
	var out []target
	closed := func(sys, p string, n int) (stat, bool) {
		return r.stat(cellKey{kind: kindClosed, system: sys, payload: p, callers: n})
	}
	kievs := intersect([]string{sysKievMsgpack, sysKievProtobuf}, r.cfg.systems)
	ratio := func(name string, a, b float64, want float64, unit string) target {
		t := target{name: name, want: fmt.Sprintf("≥ %.2g×%s", want, unit)}
		if a <= 0 || b <= 0 {
			t.missing = true
			return t
		}
		t.measured = fmt.Sprintf("%.2f×", a/b)
		t.ok = a/b >= want
		return t
	}
	for _, k := range kievs {
		ks, _ := closed(k, paySmall, 128)
		ns, _ := closed(sysNetRPC, paySmall, 128)
		gs, _ := closed(sysGRPC, paySmall, 128)
		rs, _ := closed(sysRaw, paySmall, 128)
		out = append(out,
			ratio(k+" vs net/rpc, small, 128 callers (calls/s)", ks.qps, ns.qps, 2, ""),
			ratio(k+" vs grpc (one connection), small, 128 callers (calls/s)", ks.qps, gs.qps, 3, ""),
			ratio(k+" vs raw TCP, small, 128 callers (calls/s)", ks.qps, rs.qps, 0.4, ""),
		)
		k16, r16 := r.maxQPS(k, pay16K), r.maxQPS(sysRaw, pay16K)
		out = append(out, ratio(k+" vs raw TCP, 16 KiB, best concurrency (bytes/s)", k16, r16, 0.7, ""))
		k1, _ := closed(k, paySmall, 1)
		r1, _ := closed(sysRaw, paySmall, 1)
		t := target{name: k + " p50 latency vs raw-TCP ping-pong, small, 1 caller", want: "≤ 1.5×"}
		if k1.p50 > 0 && r1.p50 > 0 {
			f := float64(k1.p50) / float64(r1.p50)
			t.measured, t.ok = fmt.Sprintf("%.2f× (%s vs %s)", f, lat(k1.p50), lat(r1.p50)), f <= 1.5
		} else {
			t.missing = true
		}
		out = append(out, t)
		a := target{name: k + " allocations per call, small, 1 caller", want: "≤ 6 each side"}
		if k1.n > 0 {
			a.measured = fmt.Sprintf("client %.1f, server %.1f", k1.cAllocs, k1.sAllocs)
			a.ok = k1.cAllocs <= 6.05 && k1.sAllocs <= 6.05
		} else {
			a.missing = true
		}
		out = append(out, a)
	}
	return out
}

func (r *report) writeTargets(w io.Writer) {
	ts := r.targets()
	if len(ts) == 0 {
		return
	}
	fmt.Fprintln(w, "### Targets")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | measured | want | |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, t := range ts {
		verdict := "FAIL"
		switch {
		case t.missing:
			t.measured, verdict = "not measured", "–"
		case t.ok:
			verdict = "PASS"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.name, t.measured, t.want, verdict)
	}
	fmt.Fprintln(w)
}

// writeFloor splits the gap between each kiev and raw TCP in two: the
// multiplexing floor against raw TCP is the price of the model every
// multiplexed RPC on goroutines pays; kiev against the floor is kiev's
// own work.
func (r *report) writeFloor(w io.Writer) {
	if !slices.Contains(r.cfg.systems, sysFloor) {
		return
	}
	small := func(sys string) float64 {
		s, _ := r.stat(cellKey{kind: kindClosed, system: sys, payload: paySmall, callers: 128})
		return s.qps
	}
	ratio := func(a, b float64) string {
		if a <= 0 || b <= 0 {
			return "not measured"
		}
		return fmt.Sprintf("%.2f×", a/b)
	}
	// row compares system a with b: calls/s, and 16 KiB bytes/s at best.
	row := func(name, a, b string) {
		fmt.Fprintf(w, "| %s | %s | %s |\n", name, ratio(small(a), small(b)), ratio(r.maxQPS(a, pay16K), r.maxQPS(b, pay16K)))
	}
	fmt.Fprintln(w, "### Where the gap to raw TCP lies")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "*mux-floor* is the raw-TCP echo plus what every RPC that multiplexes one connection and runs each call "+
		"on a goroutine must do: match replies to callers by id, copy each request out of the read buffer for the goroutine "+
		"that serves it, and hand each caller its reply's bytes. No codec, no scheduler, no metrics.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| ratio | small, 128 callers (calls/s) | 16 KiB, best concurrency (bytes/s) |")
	fmt.Fprintln(w, "|---|---|---|")
	row("mux-floor vs raw TCP: the price of the model", sysFloor, sysRaw)
	for _, k := range intersect([]string{sysKievMsgpack, sysKievProtobuf}, r.cfg.systems) {
		row(k+" vs mux-floor: the framework's own work", k, sysFloor)
	}
	fmt.Fprintln(w)
}

// writeCompression compares kiev with compression (kiev-zstd, kiev-s2)
// with kiev-msgpack, the same client without it: bytes on the wire and
// calls/s, cell by cell.
func (r *report) writeCompression(w io.Writer) {
	comp := intersect(optionalSystems, r.cfg.systems)
	if len(comp) == 0 || !slices.Contains(r.cfg.systems, sysKievMsgpack) {
		return
	}
	fmt.Fprintln(w, "### Compression: bytes on the wire and calls/s, against kiev-msgpack")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Bytes on the wire are the TCP payload the client's connection carried both ways (the kernel's TCP_INFO "+
		"counters), per call. Ratios are the system's over kiev-msgpack's in the same cell: below 1 for bytes is the saving, "+
		"below 1 for calls/s the cost.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| payload | callers | kiev-msgpack calls/s | wire B/call | system | calls/s | × | wire B/call | × |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---|---:|---:|---:|---:|")
	ratio := func(a, b float64) string {
		if a <= 0 || b <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	for _, p := range r.cfg.payloads {
		for _, n := range r.cfg.callers {
			base, ok := r.stat(cellKey{kind: kindClosed, system: sysKievMsgpack, payload: p, callers: n})
			if !ok {
				continue
			}
			for _, sys := range comp {
				s, ok := r.stat(cellKey{kind: kindClosed, system: sys, payload: p, callers: n})
				if !ok {
					continue
				}
				fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", p, n, num(base.qps), wireText(base.wire),
					sys, num(s.qps), ratio(s.qps, base.qps), wireText(s.wire), ratio(s.wire, base.wire))
			}
		}
	}
	fmt.Fprintln(w)
}

func wireText(b float64) string {
	if b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", b)
}

func payloadText(p string) string {
	switch p {
	case paySmall:
		return "small-struct (an int64, an 8-byte string, 4 int64s)"
	case payMessage:
		return "rpcx-benchmark 581-byte"
	case pay16K:
		return "16KiB (incompressible)"
	case pay16KJSON:
		return "16KiB-json (compressible: repetitive JSON)"
	}
	return p
}

func errText(s stat) string {
	if s.errors == 0 {
		return ""
	}
	return fmt.Sprintf(" **%d errors: %s**", s.errors, s.firstErr)
}

func num(f float64) string {
	switch {
	case f >= 100000:
		return fmt.Sprintf("%.0fk", f/1000)
	case f >= 10000:
		return fmt.Sprintf("%.1fk", f/1000)
	}
	return fmt.Sprintf("%.0f", f)
}

func lat(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.1fms", float64(d)/1e6)
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// cpuModel is the CPU's name from /proc/cpuinfo, or the architecture.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
}

// charts draws throughput against concurrency for each payload, and p50
// and p99 latency against offered rate for each open-loop payload.
func (r *report) charts(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	save := func(p *plot.Plot, name string) error {
		f := filepath.Join(dir, name)
		if err := p.Save(8*vg.Inch, 5*vg.Inch, f); err != nil {
			return err
		}
		files = append(files, f)
		return nil
	}
	for _, pay := range r.cfg.payloads {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("Throughput against concurrency, %s payload (closed loop, medians)", pay)
		p.X.Label.Text = "concurrent callers"
		p.Y.Label.Text = "calls/s"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = intTicks(r.cfg.callers)
		p.Legend.Top, p.Legend.Left = true, true
		p.Add(plotter.NewGrid())
		for i, sys := range r.cfg.systems {
			var pts plotter.XYs
			for _, n := range r.cfg.callers {
				if s, ok := r.stat(cellKey{kind: kindClosed, system: sys, payload: pay, callers: n}); ok {
					pts = append(pts, plotter.XY{X: float64(n), Y: s.qps})
				}
			}
			if err := addLine(p, sys, i, pts, false); err != nil {
				return nil, err
			}
		}
		p.Y.Min = 0
		// A log axis needs a range: around the concurrencies measured,
		// which may be a single one.
		p.X.Min = float64(slices.Min(r.cfg.callers)) / 2
		p.X.Max = float64(slices.Max(r.cfg.callers)) * 2
		if err := save(p, "throughput-"+pay+".png"); err != nil {
			return nil, err
		}
	}
	for _, pay := range r.cfg.openPayloads {
		for _, q := range []struct {
			name string
			get  func(stat) time.Duration
		}{{"p50", func(s stat) time.Duration { return s.p50 }}, {"p99", func(s stat) time.Duration { return s.p99 }}} {
			p := plot.New()
			p.Title.Text = fmt.Sprintf("%s latency against offered rate, %s payload (open loop, Poisson)", q.name, pay)
			p.X.Label.Text = "offered calls/s (25, 50, 75, 90% of each system's maximum)"
			p.Y.Label.Text = q.name + " latency (ms, log scale)"
			p.Y.Scale = plot.LogScale{}
			p.Y.Tick.Marker = plot.TickerFunc(ticks125)
			p.Legend.Top, p.Legend.Left = false, false // lines rise to the right
			p.Add(plotter.NewGrid())
			lo, hi := math.Inf(1), 0.0
			for i, sys := range r.cfg.systems {
				var pts plotter.XYs
				for _, l := range r.cfg.loads {
					if s, ok := r.stat(cellKey{kind: kindOpen, system: sys, payload: pay, load: l}); ok && q.get(s) > 0 {
						y := float64(q.get(s)) / 1e6
						pts = append(pts, plotter.XY{X: s.offered, Y: y})
						lo, hi = min(lo, y), max(hi, y)
					}
				}
				if err := addLine(p, sys, i, pts, true); err != nil {
					return nil, err
				}
			}
			if hi == 0 {
				continue // nothing measured
			}
			// A log axis needs a range: pad it.
			p.Y.Min, p.Y.Max = lo/1.5, hi*1.5
			if err := save(p, "latency-"+q.name+"-"+pay+".png"); err != nil {
				return nil, err
			}
		}
	}
	return files, nil
}

func addLine(p *plot.Plot, name string, i int, pts plotter.XYs, sortX bool) error {
	if len(pts) == 0 {
		return nil
	}
	if sortX {
		slices.SortFunc(pts, func(a, b plotter.XY) int { return int(math.Copysign(1, a.X-b.X)) })
	}
	l, s, err := plotter.NewLinePoints(pts)
	if err != nil {
		return err
	}
	c := plotutil.Color(i)
	switch name {
	case sysRaw:
		c = color.Gray{Y: 90}
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	case sysFloor:
		c = color.Gray{Y: 150}
		l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	}
	l.Color, s.Color = c, c
	l.Width = vg.Points(2)
	s.Shape = plotutil.Shape(i)
	p.Add(l, s)
	p.Legend.Add(name, l, s)
	return nil
}

func intTicks(ns []int) plot.Ticker {
	var ts []plot.Tick
	for _, n := range ns {
		ts = append(ts, plot.Tick{Value: float64(n), Label: fmt.Sprint(n)})
	}
	return plot.ConstantTicks(ts)
}

// ticks125 marks a log axis at 1, 2 and 5 times each power of ten.
func ticks125(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
		}
	}
	return ts
}

// gcSetting says how the garbage collector of both processes was set:
// they inherit GOGC and GOMEMLIMIT from the environment, and at 16 KiB
// the collector's pace decides much of every allocating system's figures.
func gcSetting(getenv func(string) string) string {
	var set []string
	for _, k := range []string{"GOGC", "GOMEMLIMIT"} {
		if v := getenv(k); v != "" {
			set = append(set, k+"="+v)
		}
	}
	if len(set) == 0 {
		return "default GC (GOGC=100)"
	}
	return strings.Join(set, " ")
}

// writeRatios gives kiev-msgpack's closed-loop calls/s over every other
// system's, cell by cell: the median and the min of the per-repeat ratios,
// each repeat's two figures measured in the same round of the systems.
func (r *report) writeRatios(w io.Writer) {
	others := slices.DeleteFunc(slices.Clone(r.cfg.systems), func(s string) bool { return s == sysKievMsgpack })
	if len(others) == 0 || !slices.Contains(r.cfg.systems, sysKievMsgpack) {
		return
	}
	for _, n := range r.cfg.callers {
		fmt.Fprintf(w, "### kiev-msgpack's calls/s over each system's, %d callers\n\n", n)
		fmt.Fprintln(w, "The median of the repeats' ratios, and their min in brackets; above 1× kiev-msgpack is faster.")
		fmt.Fprintln(w)
		fmt.Fprintf(w, "| payload | %s |\n", strings.Join(others, " | "))
		fmt.Fprintf(w, "|---|%s\n", strings.Repeat("---:|", len(others)))
		for _, p := range r.cfg.payloads {
			cells := make([]string, len(others))
			for i, sys := range others {
				cells[i] = r.ratioText(p, n, sys)
			}
			fmt.Fprintf(w, "| %s | %s |\n", p, strings.Join(cells, " | "))
		}
		fmt.Fprintln(w)
	}
}

// ratioText is kiev-msgpack's calls/s over sys's in one closed-loop cell,
// repeat by repeat: "median× (min×)", or "—" if either has no figure.
func (r *report) ratioText(p string, n int, sys string) string {
	ks := r.results[cellKey{kind: kindClosed, system: sysKievMsgpack, payload: p, callers: n}]
	ss := r.results[cellKey{kind: kindClosed, system: sys, payload: p, callers: n}]
	var ratios []float64
	for i := range min(len(ks), len(ss)) {
		if k, s := ks[i].QPS(), ss[i].QPS(); k > 0 && s > 0 {
			ratios = append(ratios, k/s)
		}
	}
	if len(ratios) == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f× (%.2f×)", median(ratios), slices.Min(ratios))
}

package main

// Metrics from the recorded runs, the Markdown report and the charts.

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kievrpc/kiev/shed"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// phaseResult is one row of the table: one measured segment of one system.
type phaseResult struct {
	system    string
	phase     string
	spike     bool    // part of the spike run
	load      float64 // user requests offered, ×X
	offered   float64 // attempts started per second (retries included), ×X
	goodput   float64 // replies within the deadline per second, ×X
	p9Demand  float64 // priority-9 user requests offered, ×X
	p9Success float64 // fraction of priority-9 user requests that succeeded; NaN if none
	p99OK     time.Duration
	p99Rej    time.Duration    // -1 if there was no rejection
	rejPcts   [3]time.Duration // p50, p90, p99.9 of rejections; -1 if none
	rejected  float64          // fraction of attempts rejected at once
	timedOut  float64          // fraction of attempts that timed out
	errors    int              // attempts that failed otherwise
	served    float64          // handler runs per second, ×X
	wasted    float64          // fraction of handler runs whose caller had given up; NaN if none
	ampl      float64          // requests received by the server ÷ user requests
	perUser   float64          // attempts made per user request (client side)
	server    serverStats      // the server's counters over the phase
	lag       time.Duration    // p99 of how late the generator launched user requests
	floor     [2]time.Duration // p50 and p99 of the raw-TCP probe's round trips; -1 if none
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

// phaseMetrics computes the row of segment i of a run.
func phaseMetrics(system string, res *loadResult, segs []segment, i int, capacity float64, spike bool) phaseResult {
	from, to := res.bounds[i], res.bounds[i+1]
	secs := (to - from).Seconds()
	in := func(t time.Duration) bool { return t >= from && t < to }
	pr := phaseResult{system: system, phase: segs[i].name, spike: spike, load: segs[i].load, p9Demand: 0.1 * segs[i].load}

	var started, ok, rej, tmo int
	var okLat, rejLat []time.Duration
	for _, a := range res.attempts {
		if in(a.start) {
			started++
		}
		if !in(a.end) {
			continue
		}
		switch a.kind {
		case outOK:
			ok++
			okLat = append(okLat, a.end-a.start)
		case outRejected:
			rej++
			rejLat = append(rejLat, a.end-a.start)
		case outTimeout:
			tmo++
		case outError:
			pr.errors++
		}
	}
	ended := ok + rej + tmo + pr.errors
	pr.offered = float64(started) / secs / capacity
	pr.goodput = float64(ok) / secs / capacity
	pr.p99OK = p99(okLat)
	pr.p99Rej = p99(rejLat)
	for i, q := range []float64{0.5, 0.9, 0.999} {
		pr.rejPcts[i] = quantile(rejLat, q)
	}
	pr.rejected = ratio(rej, ended)
	pr.timedOut = ratio(tmo, ended)

	var users, sent, p9, p9ok int
	var lags []time.Duration
	for _, r := range res.requests {
		if !in(r.arrive) {
			continue
		}
		users++
		sent += int(r.attempts)
		lags = append(lags, r.lag)
		if r.prio == 9 {
			p9++
			if r.result == outOK {
				p9ok++
			}
		}
	}
	var rtts []time.Duration
	for _, p := range res.probes {
		if in(p.at) {
			rtts = append(rtts, p.rtt)
		}
	}
	pr.floor = [2]time.Duration{quantile(rtts, 0.5), p99(rtts)}

	pr.p9Success = ratio(p9ok, p9)
	pr.perUser = ratio(sent, users)
	pr.lag = max(p99(lags), 0)

	d := res.snaps[i+1].sub(res.snaps[i])
	pr.server = d
	pr.served = float64(d.Runs) / secs / capacity
	pr.wasted = ratio(int(d.Wasted), int(d.Runs))
	pr.ampl = ratio(int(d.Received), users)
	return pr
}

func (s serverStats) sub(o serverStats) serverStats {
	d := serverStats{Received: s.Received - o.Received, Runs: s.Runs - o.Runs, Wasted: s.Wasted - o.Wasted, Dropped: s.Dropped - o.Dropped}
	if s.DropsBy != nil {
		d.DropsBy = map[string]uint64{}
		for k, v := range s.DropsBy {
			d.DropsBy[k] = v - o.DropsBy[k]
		}
	}
	if s.DropWait != nil {
		d.DropWait = make([]uint64, len(s.DropWait))
		for i, v := range s.DropWait {
			if i < len(o.DropWait) {
				v -= o.DropWait[i]
			}
			d.DropWait[i] = v
		}
	}
	return d
}

// queueWaitP99 is the upper bound of the bucket holding the 99th
// percentile of how long the server's dropped requests waited in its
// queue, or "—" if it dropped none.
func queueWaitP99(buckets []uint64) string {
	var n uint64
	for _, c := range buckets {
		n += c
	}
	if n == 0 {
		return "—"
	}
	rank := (n*99 + 99) / 100
	bounds := shed.DropWaitBounds()
	for i, c := range buckets {
		if rank <= c {
			if i == 0 {
				return "≤ " + ms(bounds[0])
			}
			if i >= len(bounds) {
				return "> " + ms(bounds[len(bounds)-1])
			}
			return "≤ " + ms(bounds[i])
		}
		rank -= c
	}
	return "—"
}

// spikeMetrics computes the timeline of a spike run whose segments are
// before, spike and after, and the recovery time: from the end of the
// spike to the start of the first window of the given length whose
// goodput is at least 90% of the load offered after the spike.
func spikeMetrics(system string, res *loadResult, segs []segment, capacity float64, bucket, window time.Duration) spikeResult {
	total := res.bounds[len(segs)]
	n := int(total / bucket)
	sr := spikeResult{system: system, bucket: bucket, goodput: make([]float64, n), offered: make([]float64, n),
		spikeEnd: res.bounds[2], recovery: -1, after: total - res.bounds[2]}
	counts := make([]int, n)
	for _, a := range res.attempts {
		if a.kind == outOK && a.end >= 0 && a.end < time.Duration(n)*bucket {
			counts[a.end/bucket]++
		}
	}
	for b := range n {
		sr.goodput[b] = float64(counts[b]) / bucket.Seconds() / capacity
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
		got := 0
		for _, c := range counts[b : b+w] {
			got += c
		}
		if float64(got) >= need {
			sr.recovery = time.Duration(b)*bucket - sr.spikeEnd
			break
		}
	}
	return sr
}

// p99 returns the 99th percentile (nearest rank) of ds, or -1 if empty.
func p99(ds []time.Duration) time.Duration { return quantile(ds, 0.99) }

// quantile returns the q quantile (nearest rank) of ds, or -1 if empty.
// It sorts ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return -1
	}
	slices.Sort(ds)
	return ds[max(int(math.Ceil(q*float64(len(ds))))-1, 0)]
}

func ratio(a, b int) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

// lagWarn is the generator lag above which the report warns that the
// offered load was not what was asked.
const lagWarn = 10 * time.Millisecond

// report is the outcome of a whole benchmark run.
type report struct {
	cfg    config
	phases []phaseResult
	spikes []spikeResult
}

// Column headers of the Markdown table; the test reads the table back.
var tableHeader = []string{"system", "phase", "offered ×X", "goodput ×X", "p9 success", "p99 ok", "p99 rejected",
	"rejected", "timed out", "served ×X", "wasted", "amplification", "attempts/req"}

// write prints the report as Markdown.
func (r *report) write(w io.Writer) {
	c := r.cfg
	fmt.Fprintf(w, "## Overload benchmark\n\n")
	fmt.Fprintf(w, "Capacity X = %d slots × %v = %.0f calls/s. Phases of %v after a %v warmup, each on a fresh server process; "+
		"spike %gX (%v) → %gX (%v) → %gX (%v). Deadline %v per attempt, %d attempts in all, retried on timeout only. "+
		"kiev scheduler: Workers %d, QueueSize %d, MaxWait %v; kiev client: %s.\n\n",
		c.slots, c.slotTime, c.capacity(), c.phase, c.warmup,
		c.spikeLow, c.spikeBefore, c.spikeHigh, c.spikeDur, c.spikeLow, c.spikeAfter,
		c.deadline, c.attempts, c.shed.Workers, c.shed.QueueSize, c.shed.MaxWait, kievClientText(c.bareKiev))
	fmt.Fprintf(w, "| %s |\n", strings.Join(tableHeader, " | "))
	fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(tableHeader)))
	for _, p := range r.phases {
		fmt.Fprintf(w, "| %s | %s | %.2f | %.3f | %s | %s | %s | %s | %s | %.2f | %s | %s | %s |\n",
			p.system, p.phase, p.offered, p.goodput, pct(p.p9Success), ms(p.p99OK), ms(p.p99Rej),
			pct(p.rejected), pct(p.timedOut), p.served, pct(p.wasted), num(p.ampl), num(p.perUser))
	}
	fmt.Fprintf(w, "\noffered: attempts started per second, retries included. goodput: replies within the deadline per second.\n"+
		"p9 success: share of the priority-9 user requests arriving in the phase that got a reply within the deadline, in up to %d attempts.\n"+
		"p99 ok / p99 rejected: latency of the successful attempts / of the attempts the server refused at once (kiev.ErrOverloaded).\n"+
		"rejected, timed out: shares of the attempts that ended in the phase.\n"+
		"served, wasted, amplification come from the server's counters over the phase: handler runs per second; "+
		"share of the runs that started after their caller's deadline; requests received (retries included) per user request. "+
		"A server that cannot read its socket fast enough counts requests late, so amplification can lag attempts/req, "+
		"the client's count of attempts per user request arriving in the phase.\n", r.cfg.attempts)
	var lagging []string
	for _, p := range r.phases {
		if p.lag > lagWarn {
			lagging = append(lagging, fmt.Sprintf("%s %s (p99 %v)", p.system, p.phase, p.lag.Round(time.Millisecond)))
		}
	}
	if len(lagging) > 0 {
		fmt.Fprintf(w, "\nThe load generator fell behind its schedule by more than %v (CPU-bound; the offered load there is lower than asked): %s.\n",
			lagWarn, strings.Join(lagging, ", "))
	}

	r.writeDrops(w)
	r.writeRejectionLatency(w)

	fmt.Fprintf(w, "\n### Recovery after the spike\n\n")
	for _, s := range r.spikes {
		fmt.Fprintf(w, "- %s: %s\n", s.system, recoveryText(s))
	}

	fmt.Fprintf(w, "\n### Targets\n\n")
	systems := r.systemsRun()
	fmt.Fprintf(w, "| target | %s |\n|---|%s\n", strings.Join(systems, " | "), strings.Repeat("---|", len(systems)))
	for _, t := range r.targets(systems) {
		fmt.Fprintf(w, "| %s |", t.name)
		for _, cell := range t.cells {
			fmt.Fprintf(w, " %s |", cell)
		}
		fmt.Fprintln(w)
	}
	if slices.Contains(systems, sysKiev) {
		fmt.Fprintf(w, "\nkiev with the scheduler: %s\n", r.verdict())
	}
}

// writeDrops prints why the kiev scheduler dropped calls, per phase, as
// fractions of the requests the server received.
func (r *report) writeDrops(w io.Writer) {
	var reasons []string
	for _, x := range shed.Reasons() {
		reasons = append(reasons, x.String())
	}
	header := false
	for _, p := range r.phases {
		if p.server.DropsBy == nil || p.server.Dropped == 0 {
			continue
		}
		if !header {
			fmt.Fprintf(w, "\n### Calls the kiev scheduler dropped without running, by reason (share of requests received)\n\n")
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
// the table's p99 alone does not show: how many refusals are immediate,
// and how slow the slowest are.
func (r *report) writeRejectionLatency(w io.Writer) {
	header := false
	for _, p := range r.phases {
		if p.rejPcts[0] < 0 {
			continue
		}
		if !header {
			fmt.Fprintf(w, "\n### Latency of rejections\n\nAs the load generator measures them (send to answer); the server's share: how long the refused calls waited in kiev's queue before their answer (p99, from the scheduler's histogram); and the machine's floor: the round trip of a %d-byte raw-TCP ping between the same two processes during the same phase (%d pings a second, one at a time), which no RPC's answer can beat.\n\n| system | phase | p50 | p90 | p99 | p99.9 | p99 queue wait in the server | raw-TCP round trip p50 / p99 |\n|---|---|---|---|---|---|---|---|\n", probeSize, probeRate)
			header = true
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s / %s |\n", p.system, p.phase, ms(p.rejPcts[0]), ms(p.rejPcts[1]), ms(p.p99Rej), ms(p.rejPcts[2]), queueWaitP99(p.server.DropWait), ms(p.floor[0]), ms(p.floor[1]))
	}
}

func kievClientText(bare bool) string {
	if bare {
		return "bare (no retries of refused calls, no adaptive throttling)"
	}
	return "default (retry budget and adaptive throttling on)"
}

func recoveryText(s spikeResult) string {
	if s.recovery < 0 {
		return fmt.Sprintf("not recovered within %v of the spike's end", s.after)
	}
	return fmt.Sprintf("%v after the spike's end", s.recovery)
}

type targetRow struct {
	name  string
	cells []string
	pass  map[string]bool
}

// targets evaluates each target for each system.
func (r *report) targets(systems []string) []targetRow {
	var rows []targetRow
	add := func(name string, eval func(sys string) (string, bool, bool)) {
		row := targetRow{name: name, pass: map[string]bool{}}
		for _, sys := range systems {
			val, pass, ok := eval(sys)
			switch {
			case !ok:
				row.cells = append(row.cells, "n/a")
			case pass:
				row.cells = append(row.cells, val+" PASS")
				row.pass[sys] = true
			default:
				row.cells = append(row.cells, val+" **FAIL**")
				row.pass[sys] = false
			}
		}
		rows = append(rows, row)
	}
	steady := func(sys string, load float64) (phaseResult, bool) {
		for _, p := range r.phases {
			if p.system == sys && !p.spike && p.load == load {
				return p, true
			}
		}
		return phaseResult{}, false
	}
	for _, g := range []struct{ load, min float64 }{{2, 0.90}, {3, 0.85}, {5, 0.80}} {
		add(fmt.Sprintf("goodput ≥ %.2fX at %gX", g.min, g.load), func(sys string) (string, bool, bool) {
			p, ok := steady(sys, g.load)
			return fmt.Sprintf("%.3f", p.goodput), p.goodput >= g.min, ok
		})
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
	add("priority 9 success ≥ 99% while its demand < 0.5X (worst phase)", func(sys string) (string, bool, bool) {
		v, where, ok := worst(sys, func(p phaseResult) bool { return p.p9Demand < 0.5-1e-9 },
			func(p phaseResult) float64 { return p.p9Success }, false)
		return fmt.Sprintf("%s (%s)", pct(v), where), v >= 0.99, ok
	})
	add("rejection p99 ≤ 1 ms (worst phase)", func(sys string) (string, bool, bool) {
		v, where, ok := worst(sys, func(p phaseResult) bool { return p.p99Rej >= 0 },
			func(p phaseResult) float64 { return float64(p.p99Rej) }, true)
		if !ok {
			return "no rejections", true, true
		}
		text := fmt.Sprintf("%s (%s)", ms(time.Duration(v)), where)
		for _, p := range r.phases {
			if p.system == sys && p.phase == where && p.floor[1] >= 0 {
				text += fmt.Sprintf("; a raw-TCP round trip there: %s", ms(p.floor[1]))
			}
		}
		return text, time.Duration(v) <= time.Millisecond, true
	})
	add("wasted work ≤ 5% (worst phase)", func(sys string) (string, bool, bool) {
		v, where, ok := worst(sys, func(phaseResult) bool { return true },
			func(p phaseResult) float64 { return p.wasted }, true)
		return fmt.Sprintf("%s (%s)", pct(v), where), v <= 0.05, ok
	})
	add("full goodput within 1 s after the spike", func(sys string) (string, bool, bool) {
		for _, s := range r.spikes {
			if s.system == sys {
				if s.recovery < 0 {
					return "never", false, true
				}
				return s.recovery.String(), s.recovery <= time.Second, true
			}
		}
		return "", false, false
	})
	return rows
}

// verdict summarizes kiev's targets.
func (r *report) verdict() string {
	var failed []string
	n := 0
	for _, t := range r.targets([]string{sysKiev}) {
		if pass, ok := t.pass[sysKiev]; ok {
			n++
			if !pass {
				failed = append(failed, t.name)
			}
		}
	}
	if len(failed) == 0 {
		return fmt.Sprintf("all %d targets PASS", n)
	}
	return fmt.Sprintf("%d of %d targets FAIL: %s", len(failed), n, strings.Join(failed, "; "))
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

// charts draws goodput against offered load, and the spike timeline, into
// dir. It returns the files written.
func (r *report) charts(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string

	p := plot.New()
	p.Title.Text = fmt.Sprintf("Goodput against offered load (X = %.0f calls/s)", r.cfg.capacity())
	p.X.Label.Text = "offered load, retries included (×X)"
	p.Y.Label.Text = "goodput: replies within the deadline (×X)"
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	maxX := 1.0
	for _, ph := range r.phases {
		maxX = max(maxX, ph.offered)
	}
	ideal, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}, {X: maxX, Y: 1}})
	if err != nil {
		return nil, err
	}
	ideal.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	ideal.Color = color.Gray{Y: 128}
	p.Add(ideal)
	p.Legend.Add("ideal", ideal)
	for i, sys := range r.systemsRun() {
		var pts plotter.XYs
		for _, ph := range r.phases {
			if ph.system == sys && !ph.spike {
				pts = append(pts, plotter.XY{X: ph.offered, Y: ph.goodput})
			}
		}
		slices.SortFunc(pts, func(a, b plotter.XY) int { return int(math.Copysign(1, a.X-b.X)) })
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
	p.Y.Min = 0
	p.Y.Max = 1.45 // room for the legend above the lines
	p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 0, Label: "0"}, {Value: 0.25}, {Value: 0.5, Label: "0.5"},
		{Value: 0.75}, {Value: 1, Label: "1"}, {Value: 1.25}})
	p.X.Min = 0
	f := filepath.Join(dir, "goodput.png")
	if err := p.Save(9*vg.Inch, 5.5*vg.Inch, f); err != nil {
		return nil, err
	}
	files = append(files, f)

	if len(r.spikes) > 0 {
		p := plot.New()
		c := r.cfg
		p.Title.Text = fmt.Sprintf("Spike: %gX → %gX → %gX, goodput per %v", c.spikeLow, c.spikeHigh, c.spikeLow, r.spikes[0].bucket)
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
		ol, err := plotter.NewLine(off)
		if err != nil {
			return nil, err
		}
		ol.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
		ol.Color = color.Gray{Y: 100}
		p.Add(ol)
		p.Legend.Add("offered (user requests)", ol)
		for i, s := range r.spikes {
			var pts plotter.XYs
			for b, v := range s.goodput {
				pts = append(pts, plotter.XY{X: (time.Duration(b)*s.bucket + s.bucket/2).Seconds(), Y: v})
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return nil, err
			}
			l.Color = plotutil.Color(slices.Index(r.systemsRun(), s.system))
			l.Width = vg.Points(1.5)
			if i == 0 {
				l.Width = vg.Points(2.5)
			}
			p.Add(l)
			p.Legend.Add(s.system, l)
		}
		p.Y.Min = 0
		p.Legend.ThumbnailWidth = vg.Points(20)
		f := filepath.Join(dir, "spike.png")
		if err := p.Save(9*vg.Inch, 5*vg.Inch, f); err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// systemsRun lists the systems in the order they ran.
func (r *report) systemsRun() []string {
	var out []string
	for _, p := range r.phases {
		if !slices.Contains(out, p.system) {
			out = append(out, p.system)
		}
	}
	return out
}

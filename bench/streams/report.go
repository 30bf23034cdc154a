package main

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// report is the run's results, written as Markdown.
type report struct {
	cfg     config
	started time.Time
	took    time.Duration
	results []result
}

// failed reports whether some cell failed.
func (r *report) failed() bool {
	return slices.ContainsFunc(r.results, func(x result) bool { return x.Err != "" })
}

// values returns key's figures of system in cell, by rep.
func (r *report) values(cell, system, key string) map[int]float64 {
	out := map[int]float64{}
	for _, x := range r.results {
		if x.Err != "" || x.Spec.Cell != cell || x.Spec.System != system {
			continue
		}
		if v, ok := x.Values[key]; ok {
			out[x.Spec.Rep] = v
		}
	}
	return out
}

// ratios returns, rep by rep, system's figure over ref's.
func (r *report) ratios(cell, system, ref, key string) []float64 {
	a, b := r.values(cell, system, key), r.values(cell, ref, key)
	var out []float64
	for rep, v := range a {
		if w, ok := b[rep]; ok && w != 0 {
			out = append(out, v/w)
		}
	}
	return out
}

func list64(m map[int]float64) []float64 {
	var out []float64
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// spread is a figure's median, min and max over the reps.
type spread struct{ med, min, max float64 }

func spreadOf(xs []float64) (spread, bool) {
	if len(xs) == 0 {
		return spread{}, false
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{med: med, min: s[0], max: s[len(s)-1]}, true
}

func (s spread) format(f func(float64) string) string {
	if s.min == s.max {
		return f(s.med)
	}
	return fmt.Sprintf("%s [%s–%s]", f(s.med), f(s.min), f(s.max))
}

// Number formats.
func count(v float64) string { return commas(int64(math.Round(v))) }
func mb(v float64) string    { return fmt.Sprintf("%.0f", v/1e6) }
func kib(v float64) string   { return fmt.Sprintf("%.1f", v/1024) }
func mib(v float64) string   { return fmt.Sprintf("%.1f", v/(1<<20)) }
func num(v float64) string   { return fmt.Sprintf("%.2f", v) }
func us(v float64) string    { return fmt.Sprintf("%.0f", v) }
func x(v float64) string     { return fmt.Sprintf("%.2f×", v) }

func commas(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + commas(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// column is one figure of a cell's table.
type column struct {
	label string
	key   string
	f     func(float64) string
	ref   string // if set: the figure over this system's, rep by rep
}

// cellTable describes a cell's section.
type cellTable struct {
	cell, title, about string
	cols               []column
}

func (r *report) tables() []cellTable {
	c := r.cfg.spec
	return []cellTable{
		{cell1K, "One server stream, 1 KiB messages", "One stream read as fast as it comes, for the window after the warm-up. CPU is each process's user+system time over the window (getrusage) per message received.", []column{
			{"msgs/s", "msgs_s", count, ""}, {"MB/s", "bytes_s", mb, ""},
			{"CPU µs/msg client", "cpu_cli_us", num, ""}, {"server", "cpu_srv_us", num, ""}, {"total", "cpu_us", num, ""},
			{"msgs/s ÷ grpc", "msgs_s", x, sysGRPC}, {"CPU ÷ grpc", "cpu_us", x, sysGRPC}, {"msgs/s ÷ raw", "msgs_s", x, sysRaw},
		}},
		{cell16K, "One server stream, 16 KiB messages", "As above, with 16,384-byte messages.", []column{
			{"MB/s", "bytes_s", mb, ""}, {"msgs/s", "msgs_s", count, ""}, {"CPU µs/msg", "cpu_us", num, ""},
			{"MB/s ÷ grpc", "bytes_s", x, sysGRPC}, {"MB/s ÷ raw", "bytes_s", x, sysRaw},
		}},
		{cellOpenClose, "Open, one message, close", fmt.Sprintf("%d callers, each opening a server stream, receiving its one %d-byte message and its end, and closing it; then (or first, on odd reps) the same callers making unary calls with the same arguments and reply. The ratio is per rep.", c.Callers, smallSize), []column{
			{"streams/s", "stream_s", count, ""}, {"unary calls/s", "unary_s", count, ""}, {"streams ÷ unary", "ratio", x, ""}, {"failed ops", "errors", count, ""},
		}},
		{cellIdle, fmt.Sprintf("%s idle bidirectional streams on one connection", commas(int64(c.Idle))), "Each stream echoes one 16-byte message, then stays open and idle, its handler blocked in Recv. Heap is runtime.MemStats.HeapInuse after runtime.GC, minus the same before the streams, divided by the streams that echoed (goroutine stacks are not heap; the handler's goroutine descriptor is). The client's figure includes the harness's own wrapper of each stream (a few words).", []column{
			{"streams echoed", "opened", count, ""}, {"client heap B/stream", "heap_cli_B", count, ""}, {"server heap B/stream", "heap_srv_B", count, ""},
			{"client goroutines/stream", "gor_cli", num, ""}, {"server goroutines/stream", "gor_srv", num, ""},
		}},
		{cellSlow, "Slow consumer", fmt.Sprintf("Stream B (16 KiB messages) read as fast as it comes, alone, then beside stream A on the same connection, which never reads. *A held* is what A's handler had sent (its sends had returned) once it could send no more: the most A's consumer can be holding, in flight or buffered. Then %s streams that never read, on a connection of their own, and the same sum, and the client's heap growth (the part stops when the client's heap passes 2 GiB: *capped*).", commas(int64(c.Stalled))), []column{
			{"B alone MB/s", "solo_Bs", mb, ""}, {"B beside A MB/s", "beside_Bs", mb, ""}, {"beside ÷ alone", "ratio", x, ""},
			{"A held KiB", "a_held_B", kib, ""}, {fmt.Sprintf("%d stalled held MiB", c.Stalled), "many_held_B", mib, ""}, {"client heap MiB", "many_heap_cli_B", mib, ""}, {"capped", "many_capped", count, ""},
		}},
		{cellBulk, "Unary calls beside a bulk stream", "A unary call (16-byte reply) every millisecond, one at a time, alone and then beside a 16 KiB server stream read as fast as it comes on the same connection. Latencies in µs.", []column{
			{"p50 alone", "p50_quiet_us", us, ""}, {"p99 alone", "p99_quiet_us", us, ""}, {"p50 beside", "p50_bulk_us", us, ""},
			{"p99 beside", "p99_bulk_us", us, ""}, {"p99 rise", "rise_us", us, ""}, {"bulk MB/s", "bulk_Bs", mb, ""},
		}},
		{cellCancel, "Cancel", fmt.Sprintf("%s streams one after the other: the handler sends one message and waits on its ctx; the client receives it, reads the wall clock and cancels the stream's ctx; the server process reads the wall clock when the handler's ctx ends. Both clocks are the machine's CLOCK_REALTIME. Raw TCP's cancel is closing the connection. µs.", commas(int64(c.Cancels))), []column{
			{"p50", "p50_us", us, ""}, {"p99", "p99_us", us, ""}, {"max", "max_us", us, ""}, {"not seen in 5 s", "unseen", count, ""},
		}},
		{cellDrop, fmt.Sprintf("%s streams dropped without Close", commas(int64(c.Drop))), "Server streams of one message each, opened with context.Background() from 8 goroutines and dropped at once: no Recv to the end, no Close. Goroutines counted in the client process against before the streams, after runtime.GC, polled for up to 3 s; *server handlers* is server-stream handlers still running at the end.", []column{
			{"goroutines after opening", "peak_gor", count, ""}, {"goroutines left", "left", count, ""}, {"waited ms", "settle_ms", count, ""}, {"server handlers", "srv_watching", count, ""}, {"failed opens", "errors", count, ""},
		}},
	}
}

// kiev's stream window at its largest and a connection's stream budget,
// the bounds of the slow-consumer targets; set by kiev.go.
var kievMaxWindow, kievBudget = math.NaN(), math.NaN()

// target is one line of the targets table.
type target struct {
	cell, text string
	key        string
	ref        string // kiev's figure over this system's; "" for kiev's own
	le         bool   // the figure must be ≤ bound, else ≥
	bound      float64
	f          func(float64) string
	beside     string // for an absolute target: show this system's figure beside
	system     string // the kiev system judged; sysKiev if ""
}

func targets(idle int) []target {
	return []target{
		{cell1K, "messages/s ≥ 2× grpc-go's", "msgs_s", sysGRPC, false, 2, x, "", ""},
		{cell1K, "CPU per message ≤ 0.5× grpc-go's", "cpu_us", sysGRPC, true, 0.5, x, "", ""},
		{cell1K, "messages/s ≥ 0.5× raw TCP", "msgs_s", sysRaw, false, 0.5, x, "", ""},
		{cell16K, "bytes/s ≥ 0.7× raw TCP", "bytes_s", sysRaw, false, 0.7, x, "", ""},
		{cellOpenClose, "streams/s ≥ 0.8× kiev's unary calls/s", "ratio", "", false, 0.8, x, "", ""},
		{cellIdle, fmt.Sprintf("all %s streams open and echo a message", commas(int64(idle))), "opened", "", false, float64(idle), count, sysGRPC, ""},
		{cellIdle, "server heap ≤ 2 KiB per stream", "heap_srv_B", "", true, 2048, count, sysGRPC, ""},
		{cellIdle, "client heap ≤ 2 KiB per stream", "heap_cli_B", "", true, 2048, count, sysGRPC, ""},
		{cellSlow, "B keeps ≥ 0.95 of its solo throughput", "ratio", "", false, 0.95, x, sysGRPC, ""},
		{cellSlow, "A holds ≤ its window (KiB)", "a_held_B", "", true, kievMaxWindow, kib, sysGRPC, ""},
		{cellSlow, "stalled streams hold ≤ the connection budget (client heap growth, MiB)", "many_heap_cli_B", "", true, kievBudget, mib, sysGRPC, ""},
		{cellBulk, "unary p99 rises ≤ 1 ms (µs)", "rise_us", "", true, 1000, us, sysGRPC, ""},
		{cellCancel, "handler's ctx ends ≤ 1 ms p99 after the cancel (µs)", "p99_us", "", true, 1000, us, sysGRPC, ""},
		{cellDrop, "0 goroutines left after GC", "left", "", true, 0, count, sysGRPC, ""},
	}
}

func (r *report) write(b *strings.Builder) {
	gc := "default GC (GOGC=100)"
	if v, w := os.Getenv("GOGC"), os.Getenv("GOMEMLIMIT"); v != "" || w != "" {
		gc = fmt.Sprintf("GOGC=%q GOMEMLIMIT=%q", v, w)
	}
	fmt.Fprintf(b, "## Streams: %s\n\n", strings.Join(r.cfg.systems, ", "))
	fmt.Fprintf(b, "%s, %s/%s, %d CPUs, %s; %d reps of every cell, systems alternated; windows %v after %v of warm-up; took %v.\n",
		r.started.UTC().Format("2006-01-02 15:04 UTC"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), gc,
		r.cfg.reps, r.cfg.spec.Duration, r.cfg.spec.Warmup, r.took.Round(time.Second))
	b.WriteString("Figures are the median over the reps, [min–max] when they differ; a ratio is taken rep by rep, then summed up the same way.\n\n")
	r.writeTargets(b)
	for _, t := range r.tables() {
		if slices.Contains(r.cfg.cells, t.cell) {
			r.writeTable(b, t)
		}
	}
	var failed []string
	for _, x := range r.results {
		if x.Err != "" {
			failed = append(failed, fmt.Sprintf("- rep %d, %s, %s: %s", x.Spec.Rep+1, x.Spec.Cell, x.Spec.System, x.Err))
		}
	}
	var notes []string
	for _, x := range r.results {
		if x.Note != "" {
			notes = append(notes, fmt.Sprintf("- rep %d, %s, %s: %s failed, the first: %s", x.Spec.Rep+1, x.Spec.Cell, x.Spec.System, count(x.Values["errors"]), x.Note))
		}
	}
	if len(notes) > 0 {
		b.WriteString("### Failed operations the cells went on after\n\n" + strings.Join(notes, "\n") + "\n\n")
	}
	if len(failed) > 0 {
		b.WriteString("### Failures\n\n" + strings.Join(failed, "\n") + "\n\n")
	}
}

func (r *report) writeTargets(b *strings.Builder) {
	if !slices.Contains(r.cfg.systems, sysKiev) {
		b.WriteString("kiev is not in this run: no targets table.\n\n")
		return
	}
	b.WriteString("### Targets\n\n| cell | target | kiev | beside | verdict |\n|---|---|---|---|---|\n")
	for _, t := range targets(r.cfg.spec.Idle) {
		if !slices.Contains(r.cfg.cells, t.cell) {
			continue
		}
		sys := cmp.Or(t.system, sysKiev)
		var got []float64
		if t.ref != "" {
			got = r.ratios(t.cell, sys, t.ref, t.key)
		} else {
			got = list64(r.values(t.cell, sys, t.key))
		}
		s, ok := spreadOf(got)
		fig, verdict := "—", "no figure"
		if ok {
			fig = s.format(t.f)
			switch {
			case math.IsNaN(t.bound):
				verdict = "see note"
			case t.le && s.med <= t.bound, !t.le && s.med >= t.bound:
				verdict = "**pass**"
			default:
				verdict = "**fail**"
			}
		}
		beside := ""
		if t.beside != "" {
			if bs, ok := spreadOf(list64(r.values(t.cell, t.beside, t.key))); ok {
				beside = t.beside + " " + bs.format(t.f)
			}
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", t.cell, t.text, fig, beside, verdict)
	}
	b.WriteString("\n")
}

func (r *report) writeTable(b *strings.Builder, t cellTable) {
	fmt.Fprintf(b, "### %s\n\n%s\n\n| system |", t.title, t.about)
	var cols []column
	for _, c := range t.cols {
		if c.ref == "" || slices.Contains(r.cfg.systems, c.ref) {
			cols = append(cols, c)
		}
	}
	for _, c := range cols {
		fmt.Fprintf(b, " %s |", c.label)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(cols)) + "\n")
	for _, sys := range r.cfg.systems {
		if !supports(sys, t.cell) {
			continue
		}
		fmt.Fprintf(b, "| %s |", sys)
		for _, c := range cols {
			var xs []float64
			switch {
			case c.ref == sys:
				xs = nil
			case c.ref != "":
				xs = r.ratios(t.cell, sys, c.ref, c.key)
			default:
				xs = list64(r.values(t.cell, sys, c.key))
			}
			cell := "—"
			if s, ok := spreadOf(xs); ok {
				cell = s.format(c.f)
			}
			fmt.Fprintf(b, " %s |", cell)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

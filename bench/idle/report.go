package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

// targetHeap is issue 36's aim for kiev: the heap an idle connection
// holds on the server, beyond its goroutines.
const targetHeap = 8 << 10

// report is the run's samples, written as Markdown.
type report struct {
	cfg     config
	started time.Time
	took    time.Duration
	version string // the kiev code measured
	samples []sample
}

// failed reports whether some run failed or lost connections.
func (r *report) failed() bool {
	return slices.ContainsFunc(r.samples, func(s sample) bool { return !s.ok() })
}

// ok reports whether the sample measured every connection, and every one
// survived its idle time without a redial.
func (s sample) ok() bool {
	return s.err == "" && s.failed == 0 && s.final == int64(s.conns)
}

// figures returns f of system's good samples.
func (r *report) figures(system string, f func(sample) float64) []float64 {
	var out []float64
	for _, s := range r.samples {
		if s.system == system && s.ok() {
			out = append(out, f(s))
		}
	}
	return out
}

// median returns the median and the min of xs, which is not empty.
func median(xs []float64) (med, least float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	med = s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return med, s[0]
}

func (r *report) write(b *strings.Builder) {
	gc := "default GC (GOGC=100)"
	if v, w := os.Getenv("GOGC"), os.Getenv("GOMEMLIMIT"); v != "" || w != "" {
		gc = fmt.Sprintf("GOGC=%q GOMEMLIMIT=%q", v, w)
	}
	fmt.Fprintf(b, "## Idle connections: what each costs the server\n\n")
	fmt.Fprintf(b, "%s, %s/%s, %d CPUs, %s, %s; kiev at %s.\n", r.started.UTC().Format("2006-01-02 15:04 MST"),
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), gc, r.version)
	reps := "1 rep"
	if r.cfg.reps > 1 {
		reps = fmt.Sprintf("%d reps, systems alternated", r.cfg.reps)
	}
	fmt.Fprintf(b, "%s connections per system, each made one call then idle for %v; %s; took %v.\n",
		commas(r.cfg.conns), r.cfg.idle, reps, r.took.Round(time.Second))
	if r.cfg.note != "" {
		fmt.Fprintf(b, "Note: %s.\n", r.cfg.note)
	}
	b.WriteString("Per connection: the server's live heap after two GCs, its goroutine stacks and its goroutines, with the connections open less without them, divided by the connections. Median over the reps [min].\n\n")

	b.WriteString("| system | heap per connection | goroutine stacks per connection | goroutines per connection |\n|---|---|---|---|\n")
	for _, sys := range r.cfg.systems {
		heap := r.figures(sys, sample.heapPerConn)
		if len(heap) == 0 {
			fmt.Fprintf(b, "| %s | failed | | |\n", sys)
			continue
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", sys,
			spread(heap, kib), spread(r.figures(sys, sample.stacksPerConn), kib),
			spread(r.figures(sys, sample.goroutinesPerConn), func(x float64) string { return fmt.Sprintf("%.2f", x) }))
	}
	r.writeRatios(b)
	r.writeTarget(b)
	r.writeReps(b)
}

// spread is xs's median and, in brackets, its min.
func spread(xs []float64, f func(float64) string) string {
	med, least := median(xs)
	if f(med) == f(least) {
		return f(med)
	}
	return fmt.Sprintf("%s [%s]", f(med), f(least))
}

// writeRatios gives kiev's figures over each peer's, of the medians and
// of the mins.
func (r *report) writeRatios(b *strings.Builder) {
	kh := r.figures(sysKiev, sample.heapPerConn)
	if len(kh) == 0 {
		return
	}
	km, kl := median(kh)
	var rows []string
	for _, peer := range r.cfg.systems {
		ph := r.figures(peer, sample.heapPerConn)
		if peer == sysKiev || len(ph) == 0 {
			continue
		}
		pm, pl := median(ph)
		rows = append(rows, fmt.Sprintf("| kiev ÷ %s | %s | %s |\n", peer, ratio(km, pm), ratio(kl, pl)))
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n| heap per connection | of the medians | of the mins |\n|---|---|---|\n")
	for _, row := range rows {
		b.WriteString(row)
	}
}

func ratio(a, b float64) string {
	if b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// writeTarget judges kiev against issue 36's aim.
func (r *report) writeTarget(b *strings.Builder) {
	kh := r.figures(sysKiev, sample.heapPerConn)
	if len(kh) == 0 {
		return
	}
	med, _ := median(kh)
	verdict := "**pass**"
	if med > targetHeap {
		verdict = "**fail**"
	}
	fmt.Fprintf(b, "\nTarget (issue 36): kiev's heap per idle connection ≤ %s, beyond its goroutines: %s, %s.\n", kib(targetHeap), kib(med), verdict)
}

// writeReps lists every run's raw figures.
func (r *report) writeReps(b *strings.Builder) {
	b.WriteString("\n#### Every run\n\n| rep | system | heap before | heap after | goroutines before | after | heap per connection | connections lost while idle |\n|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.samples {
		if s.err != "" {
			fmt.Fprintf(b, "| %d | %s | failed: %s | | | | | |\n", s.rep+1, s.system, strings.ReplaceAll(s.err, "|", "/"))
			continue
		}
		lost := fmt.Sprint(s.failed)
		if extra := s.final - int64(s.conns); extra > 0 {
			lost += fmt.Sprintf(", %d redialed", extra)
		}
		fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %s | %s | %s |\n", s.rep+1, s.system,
			mib(s.before.HeapLive), mib(s.after.HeapLive), commas(s.before.Goroutines), commas(s.after.Goroutines),
			kib(s.heapPerConn()), lost)
	}
}

func kib(x float64) string {
	if math.Abs(x) < 10<<10 {
		return fmt.Sprintf("%.2f KiB", x/1024)
	}
	return fmt.Sprintf("%.1f KiB", x/1024)
}

func mib(x uint64) string { return fmt.Sprintf("%.1f MiB", float64(x)/(1<<20)) }

// commas writes n with thousands separators.
func commas(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + commas(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// kievVersion says which kiev code the run measures: the last commit that
// changed its Go files (bench/ aside), and whether kiev had changes not
// yet committed.
func kievVersion() string {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "an unknown commit (not in a git checkout)"
	}
	dir := strings.TrimSpace(string(top))
	rev, err := exec.Command("git", "-C", dir, "log", "-1", "--format=%h", "--", ":(glob)**/*.go", ":(exclude)bench").Output()
	if err != nil {
		return "an unknown commit"
	}
	v := "commit " + strings.TrimSpace(string(rev)) + " (the last to change its Go files)"
	if st, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--", ".", ":(exclude)bench").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		v += ", with uncommitted changes outside bench/"
	}
	return v
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the benchmark's server and
// calibration processes: the coordinator re-executes os.Executable, which
// here is the test binary, with -serve=<system> or -calibrate=<d>.
func TestMain(m *testing.M) {
	for _, a := range os.Args[1:] {
		if strings.HasPrefix(a, "-serve=") || strings.HasPrefix(a, "-calibrate=") {
			os.Exit(overloadMain(os.Args[1:], os.Stdout, os.Stderr))
		}
	}
	os.Exit(m.Run())
}

// lockedWriter serializes the writes of the coordinator and of its
// children's stderr copiers.
type lockedWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// runQuick runs the program with args and returns its report.
func runQuick(t *testing.T, args []string) string {
	t.Helper()
	var stdout bytes.Buffer
	var stderr lockedWriter
	start := time.Now()
	code := overloadMain(args, &stdout, &stderr)
	t.Logf("ran in %v; progress:\n%s", time.Since(start).Round(time.Second), stderr.String())
	if code != 0 {
		t.Fatalf("exit code %d; stdout:\n%s", code, stdout.String())
	}
	report := stdout.String()
	t.Logf("report:\n%s", report)
	return report
}

// TestQuick runs the cpu workload's quick mode end to end for kiev as a
// user gets it, kiev with a fixed pool and net/rpc, and checks that the
// report is complete and its numbers sane. It asserts nothing about the
// targets: they depend on the machine.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("offers load for about half a minute")
	}
	out := t.TempDir()
	systems := []string{sysKiev, sysKievFixed, sysNetRPC}
	args := []string{"-quick", "-workloads=cpu", "-systems=" + strings.Join(systems, ","), "-out=" + out, "-timeout=4m"}
	phases := []string{"0.5X", "1X", "2X", "3X", "5X", "spike: 0.8X before", "spike: 3X", "spike: 0.8X after"}
	if raceEnabled {
		// The race detector slows both processes down several times:
		// offer less, so the run stays about the program, not the CPU.
		args = append(args, "-loads=0.5,1.5", "-spike-high=1.5")
		phases = []string{"0.5X", "1.5X", "spike: 0.8X before", "spike: 1.5X", "spike: 0.8X after"}
	}
	report := runQuick(t, args)
	cpu := section(t, report, "## cpu")
	rows := tableRows(t, cpu, cpuHeader, "system", "phase")
	for _, sys := range systems {
		for _, ph := range phases {
			row, ok := rows[sys+"/"+ph]
			if !ok {
				t.Errorf("no row for %s, %s", sys, ph)
				continue
			}
			checkCPURow(t, sys+" "+ph, row)
		}
		// Under capacity every request succeeds, so goodput is the
		// offered load.
		if row, ok := rows[sys+"/0.5X"]; ok {
			if g := number(t, row["goodput ×X"]); g < 0.4 || g > 0.6 {
				t.Errorf("%s at 0.5X: goodput %v, want about 0.5", sys, g)
			}
			// Nearly all: a loaded CI machine can starve a call or two.
			if p := number(t, row["p9 success"]); p < 90 {
				t.Errorf("%s at 0.5X: priority 9 success %v%%, want about 100%%", sys, p)
			}
		}
		if !strings.Contains(cpu, "- "+sys+": ") {
			t.Errorf("no recovery line for %s", sys)
		}
	}
	if len(rows) != len(systems)*len(phases) {
		t.Errorf("%d rows, want %d", len(rows), len(systems)*len(phases))
	}
	for _, want := range []string{"### cpu targets", "goodput ≥ 0.90X", "## Summary", "kiev: "} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	checkGoals(t, cpu, "### cpu targets", systems)
	// Every phase with rejections shows the machine's floor beside them:
	// the raw-TCP probe ran through it.
	_, rejTable, ok := strings.Cut(cpu, "| raw-TCP round trip p50 / p99 |\n")
	if !ok {
		t.Fatal("no rejection latency table with the raw-TCP floor")
	}
	floors := 0
	for _, line := range strings.Split(rejTable, "\n")[1:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		p50, p99, ok := strings.Cut(cells[len(cells)-1], "/")
		if !ok {
			t.Errorf("floor cell of %q is not p50 / p99", line)
			continue
		}
		if a, b := number(t, strings.TrimSpace(p50)), number(t, strings.TrimSpace(p99)); a <= 0 || a > b || b > 1000 {
			t.Errorf("raw-TCP round trip p50 %v ms, p99 %v ms in %q: want 0 < p50 ≤ p99 ≤ 1 s", a, b, line)
		}
		floors++
	}
	if floors == 0 {
		t.Error("the rejection latency table has no row")
	}
	checkCharts(t, out, "cpu-goodput.png", "cpu-spike.png")
}

// TestQuickWorkloads runs the io, mixed and neighbour workloads' quick
// mode end to end for kiev, net/rpc and grpc, with fewer cells, and
// checks that every table is complete and its numbers sane. Like
// TestQuick, it asserts nothing about the targets.
func TestQuickWorkloads(t *testing.T) {
	if testing.Short() {
		t.Skip("offers load for about half a minute")
	}
	out := t.TempDir()
	systems := []string{sysKiev, sysNetRPC, sysGRPC}
	loads := []string{"0.5X", "3X"}
	args := []string{"-quick", "-workloads=io,mixed,neighbour", "-systems=" + strings.Join(systems, ","), "-out=" + out, "-timeout=4m",
		"-io-loads=0.5,3", "-io-callers=200"}
	if raceEnabled {
		args = append(args[:len(args)-2], "-io-loads=0.5,1.5", "-io-callers=50", "-mixed-cpu-load=0.2", "-flood=3")
		loads = []string{"0.5X", "1.5X"}
	}
	report := runQuick(t, args)

	io := section(t, report, "## io")
	rows := tableRows(t, io, ioHeader, "system", "cell")
	for _, sys := range systems {
		for _, l := range loads {
			row, ok := rows[sys+"/"+l]
			if !ok {
				t.Errorf("io: no row for %s, %s", sys, l)
				continue
			}
			name := "io " + sys + " " + l
			in(t, name, row, "offered ×C", 0.1, 30)
			in(t, name, row, "goodput ×C", 0, 1.3)
			in(t, name, row, "success", 0, 100)
			in(t, name, row, "p99 ok", 0, 1500)
			in(t, name, row, "served ×C", 0, 1.3)
			in(t, name, row, "peak goroutines", 1, 1e6)
		}
		if row, ok := rows[sys+"/0.5X"]; ok {
			if g := number(t, row["goodput ×C"]); g < 0.4 || g > 0.6 {
				t.Errorf("io %s at 0.5X: goodput %v, want about 0.5", sys, g)
			}
		}
	}
	if len(rows) != len(systems)*len(loads) {
		t.Errorf("io: %d rows, want %d", len(rows), len(systems)*len(loads))
	}
	closed := tableRows(t, io, closedHeader, "system")
	for _, sys := range systems {
		row, ok := closed[sys]
		if !ok {
			t.Errorf("io: no closed-loop row for %s", sys)
			continue
		}
		// At most every caller once per 50 ms sleep, and the slowest
		// answers within the deadline.
		in(t, "closed "+sys, row, "calls/s", 1, 1.1*float64(callersOf(args))/0.05)
		in(t, "closed "+sys, row, "p99 ok", 50, 1500)
		in(t, "closed "+sys, row, "peak goroutines", 1, 1e6)
	}
	checkGoals(t, io, "### io targets", systems)

	mixed := section(t, report, "## mixed")
	mrows := tableRows(t, mixed, mixedHeader, "system", "method")
	for _, sys := range systems {
		for _, m := range []string{"Burn (cpu)", "Work (io)"} {
			row, ok := mrows[sys+"/"+m]
			if !ok {
				t.Errorf("mixed: no row for %s, %s", sys, m)
				continue
			}
			name := "mixed " + sys + " " + m
			off := number(t, row["offered/s"])
			if off <= 0 {
				t.Errorf("%s: offered %v/s", name, off)
			}
			for _, col := range []string{"goodput before /s", "goodput slow /s", "goodput settled /s"} {
				in(t, name, row, col, 0, 1.5*off)
			}
		}
	}
	checkGoals(t, mixed, "### mixed targets", systems)

	nb := section(t, report, "## neighbour")
	nrows := tableRows(t, nb, neighbourHeader, "system")
	for _, sys := range systems {
		row, ok := nrows[sys]
		if !ok {
			t.Errorf("neighbour: no row for %s", sys)
			continue
		}
		name := "neighbour " + sys
		in(t, name, row, "honest success", 0, 100)
		in(t, name, row, "worst honest client", 0, 100)
		in(t, name, row, "honest goodput ×X", 0, 1.3)
		in(t, name, row, "flooder offered ×X", 0.1, 30)
		in(t, name, row, "flooder goodput ×X", 0, 1.3)
		in(t, name, row, "goodput ×X", 0, 1.3)
		in(t, name, row, "peak goroutines", 1, 1e6)
	}
	checkGoals(t, nb, "### neighbour targets", systems)

	if !strings.Contains(section(t, report, "## Summary"), "kiev: ") {
		t.Error("the summary has no verdict for kiev")
	}
	checkCharts(t, out, "io-goodput.png", "io-goroutines.png", "mixed.png", "neighbour.png")
}

// TestFlags checks the workload and system lists and -quick.
func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"-workloads=io,neighbour"}, true},
		{[]string{"-workloads=io,disk"}, false},
		{[]string{"-workloads=io,io"}, false},
		{[]string{"-systems=kiev,kiev-fixed"}, true},
		{[]string{"-systems=kiev,rpcx"}, false},
		{[]string{"-mixed-settle=1"}, false},
		{[]string{"-io-loads=0"}, false},
		{[]string{"-workloads=iocold", "-reps=3", "-noise=noisy"}, true},
		{[]string{"-workloads=iocold", "-reps=0"}, false},
		{[]string{"-workloads=iocold", "-noise=loud"}, false},
		{[]string{"-workloads=iocold", "-systems=kiev,kiev-resource"}, true},
	} {
		_, _, err := parseFlags(tc.args, &bytes.Buffer{})
		if (err == nil) != tc.ok {
			t.Errorf("parseFlags(%q): error %v, want ok %v", tc.args, err, tc.ok)
		}
	}
	cfg, _, err := parseFlags([]string{"-quick", "-phase=700ms"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.phase != 700*time.Millisecond || cfg.warmup != 200*time.Millisecond || cfg.mixed.slow != time.Second {
		t.Errorf("-quick -phase=700ms: phase %v, warmup %v, mixed slow %v; want 700ms, 200ms, 1s", cfg.phase, cfg.warmup, cfg.mixed.slow)
	}
	if len(cfg.workloads) != len(allWorkloads) || len(cfg.systems) != len(allSystems) {
		t.Errorf("defaults: workloads %v, systems %v; want all", cfg.workloads, cfg.systems)
	}
}

// TestQuickCold runs the iocold workload's cells twice each, on kiev: its
// table gives the minimum and median of the runs, and every 100 ms
// bucket of the worst.
func TestQuickCold(t *testing.T) {
	if testing.Short() {
		t.Skip("offers load for about half a minute")
	}
	out := t.TempDir()
	args := []string{"-quick", "-workloads=iocold", "-systems=kiev", "-out=" + out, "-timeout=4m",
		"-reps=2", "-cold-warm=false", "-cold-loads=2"}
	report := runQuick(t, args)
	if st, err := os.Stat(filepath.Join(out, "iocold-kiev.png")); err != nil || st.Size() == 0 {
		t.Errorf("no chart of the buckets: %v", err)
	}
	cold := section(t, report, "## Workload iocold")
	rows := tableRows(t, cold, coldHeader, "system", "cell")
	for _, cell := range []string{"2X cold, quiet", "2X cold, noisy"} {
		row, ok := rows["kiev/"+cell]
		if !ok {
			t.Errorf("iocold: no row for %s", cell)
			continue
		}
		if row["runs"] != "2" {
			t.Errorf("iocold %s: %s runs, want 2", cell, row["runs"])
		}
		if !strings.Contains(cold, "- kiev, "+cell+": ") {
			t.Errorf("iocold %s: no buckets listed", cell)
		}
	}
}

// callersOf returns the -io-callers of args.
func callersOf(args []string) int {
	n := 2000
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "-io-callers="); ok {
			n, _ = strconv.Atoi(v)
		}
	}
	return n
}

// section returns the part of report from the heading that starts with
// heading to the next heading of the same level.
func section(t *testing.T, report, heading string) string {
	t.Helper()
	i := strings.Index(report, "\n"+heading)
	if i < 0 {
		t.Fatalf("the report has no section %q", heading)
	}
	s := report[i+1:]
	level := heading[:strings.IndexByte(heading, ' ')+1]
	if j := strings.Index(s[1:], "\n"+level); j >= 0 {
		s = s[:j+1]
	}
	return s
}

// tableRows parses the Markdown table with the given header in text into
// rows keyed by the key columns' cells joined with "/", each a map from
// column header to cell.
func tableRows(t *testing.T, text string, header []string, key ...string) map[string]map[string]string {
	t.Helper()
	h := "| " + strings.Join(header, " | ") + " |"
	_, table, ok := strings.Cut(text, h+"\n")
	if !ok {
		t.Fatalf("no table header %q in:\n%s", h, text)
	}
	rows := map[string]map[string]string{}
	for i, line := range strings.Split(table, "\n") {
		if i == 0 {
			continue // the |---| line
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != len(header) {
			t.Fatalf("row %q has %d cells, want %d", line, len(cells), len(header))
		}
		row := map[string]string{}
		for j, c := range cells {
			row[header[j]] = strings.TrimSpace(c)
		}
		var k []string
		for _, col := range key {
			k = append(k, row[col])
		}
		rows[strings.Join(k, "/")] = row
	}
	return rows
}

// checkGoals checks the targets table under heading in text: a value for
// every system in every row, and a verdict for kiev.
func checkGoals(t *testing.T, text, heading string, systems []string) {
	t.Helper()
	_, after, ok := strings.Cut(text, heading+"\n")
	if !ok {
		t.Errorf("no %q", heading)
		return
	}
	header := append(append([]string{"cell", "target"}, systems...), "kiev passes")
	h := "| " + strings.Join(header, " | ") + " |"
	_, table, ok := strings.Cut(after, h+"\n")
	if !ok {
		t.Errorf("no targets table %q under %q", h, heading)
		return
	}
	n := 0
	for i, line := range strings.Split(table, "\n") {
		if i == 0 {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != len(header) {
			t.Errorf("targets row %q has %d cells, want %d", line, len(cells), len(header))
			continue
		}
		for j, c := range cells {
			if strings.TrimSpace(c) == "" {
				t.Errorf("targets row %q: %s is empty", line, header[j])
			}
		}
		switch v := strings.TrimSpace(cells[len(cells)-1]); v {
		case "PASS", "**FAIL**":
		default:
			t.Errorf("targets row %q: kiev's verdict %q, want PASS or **FAIL**", line, v)
		}
		n++
	}
	if n == 0 {
		t.Errorf("the targets table under %q has no row", heading)
	}
}

// checkCPURow checks that every number of a cpu row is in its possible
// range.
func checkCPURow(t *testing.T, name string, row map[string]string) {
	t.Helper()
	in(t, name, row, "offered ×X", 0.1, 30)
	in(t, name, row, "goodput ×X", 0, 1.3)
	in(t, name, row, "p9 success", 0, 100)
	// Within the 1s deadline by definition, plus the time a starved
	// goroutine takes to notice its reply.
	in(t, name, row, "p99 ok", 0, 1500)
	in(t, name, row, "p99 rejected", 0, 1000)
	in(t, name, row, "rejected", 0, 100)
	in(t, name, row, "timed out", 0, 100)
	in(t, name, row, "served ×X", 0, 1.3)
	in(t, name, row, "wasted", 0, 100)
	// The server may receive fewer requests than users make (the kiev
	// client throttles) or more (its retry budget adds about 10%).
	in(t, name, row, "amplification", 0, 4)
	in(t, name, row, "attempts/req", 1, 3) // at most 3 attempts per user request
	in(t, name, row, "peak goroutines", 1, 1e6)
}

// in checks that column col of row is a number between lo and hi, or "—"
// (none).
func in(t *testing.T, name string, row map[string]string, col string, lo, hi float64) {
	t.Helper()
	s, ok := row[col]
	if !ok {
		t.Errorf("%s: no column %q", name, col)
		return
	}
	if s == "—" {
		return
	}
	if v := number(t, s); v < lo || v > hi {
		t.Errorf("%s: %s = %s, want between %v and %v", name, col, s, lo, hi)
	}
}

func number(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSuffix(s, " ms"), "%"), 64)
	if err != nil {
		t.Errorf("%q is not a number", s)
	}
	return v
}

// checkCharts checks that each of names was drawn into dir.
func checkCharts(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, name := range names {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Error(err)
		} else if fi.Size() < 1000 {
			t.Errorf("%s has only %d bytes", name, fi.Size())
		}
	}
}

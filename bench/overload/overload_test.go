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

// TestMain lets the test binary serve as the benchmark's server process:
// the coordinator re-executes os.Executable, which here is the test
// binary, with -serve=<system>.
func TestMain(m *testing.M) {
	for _, a := range os.Args[1:] {
		if strings.HasPrefix(a, "-serve=") {
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

// TestQuick runs the quick mode end to end for kiev with its scheduler and
// net/rpc, and checks that the report is complete and its numbers sane.
// It asserts nothing about the targets: they depend on the machine.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("offers load for about half a minute")
	}
	out := t.TempDir()
	args := []string{"-quick", "-systems=kiev,netrpc", "-out=" + out, "-timeout=4m"}
	phases := []string{"0.5X", "1X", "2X", "3X", "5X", "spike: 0.8X before", "spike: 3X", "spike: 0.8X after"}
	if raceEnabled {
		// The race detector slows both processes down several times:
		// offer less, so the run stays about the program, not the CPU.
		args = append(args, "-loads=0.5,1.5", "-spike-high=1.5")
		phases = []string{"0.5X", "1.5X", "spike: 0.8X before", "spike: 1.5X", "spike: 0.8X after"}
	}
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

	rows := tableRows(t, report)
	for _, sys := range []string{sysKiev, sysNetRPC} {
		for _, ph := range phases {
			row, ok := rows[sys+"/"+ph]
			if !ok {
				t.Errorf("no row for %s, %s", sys, ph)
				continue
			}
			checkRow(t, sys+" "+ph, row)
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
		if !strings.Contains(report, "- "+sys+": ") {
			t.Errorf("no recovery line for %s", sys)
		}
	}
	if len(rows) != 2*len(phases) {
		t.Errorf("%d rows, want %d", len(rows), 2*len(phases))
	}
	for _, want := range []string{"### Targets", "goodput ≥ 0.90X at 2X", "kiev with the scheduler: "} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Every phase with rejections shows the machine's floor beside them:
	// the raw-TCP probe ran through it.
	_, rejTable, ok := strings.Cut(report, "| raw-TCP round trip p50 / p99 |\n")
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
	for _, name := range []string{"goodput.png", "spike.png"} {
		fi, err := os.Stat(filepath.Join(out, name))
		if err != nil {
			t.Error(err)
		} else if fi.Size() < 1000 {
			t.Errorf("%s has only %d bytes", name, fi.Size())
		}
	}
}

// tableRows parses the Markdown table into rows keyed "system/phase",
// each a map from column header to cell.
func tableRows(t *testing.T, report string) map[string]map[string]string {
	t.Helper()
	header := "| " + strings.Join(tableHeader, " | ") + " |"
	_, table, ok := strings.Cut(report, header+"\n")
	if !ok {
		t.Fatalf("no table header %q in the report", header)
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
		if len(cells) != len(tableHeader) {
			t.Fatalf("row %q has %d cells, want %d", line, len(cells), len(tableHeader))
		}
		row := map[string]string{}
		for j, c := range cells {
			row[tableHeader[j]] = strings.TrimSpace(c)
		}
		rows[row["system"]+"/"+row["phase"]] = row
	}
	return rows
}

// checkRow checks that every number of a row is in its possible range.
func checkRow(t *testing.T, name string, row map[string]string) {
	t.Helper()
	in := func(col string, lo, hi float64, optional bool) {
		s := row[col]
		if optional && s == "—" {
			return
		}
		s = strings.TrimSuffix(strings.TrimSuffix(s, " ms"), "%")
		v := number(t, s)
		if v < lo || v > hi {
			t.Errorf("%s: %s = %s, want between %v and %v", name, col, row[col], lo, hi)
		}
	}
	in("offered ×X", 0.1, 30, false)
	in("goodput ×X", 0, 1.3, false)
	in("p9 success", 0, 100, true)
	// Within the 1s deadline by definition, plus the time a starved
	// goroutine takes to notice its reply.
	in("p99 ok", 0, 1500, true)
	in("p99 rejected", 0, 1000, true)
	in("rejected", 0, 100, true)
	in("timed out", 0, 100, true)
	in("served ×X", 0, 1.3, false)
	in("wasted", 0, 100, true)
	// The server may receive fewer requests than users make (the kiev
	// client throttles) or more (its retry budget adds about 10%).
	in("amplification", 0, 4, true)
	in("attempts/req", 1, 3, true) // at most 3 attempts per user request
}

func number(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSuffix(s, " ms"), "%"), 64)
	if err != nil {
		t.Errorf("%q is not a number", s)
	}
	return v
}

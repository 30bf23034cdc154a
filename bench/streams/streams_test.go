package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/kievrpc/kiev/bench/internal/proc"
	"go.uber.org/goleak"
)

// TestMain lets the test binary serve as the program's server and client
// processes: the coordinator re-executes os.Executable, which here is the
// test binary, with -serve or -load.
func TestMain(m *testing.M) {
	for _, a := range os.Args[1:] {
		if a == "-serve" || a == "-load" {
			os.Exit(streamsMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
		}
	}
	goleak.VerifyTestMain(m)
}

// TestRun runs every cell of every system this build has, end to end on
// short windows and small counts, and checks that the report is whole:
// every cell measured without failure, each with a row per system that
// takes part. It asserts nothing about the figures, which depend on the
// machine.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark for about 15 seconds")
	}
	var stdout bytes.Buffer
	stderr := &proc.Output{}
	args := []string{"-reps=1", "-warmup=50ms", "-duration=200ms", "-callers=8",
		"-idle=200", "-stalled=20", "-cancels=50", "-drop=500"}
	if code := streamsMain(args, strings.NewReader(""), &stdout, stderr); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s\nstdout:\n%s", code, stderr, &stdout)
	}
	out := stdout.String()
	if strings.Contains(out, "### Failures") {
		t.Errorf("some cells failed:\n%s", out)
	}
	systems := availableSystems()
	rep := &report{cfg: config{systems: systems, cells: allCells,
		spec: cellSpec{Callers: 8, Idle: 200, Stalled: 20, Cancels: 50, Drop: 500}}}
	for _, tab := range rep.tables() {
		if !strings.Contains(out, "### "+tab.title) {
			t.Errorf("no section %q:\n%s", tab.title, out)
			continue
		}
		section := out[strings.Index(out, "### "+tab.title):]
		if i := strings.Index(section[4:], "### "); i >= 0 {
			section = section[:i+4]
		}
		for _, sys := range systems {
			if supports(sys, tab.cell) != strings.Contains(section, "| "+sys+" |") {
				t.Errorf("%s: row of %s: want %v:\n%s", tab.cell, sys, supports(sys, tab.cell), section)
			}
		}
	}
	if (checkSystem(sysKiev) == nil) != strings.Contains(out, "### Targets") {
		t.Errorf("targets table: want one exactly when kiev runs:\n%s", out)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-systems=kiev,thrift"},
		{"-cells=idle,warp"},
		{"-reps=0"},
		{"-idle=0"},
		{"-duration=0s"},
	} {
		var stderr bytes.Buffer
		if code := streamsMain(args, strings.NewReader(""), &bytes.Buffer{}, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if !strings.Contains(stderr.String(), "streams:") {
			t.Errorf("%v: no explanation: %q", args, stderr.String())
		}
	}
}

// TestRawStream reads a raw stream of a known count to its end, and
// checks that closing a stream the server still sends on ends its handler.
func TestRawStream(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := serveRaw(l)
	defer stop()
	c := &rawClient{addr: l.Addr().String()}
	ctx := context.Background()
	s, err := c.watch(ctx, watchArgs{Size: 1000, Count: 300})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if n, err := s.recv(ctx); n != 1000 || err != nil {
			t.Fatalf("message %d: %d bytes, %v", i, n, err)
		}
	}
	if _, err := s.recv(ctx); err != io.EOF {
		t.Fatalf("after the last message: %v, want io.EOF", err)
	}
	s.close()

	endless, err := c.watch(ctx, watchArgs{Size: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := endless.recv(ctx); err != nil {
		t.Fatal(err)
	}
	endless.close() // stop waits for the handler: goleak sees if it did not end
}

func TestSpread(t *testing.T) {
	s, ok := spreadOf([]float64{3, 1, 2})
	if !ok || s != (spread{med: 2, min: 1, max: 3}) {
		t.Errorf("spreadOf(3, 1, 2) = %+v, %v", s, ok)
	}
	if s, _ := spreadOf([]float64{4, 1}); s.med != 2.5 {
		t.Errorf("median of 4 and 1 = %v, want 2.5", s.med)
	}
	if _, ok := spreadOf(nil); ok {
		t.Error("spreadOf(nil) has a figure")
	}
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -4200: "-4,200"} {
		if got := commas(n); got != want {
			t.Errorf("commas(%d) = %q, want %q", n, got, want)
		}
	}
}

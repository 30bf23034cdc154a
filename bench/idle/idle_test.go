package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kievrpc/kiev/bench/internal/proc"
	"go.uber.org/goleak"
)

// TestMain lets the test binary serve as the program's server processes:
// the coordinator re-executes os.Executable, which here is the test
// binary, with -serve.
func TestMain(m *testing.M) {
	for _, a := range os.Args[1:] {
		if a == "-serve" {
			os.Exit(idleMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
		}
	}
	goleak.VerifyTestMain(m)
}

// TestRun runs every system end to end on a few connections and checks
// that the report is whole: a row per system with its figures, kiev's
// ratios to each peer, and every run with no connection lost. It asserts
// nothing about the figures beyond their sign, which depend on the code
// measured and the machine.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("opens connections to three server processes, two reps each")
	}
	var stdout bytes.Buffer
	stderr := &proc.Output{}
	args := []string{"-conns=50", "-idle=100ms", "-reps=2"}
	if code := idleMain(args, strings.NewReader(""), &stdout, stderr); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s\nstdout:\n%s", code, stderr, &stdout)
	}
	out := stdout.String()
	for _, want := range []string{"| kiev | ", "| grpc | ", "| net/rpc | ", "| kiev ÷ grpc | ", "| kiev ÷ net/rpc | ", "Target (issue 36)"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report has no %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "failed") || strings.Contains(out, "redialed") {
		t.Errorf("some run failed:\n%s", out)
	}
	if n := strings.Count(out, " | 0 |\n"); n != 6 {
		t.Errorf("%d of the 6 runs lost no connection; want all:\n%s", n, out)
	}
}

// TestCheckBoundsConnsByOpenFiles checks that asking for more connections
// than the open-file limit allows lowers the count, and says so.
func TestCheckBoundsConnsByOpenFiles(t *testing.T) {
	most := maxConns()
	cfg, err := check("kiev", most+1, time.Second, 1)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.conns != most || !strings.Contains(cfg.note, "ulimit -n") {
		t.Errorf("check with %d connections: got %d, note %q; want %d and a note naming ulimit -n", most+1, cfg.conns, cfg.note, most)
	}
	if cfg, _ := check("kiev", 10, time.Second, 1); cfg.conns != 10 || cfg.note != "" {
		t.Errorf("check with 10 connections: got %d, note %q; want 10 and no note", cfg.conns, cfg.note)
	}
}

// TestCheckRefusesUnknownSystems checks that a misspelt system is refused
// with the list of systems.
func TestCheckRefusesUnknownSystems(t *testing.T) {
	_, err := check("kiev,grpc-go", 10, time.Second, 1)
	if err == nil || !strings.Contains(err.Error(), "kiev, grpc, net/rpc") {
		t.Errorf("check(kiev,grpc-go) = %v; want an error listing the systems", err)
	}
}

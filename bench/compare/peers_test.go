package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/kievrpc/kiev/bench/internal/proc"
)

// shortArgs are the flags of a run short enough for a test.
var shortArgs = []string{"-callers=4", "-repeats=1", "-warmup=30ms", "-duration=100ms",
	"-loads=50", "-open-duration=150ms", "-pinned=false"}

// TestPeersSkippedWhereTheyDoNotBuild runs a peer beside kiev with a peers'
// module that does not build, as on a machine without their sources: the
// run goes on without the peer, and says why and what to do.
func TestPeersSkippedWhereTheyDoNotBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark for a second")
	}
	broken := t.TempDir()
	if err := os.WriteFile(filepath.Join(broken, "go.mod"), []byte("module broken\n\ngo 1.26.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, "main.go"), []byte("package main\n\nfunc main() { rpcx() }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	stderr := &proc.Output{}
	args := append([]string{"-systems=kiev-msgpack,rpcx,kitex", "-payloads=small", "-out=" + t.TempDir(), "-peers-dir=" + broken}, shortArgs...)
	if code := compareMain(args, strings.NewReader(""), &stdout, stderr); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{"skipping rpcx, kitex", "does not build", "sources.sh"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr says nothing of %q:\n%s", want, stderr)
		}
	}
	if r := stdout.String(); !strings.Contains(r, "| kiev-msgpack |") || strings.Contains(r, "| rpcx |") {
		t.Errorf("want kiev-msgpack's rows and no rpcx row:\n%s", r)
	}

	stderr = &proc.Output{}
	args = []string{"-systems=rpcx", "-payloads=small", "-out=" + t.TempDir(), "-peers-dir=" + broken}
	if code := compareMain(args, strings.NewReader(""), &stdout, stderr); code != 1 || !strings.Contains(stderr.String(), "no system left to run") {
		t.Errorf("peers alone, none building: exit %d, want 1 and \"no system left to run\"; stderr:\n%s", code, stderr)
	}
}

// TestPeers builds the peers' module, runs its tests (each peer echoes
// every payload unchanged) and runs every peer beside kiev-msgpack through
// the program. It needs rpcx, arpc and kitex (from the module proxy, or
// from sources: bench/peers/sources.sh) and a minute or two of compiling,
// so it runs only when KIEV_PEERS is set.
func TestPeers(t *testing.T) {
	if os.Getenv("KIEV_PEERS") == "" {
		t.Skip("set KIEV_PEERS=1 to build bench/peers (rpcx, arpc and kitex) and run it beside kiev; where the module proxy refuses them, run bench/peers/sources.sh DIR first (bench/README.md, \"Peers\")")
	}
	dir, err := findPeersDir("")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := buildPeers(dir, t.TempDir()); err != nil {
		t.Skipf("the peers' sources are absent: %v\nrun bench/peers/sources.sh DIR with their clones in DIR (bench/README.md, \"Peers\")", err)
	}
	args := []string{"test", "-count=1"}
	if _, err := os.Stat(filepath.Join(dir, peersMod)); err == nil {
		args = append(args, "-modfile="+peersMod)
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append(args, ".")...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test in %s: %v\n%s", dir, err, out)
	}

	var stdout bytes.Buffer
	stderr := &proc.Output{}
	systems := "-systems=" + strings.Join(append([]string{sysKievMsgpack}, peerSystems...), ",")
	// No open loop (its payload is not run): kitex's pool dials a
	// connection for each call in flight, with kitex's default connect
	// timeout of 50 ms, and on a busy machine a burst of arrivals makes a
	// few of those dials time out, which the report rightly counts.
	args = append([]string{systems, "-payloads=small,581B", "-open-payloads=16KiB", "-out=" + t.TempDir()}, shortArgs...)
	if code := compareMain(args, strings.NewReader(""), &stdout, stderr); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	report := stdout.String()
	if strings.Contains(report, "errors:") {
		t.Errorf("some calls failed:\n%s", report)
	}
	for _, sys := range peerSystems {
		// 2 payloads, closed loop.
		if n := strings.Count("\n"+report, "\n| "+sys+" |"); n != 2 {
			t.Errorf("%s has %d rows, want 2:\n%s", sys, n, report)
		}
	}
	if !strings.Contains(report, "| payload | rpcx | arpc | kitex | kitex-mux |") {
		t.Errorf("no table of kiev-msgpack's calls/s over the peers':\n%s", report)
	}
}

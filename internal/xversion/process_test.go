package xversion

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Addrs are a peer server's addresses, as it prints them.
type Addrs struct {
	TCP       string `json:"tcp"`
	UDP       string `json:"udp"`
	UDPSigned string `json:"udp_signed"` // only signed calls; "" if the build cannot sign
}

// Result is one scenario's outcome, as a peer client prints it.
type Result struct {
	Scenario string `json:"scenario"`
	Class    string `json:"class"`
	Detail   string `json:"detail"`
}

// startServer starts b's peer in server mode and returns its addresses.
// The peer runs until the test ends, when its standard input closes; if
// it does not exit then, it is killed.
func startServer(t *testing.T, b build) Addrs {
	t.Helper()
	cmd := exec.Command(b.bin, "-mode", "server")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := new(lockedBuffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the %s server: %v", b.name, err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- line
		exited <- cmd.Wait() // after the read: Wait closes stdout
	}()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("the %s server exited with %v; its stderr:\n%s", b.name, err, stderr)
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("the %s server did not exit within 10s of its stdin closing; killed it. Its stderr:\n%s", b.name, stderr)
		}
	})
	var line string
	select {
	case line = <-lines:
	case <-time.After(30 * time.Second):
		t.Fatalf("the %s server printed no addresses within 30s; its stderr:\n%s", b.name, stderr)
	}
	var a Addrs
	if err := json.Unmarshal([]byte(line), &a); err != nil || a.TCP == "" || a.UDP == "" {
		t.Fatalf("the %s server printed %q (%v), not its addresses; its stderr:\n%s", b.name, line, err, stderr)
	}
	return a
}

// runClient runs b's peer as a client of a over network with codec, with
// the scenarios named (all if none), within a minute, and returns its
// results.
func runClient(t *testing.T, b build, a Addrs, network, codec string, scenarios ...string) []Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	args := []string{"-mode", "client", "-tcp", a.TCP, "-udp", a.UDP, "-udp-signed", a.UDPSigned, "-net", network, "-codec", codec}
	if len(scenarios) > 0 {
		args = append(args, "-scenarios", strings.Join(scenarios, ","))
	}
	cmd := exec.CommandContext(ctx, b.bin, args...)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the %s client (%s %s): %v\nstdout:\n%s\nstderr:\n%s", b.name, network, codec, err, stdout.String(), stderr.String())
	}
	var rs []Result
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var r Result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("the %s client printed %q: %v", b.name, sc.Text(), err)
		}
		rs = append(rs, r)
	}
	if stderr.Len() > 0 {
		t.Logf("the %s client (%s %s) wrote to stderr:\n%s", b.name, network, codec, stderr.String())
	}
	return rs
}

// lockedBuffer is a bytes.Buffer that a process's stderr copier writes
// while the test may read it.
type lockedBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// cell is what the matrix shows of a result: "ok" for the outcome the
// current tree gives against itself, "–" for a scenario that does not
// apply, the class for a documented difference, and FAIL and the class
// for the rest.
func cell(r Result, want []string) string {
	switch {
	case !slices.Contains(want, r.Class):
		return "FAIL: " + r.Class
	case r.Class == "n/a":
		return "–"
	case r.Class == baseline[r.Scenario]:
		return "ok"
	}
	return r.Class
}

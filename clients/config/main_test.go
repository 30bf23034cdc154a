package config_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kievrpc/kiev/internal/zktest"
)

// waitTimeout bounds every wait of these tests for something to happen.
const waitTimeout = 15 * time.Second

func TestMain(m *testing.M) {
	code := m.Run()
	if addr := os.Getenv(zktest.EnvAddr); addr != "" {
		if err := deleteZKRunRoot(addr); err != nil {
			fmt.Fprintf(os.Stderr, "deleting %s: %v\n", zkRunRoot, err)
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testLog is a logger writing to the test's log, which a test can search
// and wait on.
type testLog struct {
	t       testing.TB
	mu      sync.Mutex
	lines   []string
	ended   bool
	changed chan struct{} // closed and replaced at each line
}

// newTestLog returns a debug-level logger writing to t's log until t
// ends, and the record of its lines.
func newTestLog(t testing.TB) (*slog.Logger, *testLog) {
	l := &testLog{t: t, changed: make(chan struct{})}
	t.Cleanup(func() {
		l.mu.Lock()
		l.ended = true
		l.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug})), l
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for line := range bytes.Lines(p) {
		l.lines = append(l.lines, strings.TrimSuffix(string(line), "\n"))
	}
	if !l.ended {
		l.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

// mark returns the number of lines logged so far, for waitFor.
func (l *testLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// waitFor waits for a line after the first from lines that holds every
// one of subs, and returns it.
func (l *testLog) waitFor(t testing.TB, from int, subs ...string) string {
	t.Helper()
	timeout := time.NewTimer(waitTimeout)
	defer timeout.Stop()
	for {
		l.mu.Lock()
		lines, changed := l.lines[from:], l.changed
		l.mu.Unlock()
	search:
		for _, line := range lines {
			for _, s := range subs {
				if !strings.Contains(line, s) {
					continue search
				}
			}
			return line
		}
		select {
		case <-changed:
		case <-timeout.C:
			t.Fatalf("no log line holding %q within %v", subs, waitTimeout)
		}
	}
}

// all returns every line logged so far.
func (l *testLog) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// receive waits for a value from ch.
func receive[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("no %s within %v", what, waitTimeout)
		panic("unreachable")
	}
}

// zkRunRoot holds this run's nodes on the shared ZooKeeper; TestMain
// deletes it at the end.
var zkRunRoot = fmt.Sprintf("/kiev-test/config-run-%d", time.Now().UnixNano())

func deleteZKRunRoot(addr string) error {
	return zktest.DeleteTree(addr, zkRunRoot, testDigest)
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// closedAddr returns a loopback address where nothing listens.
func closedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

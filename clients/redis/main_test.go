package redis_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/kievrpc/kiev/clients/redis"
)

// waitTimeout bounds every wait of these tests for something to happen.
const waitTimeout = 15 * time.Second

// Environment variables that scripts/services.sh env sets.
const (
	envAddr   = "KIEV_REDIS"        // the shared server, "127.0.0.1:6379"
	envServer = "KIEV_REDIS_SERVER" // the redis-server binary, for private servers
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// sharedAddr returns the address of the shared Redis server, or skips
// the test if there is none.
func sharedAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(envAddr)
	if addr == "" {
		t.Skipf("%s is not set; run eval \"$(scripts/services.sh env)\" for a Redis server", envAddr)
	}
	return addr
}

// newClient returns a Client made with opts, with a registry of its own
// unless opts has one, closed when t ends.
func newClient(t testing.TB, opts redis.Options) *redis.Client {
	t.Helper()
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	c, err := redis.New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// key returns a key unique to the test, on the shared server.
func key(t testing.TB, suffix string) string {
	return fmt.Sprintf("kiev-test:%s:%d:%s", t.Name(), time.Now().UnixNano(), suffix)
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
	return slog.New(ctxHandler{slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug})}), l
}

// reqKey keys a request id in the ctx of a test's calls. The tests'
// logger shows it as req=, as kiev.NewContextHandler shows a kiev call's
// attributes, if the record was logged with the call's ctx.
type reqKey struct{}

type ctxHandler struct{ slog.Handler }

func (h ctxHandler) Handle(ctx context.Context, r slog.Record) error {
	if id, ok := ctx.Value(reqKey{}).(string); ok {
		r = r.Clone()
		r.AddAttrs(slog.String("req", id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h ctxHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return ctxHandler{h.Handler.WithAttrs(attrs)}
}

func (h ctxHandler) WithGroup(name string) slog.Handler { return ctxHandler{h.Handler.WithGroup(name)} }

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
		if line, ok := find(lines, subs); ok {
			return line
		}
		select {
		case <-changed:
		case <-timeout.C:
			t.Fatalf("no log line holding %q within %v", subs, waitTimeout)
		}
	}
}

// find returns the first of lines holding every one of subs.
func find(lines, subs []string) (string, bool) {
search:
	for _, line := range lines {
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue search
			}
		}
		return line, true
	}
	return "", false
}

// has reports whether a line logged so far holds every one of subs.
func (l *testLog) has(subs ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := find(l.lines, subs)
	return ok
}

// all returns every line logged so far.
func (l *testLog) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// metric returns the value of the series of the metric name whose labels
// include labels: a counter's or gauge's value, a histogram's count. It
// fails the test if there is no such series.
func metric(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := findMetric(t, g, name, labels)
	if !ok {
		t.Fatalf("no series %s%v", name, labels)
	}
	return v
}

// findMetric is metric, reporting whether the series exists.
func findMetric(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			default:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

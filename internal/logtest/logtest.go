// Package logtest gives kiev's tests a logger writing to the test's log
// whose lines a test can search and wait on ([New], [Log]), and a way to
// tag a call's ctx with a request id that the logger shows as req=
// ([WithRequest]). It is for kiev's own tests only.
package logtest

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// DefaultTimeout bounds [Log.WaitFor] when [Log.Timeout] is zero.
const DefaultTimeout = 15 * time.Second

// Log is the record of the lines of a logger made by [New], which a test
// can search and wait on.
type Log struct {
	// Timeout bounds each WaitFor; zero means DefaultTimeout. Set it
	// before the first WaitFor.
	Timeout time.Duration

	t       testing.TB
	mu      sync.Mutex
	lines   []string
	ended   bool
	changed chan struct{} // closed and replaced at each line
}

// New returns a debug-level text logger writing to t's log until t ends,
// and the record of its lines. Records logged with a ctx from
// [WithRequest] carry req=<id>.
func New(t testing.TB) (*slog.Logger, *Log) {
	l := &Log{t: t, changed: make(chan struct{})}
	t.Cleanup(func() {
		l.mu.Lock()
		l.ended = true
		l.mu.Unlock()
	})
	return slog.New(ctxHandler{slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug})}), l
}

// Write records the lines of p, and copies p to the test's log until
// the test ends.
func (l *Log) Write(p []byte) (int, error) {
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

// Mark returns the number of lines logged so far, for WaitFor and
// HasFrom.
func (l *Log) Mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// WaitFor waits for a line after the first from lines that holds every
// one of subs, and returns it. It fails t if there is none within
// l.Timeout.
func (l *Log) WaitFor(t testing.TB, from int, subs ...string) string {
	t.Helper()
	wait := l.Timeout
	if wait == 0 {
		wait = DefaultTimeout
	}
	timeout := time.NewTimer(wait)
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
			t.Fatalf("no log line holding %q within %v", subs, wait)
		}
	}
}

// Has reports whether a line logged so far holds every one of subs.
func (l *Log) Has(subs ...string) bool {
	_, ok := l.HasFrom(0, subs...)
	return ok
}

// HasFrom returns the first line after the first from lines that holds
// every one of subs, reporting whether there is one.
func (l *Log) HasFrom(from int, subs ...string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return find(l.lines[from:], subs)
}

// All returns every line logged so far.
func (l *Log) All() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
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

// reqKey keys a request id in the ctx of a test's calls.
type reqKey struct{}

// WithRequest returns ctx carrying the request id id. A logger made by
// [New] shows it as req=<id>, as kiev.NewContextHandler shows a kiev
// call's attributes, if the record was logged with that ctx.
func WithRequest(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, reqKey{}, id)
}

// ctxHandler adds req=<id> to the records logged with a ctx from
// WithRequest.
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

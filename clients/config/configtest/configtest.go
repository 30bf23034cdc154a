// Package configtest is the conformance suite of config.Source: every
// implementation runs Run in its tests.
package configtest

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/kievrpc/kiev/clients/config"
)

// Timeout bounds each wait for a source to show a change.
var Timeout = 15 * time.Second

// Quiet is how long a test waits to check that a source shows nothing
// new.
var Quiet = 300 * time.Millisecond

// Backend is a source under test and the way to change what it serves.
type Backend struct {
	// Source reads the backend. Run closes it.
	Source config.Source
	// Set publishes values at the backend, as an operator would, and
	// returns once the backend holds them.
	Set func(values map[string]string)
}

// Run tests the sources newBackend makes: each starts serving initial.
// Keys are plain names ("a.b", "port"), fit for file names; values hold
// no trailing newline.
func Run(t *testing.T, newBackend func(t *testing.T, initial map[string]string) Backend) {
	tests := []struct {
		name string
		f    func(*testing.T, func(*testing.T, map[string]string) Backend)
	}{
		{"Load", testLoad},
		{"Change", testChange},
		{"InOrder", testInOrder},
		{"Empty", testEmpty},
		{"Values", testValues},
		{"Unchanged", testUnchanged},
		{"ContextEnds", testContextEnds},
		{"Close", testClose},
		{"CloseWhileWaiting", testCloseWhileWaiting},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.f(t, newBackend) })
	}
}

// open makes a backend whose source is closed when the test ends.
func open(t *testing.T, newBackend func(*testing.T, map[string]string) Backend, initial map[string]string) Backend {
	t.Helper()
	b := newBackend(t, initial)
	t.Cleanup(func() { b.Source.Close() })
	return b
}

func load(t *testing.T, src config.Source) config.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	s, err := src.Load(ctx)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return s
}

// next returns the first snapshot Next returns whose values differ from
// last's: a source may return a version with the same values first.
func next(t *testing.T, src config.Source, last config.Snapshot) config.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	for {
		s, err := src.Next(ctx)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if !s.Equal(last) {
			return s
		}
	}
}

func check(t *testing.T, what string, got config.Snapshot, want map[string]string) {
	t.Helper()
	if !maps.Equal(got.Map(), want) {
		t.Fatalf("%s = %v, want %v", what, got.Map(), want)
	}
}

func testLoad(t *testing.T, nb func(*testing.T, map[string]string) Backend) {
	want := map[string]string{"addr": ":8080", "db.port": "5432", "name": "shop"}
	b := open(t, nb, want)
	s := load(t, b.Source)
	check(t, "Load", s, want)
	if b.Source.String() == "" {
		t.Error("String() is empty; it should describe the source for logs")
	}
}

func testChange(t *testing.T, nb func(*testing.T, map[string]string) Backend) {
	b := open(t, nb, map[string]string{"a": "1"})
	s0 := load(t, b.Source)
	want := map[string]string{"a": "2", "b": "new"}
	b.Set(want)
	s1 := next(t, b.Source, s0)
	check(t, "Next", s1, want)
	if s1.Version() != "" && s1.Version() == s0.Version() {
		t.Errorf("the changed snapshot has the old version %q", s0.Version())
	}
}

func testInOrder(t *testing.T, nb func(*testing.T, map[string]string) Backend) {
	b := open(t, nb, map[string]string{"n": "0"})
	last := load(t, b.Source)
	for i := range 5 {
		want := map[string]string{"n": string(rune('1' + i))}
		b.Set(want)
		last = next(t, b.Source, last)
		check(t, "Next", last, want)
	}
}

func testEmpty(t *testing.T, nb func(*testing.T, map[string]string) Backend) {
	b := open(t, nb, map[string]string{"a": "1"})
	s := load(t, b.Source)
	b.Set(map[string]string{})
	s = next(t, b.Source, s)
	if s.Len() != 0 {
		t.Fatalf("Next after setting no keys = %v, want none", s.Map())
	}
	b.Set(map[string]string{"a": "back"})
	check(t, "Next", next(t, b.Source, s), map[string]string{"a": "back"})
}

func testValues(t *testing.T, nb func(*testing.T, map[string]string) Backend) {
	want := map[string]string{
		"empty":     "",
		"multiline": "line 1\nline 2",
		"spaces":    "  a = b  ",
		"unicode":   "київ ✓",
		"json":      `{"k":[1,2]}`,
		"quotes":    `"quoted" \ back`,
	}
	b := open(t, nb, map[string]string{"x": "1"})
	s := load(t, b.Source)
	b.Set(want)
	check(t, "Next", next(t, b.Source, s), want)
}

// testUnchanged sets the same values again: Next may return a new
// version, but only with the same values.
func testUnchanged(t *testing.T, nb func(*testing.T, map[string]string) Backend) {
	v := map[string]string{"a": "1"}
	b := open(t, nb, v)
	s := load(t, b.Source)
	b.Set(v)
	ctx, cancel := context.WithTimeout(context.Background(), Quiet)
	defer cancel()
	for {
		got, err := b.Source.Next(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		check(t, "Next after setting the same values", got, v)
	}
	want := map[string]string{"a": "2"}
	b.Set(want)
	check(t, "Next", next(t, b.Source, s), want)
}

func testContextEnds(t *testing.T, nb func(*testing.T, map[string]string) Backend) {
	b := open(t, nb, map[string]string{"a": "1"})
	s := load(t, b.Source)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Source.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with a canceled ctx: %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.Source.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with nothing to return until ctx's deadline: %v, want context.DeadlineExceeded", err)
	}
	// The source still works.
	want := map[string]string{"a": "2"}
	b.Set(want)
	check(t, "Next", next(t, b.Source, s), want)
}

func testClose(t *testing.T, nb func(*testing.T, map[string]string) Backend) {
	b := open(t, nb, map[string]string{"a": "1"})
	load(t, b.Source)
	if err := b.Source.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Source.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if _, err := b.Source.Next(ctx); !errors.Is(err, config.ErrClosed) {
		t.Errorf("Next after Close: %v, want ErrClosed", err)
	}
	if _, err := b.Source.Load(ctx); !errors.Is(err, config.ErrClosed) {
		t.Errorf("Load after Close: %v, want ErrClosed", err)
	}
}

func testCloseWhileWaiting(t *testing.T, nb func(*testing.T, map[string]string) Backend) {
	b := open(t, nb, map[string]string{"a": "1"})
	load(t, b.Source)
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	go func() {
		_, err := b.Source.Next(ctx)
		done <- err
	}()
	// Whether Next is waiting yet or not, Close must end it.
	b.Source.Close()
	select {
	case err := <-done:
		if !errors.Is(err, config.ErrClosed) {
			t.Fatalf("Next ended by Close: %v, want ErrClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("Next still waits after Close")
	}
}

package config_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kievrpc/kiev/clients/config"
	"github.com/kievrpc/kiev/internal/logtest"
)

// scriptSource is a Source whose Load and Next return what the test
// feeds them.
type scriptSource struct {
	load   func(ctx context.Context) (config.Snapshot, error)
	next   chan nextResult
	calls  chan int // receives the number of each Next call as it starts
	nCalls int

	closeOnce sync.Once
	closed    chan struct{}
}

func newScriptSource(first config.Snapshot) *scriptSource {
	return &scriptSource{
		load:   func(context.Context) (config.Snapshot, error) { return first, nil },
		next:   make(chan nextResult, 100),
		calls:  make(chan int, 100),
		closed: make(chan struct{}),
	}
}

func (s *scriptSource) Load(ctx context.Context) (config.Snapshot, error) {
	select {
	case <-s.closed:
		return config.Snapshot{}, config.ErrClosed
	default:
	}
	return s.load(ctx)
}

func (s *scriptSource) Next(ctx context.Context) (config.Snapshot, error) {
	s.nCalls++
	s.calls <- s.nCalls
	select {
	case r := <-s.next:
		return r.snap, r.err
	case <-ctx.Done():
		return config.Snapshot{}, ctx.Err()
	case <-s.closed:
		return config.Snapshot{}, config.ErrClosed
	}
}

func (s *scriptSource) String() string { return "script" }

func (s *scriptSource) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}

// waitNextCall waits until Next has been called n times.
func (s *scriptSource) waitNextCall(t testing.TB, n int) {
	t.Helper()
	for {
		if receive(t, s.calls, fmt.Sprintf("Next call %d", n)) >= n {
			return
		}
	}
}

func snap(version string, kv ...string) config.Snapshot {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return config.NewSnapshot(m, version)
}

// TestOnChangeOrderAndDedup feeds versions, some with the same values as
// the one before, and an error between: each real change is delivered
// once, in order, to each callback in the order of registration, never
// two callbacks at once; a slow callback holds up neither Current nor the
// reading of the source.
func TestOnChangeOrderAndDedup(t *testing.T) {
	src := newScriptSource(snap("v0", "n", "0"))
	c, err := config.New(context.Background(), src, config.Options{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer c.Close()

	var (
		mu      sync.Mutex
		got     []string
		running atomic.Int32
		release = make(chan struct{})
		done    = make(chan struct{}, 100)
	)
	record := func(name string) func(old, new config.Snapshot) {
		return func(old, new config.Snapshot) {
			if running.Add(1) != 1 {
				t.Errorf("callback %s runs concurrently with another", name)
			}
			defer running.Add(-1)
			if name == "A" {
				<-release // the first callback is slow
			}
			o, _ := old.Get("n")
			n, _ := new.Get("n")
			mu.Lock()
			got = append(got, fmt.Sprintf("%s:%s->%s@%s", name, o, n, new.Version()))
			mu.Unlock()
			done <- struct{}{}
		}
	}
	c.OnChange(record("A"))
	c.OnChange(record("B"))

	script := []nextResult{
		{snap: snap("v1", "n", "1")},
		{snap: snap("v1b", "n", "1")}, // a new version, same values: no change
		{snap: snap("v2", "n", "2")},
		{err: fmt.Errorf("%w: connection refused", config.ErrUnavailable)},
		{snap: snap("v2", "n", "2")}, // back: the same
		{snap: snap("v3", "n", "3")},
		{snap: snap("v4", "n", "2")}, // back to an older value: a change
	}
	for _, r := range script {
		src.next <- r
	}
	src.waitNextCall(t, len(script)+1) // every result taken
	if v := c.Current().Version(); v != "v4" {
		t.Fatalf("Current().Version() = %q while a callback is blocked, want v4", v)
	}
	close(release)
	for range 8 {
		receive(t, done, "callback")
	}
	want := []string{
		"A:0->1@v1", "B:0->1@v1",
		"A:1->2@v2", "B:1->2@v2",
		"A:2->3@v3", "B:2->3@v3",
		"A:3->2@v4", "B:3->2@v4",
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("callbacks (-want +got):\n%s", diff)
	}
	if s := c.Stats(); s.Changes != 4 || s.Loads != 7 || s.Errors != 1 || !s.Up || s.Version != "v4" {
		t.Errorf("Stats = %+v, want 4 changes, 7 loads, 1 error, up, v4", s)
	}
}

// TestOnChangeRemove checks that a removed callback is not called, and
// that a panicking one is recovered, logged, and called again at the next
// change.
func TestOnChangeRemove(t *testing.T) {
	src := config.NewMemory(map[string]string{"n": "0"})
	logger, log := logtest.New(t)
	c, err := config.New(context.Background(), src, config.Options{Logger: logger})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer c.Close()
	var removedCalls, panics atomic.Int32
	remove := c.OnChange(func(_, _ config.Snapshot) { removedCalls.Add(1) })
	c.OnChange(func(_, _ config.Snapshot) {
		panics.Add(1)
		panic("callback bug")
	})
	seen := make(chan string, 10)
	c.OnChange(func(_, new config.Snapshot) {
		v, _ := new.Get("n")
		seen <- v
	})
	remove()
	remove() // twice is fine

	src.Set(map[string]string{"n": "1"})
	if v := receive(t, seen, "change 1"); v != "1" {
		t.Fatalf("change = %s, want 1", v)
	}
	log.WaitFor(t, 0, "level=ERROR", "panicked", "callback bug")
	src.Set(map[string]string{"n": "2"})
	if v := receive(t, seen, "change 2"); v != "2" {
		t.Fatalf("change = %s, want 2", v)
	}
	if n := removedCalls.Load(); n != 0 {
		t.Errorf("the removed callback ran %d times", n)
	}
	if n := panics.Load(); n != 2 {
		t.Errorf("the panicking callback ran %d times, want 2", n)
	}
}

// TestSnapshotFallback starts a Client while Apollo is down: it starts
// from the snapshot file an earlier Client wrote, logs a warning saying
// so, reports the source down, and follows Apollo once it is back,
// delivering the release made meanwhile.
func TestSnapshotFallback(t *testing.T) {
	fa := newFakeApollo(t, "shop", map[string]string{"level": "1", "addr": ":8080"})
	path := filepath.Join(t.TempDir(), "state", "config.json")
	logger, log := logtest.New(t)
	opts := config.Options{Snapshot: path, Logger: logger, MaxRetryDelay: 100 * time.Millisecond}

	first, err := config.New(context.Background(), newApollo(t, config.ApolloOptions{Server: fa.url(), AppID: "shop"}), opts)
	if err != nil {
		t.Fatalf("first New: %v", err)
	}
	first.Close()

	fa.stopServer()
	fa.publish("application", map[string]string{"level": "2", "addr": ":8080"})
	mark := log.Mark()
	c, err := config.New(context.Background(), newApollo(t, config.ApolloOptions{Server: fa.url(), AppID: "shop"}), opts)
	if err != nil {
		t.Fatalf("New while Apollo is down, with a snapshot file: %v", err)
	}
	defer c.Close()
	line := log.WaitFor(t, mark, "level=WARN", "starting from the snapshot file")
	for _, want := range []string{path, fa.addr, "connection refused", "version=20240601"} {
		if !strings.Contains(line, want) {
			t.Errorf("the warning does not hold %q: %s", want, line)
		}
	}
	if v, _ := c.Get("level"); v != "1" {
		t.Fatalf("level = %q, want the snapshot's 1", v)
	}
	if s := c.Stats(); s.Up || !s.FromSnapshot || s.DownSince.IsZero() {
		t.Errorf("Stats = %+v, want down, from the snapshot", s)
	}
	if err := c.Health(context.Background()); !errors.Is(err, config.ErrUnavailable) || !strings.Contains(err.Error(), "snapshot file") {
		t.Errorf("Health = %v, want ErrUnavailable naming the snapshot file", err)
	}
	changes := make(chan [2]config.Snapshot, 10)
	c.OnChange(func(old, new config.Snapshot) { changes <- [2]config.Snapshot{old, new} })

	fa.startServer(t)
	ch := receive(t, changes, "change once Apollo is back")
	if o, _ := ch[0].Get("level"); o != "1" {
		t.Errorf("old level = %q, want 1", o)
	}
	if n, _ := ch[1].Get("level"); n != "2" {
		t.Errorf("new level = %q, want 2", n)
	}
	if err := c.Health(context.Background()); err != nil {
		t.Errorf("Health once Apollo is back: %v", err)
	}
	if s := c.Stats(); !s.Up || s.FromSnapshot || s.Changes != 1 {
		t.Errorf("Stats = %+v, want up, 1 change", s)
	}
	// The file holds the new release: callbacks run after it is written.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		V       int
		Source  string
		Version string
		Values  map[string]string
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatalf("snapshot file: %v\n%s", err, data)
	}
	if file.V != 1 || file.Values["level"] != "2" || file.Version != ch[1].Version() || !strings.Contains(file.Source, "app=shop") {
		t.Errorf("snapshot file = %+v, want v1, level 2, version %s", file, ch[1].Version())
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("snapshot file mode: %v, %v; want 0600", fi.Mode(), err)
	}
}

// TestNoFallback checks New's error when the source is down and the
// snapshot file cannot help.
func TestNoFallback(t *testing.T) {
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.json")
	if err := os.WriteFile(corrupt, []byte(`{"values":`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		snapshot string
		want     string
	}{
		{"no snapshot option", "", "Options.Snapshot is empty"},
		{"no file", filepath.Join(dir, "missing.json"), "no such file"},
		{"corrupt file", corrupt, "malformed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := newApollo(t, config.ApolloOptions{Server: "http://" + closedAddr(t), AppID: "shop"})
			_, err := config.New(context.Background(), src, config.Options{Snapshot: tt.snapshot})
			if !errors.Is(err, config.ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, want ErrUnavailable, the source's error and %q", err, tt.want)
			}
		})
	}
}

// TestLoadTimeout starts a Client whose source does not answer: New gives
// up after Options.LoadTimeout and starts from the snapshot file.
func TestLoadTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	first, err := config.New(context.Background(), config.NewMemory(map[string]string{"a": "1"}), config.Options{Snapshot: path})
	if err != nil {
		t.Fatal(err)
	}
	first.Close()

	src := newScriptSource(config.Snapshot{})
	src.load = func(ctx context.Context) (config.Snapshot, error) {
		<-ctx.Done()
		return config.Snapshot{}, ctx.Err()
	}
	logger, log := logtest.New(t)
	start := time.Now()
	c, err := config.New(context.Background(), src, config.Options{Snapshot: path, LoadTimeout: 100 * time.Millisecond, Logger: logger})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer c.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("New took %v with a LoadTimeout of 100ms", d)
	}
	log.WaitFor(t, 0, "starting from the snapshot file", "did not answer within Options.LoadTimeout (100ms)")
	if v, _ := c.Get("a"); v != "1" {
		t.Errorf("a = %q, want 1", v)
	}

	// A ctx that ends is the caller giving up: no fallback.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	src2 := newScriptSource(config.Snapshot{})
	src2.load = func(ctx context.Context) (config.Snapshot, error) { return config.Snapshot{}, ctx.Err() }
	if _, err := config.New(ctx, src2, config.Options{Snapshot: path}); !errors.Is(err, context.Canceled) {
		t.Errorf("New with a canceled ctx: %v, want context.Canceled", err)
	}
}

// TestClientOptions checks that bad options are refused, and that New then
// closes the source.
func TestClientOptions(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		opts config.Options
		want string
	}{
		{"relative snapshot", config.Options{Snapshot: "config.json"}, "relative"},
		{"snapshot is a directory", config.Options{Snapshot: dir}, "is a directory"},
		{"snapshot under a file", config.Options{Snapshot: filepath.Join(file, "sub", "config.json")}, "not a directory"},
		{"negative load timeout", config.Options{LoadTimeout: -1}, "negative Options.LoadTimeout"},
		{"negative retry delay", config.Options{MaxRetryDelay: -1}, "negative Options.MaxRetryDelay"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := config.NewMemory(nil)
			_, err := config.New(context.Background(), src, tt.opts)
			if !errors.Is(err, config.ErrOptions) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, want ErrOptions saying %q", err, tt.want)
			}
			if _, err := src.Load(context.Background()); !errors.Is(err, config.ErrClosed) {
				t.Errorf("the source is not closed after New failed: Load: %v", err)
			}
		})
	}
	if _, err := config.New(context.Background(), nil, config.Options{}); !errors.Is(err, config.ErrOptions) {
		t.Errorf("New(nil source): %v, want ErrOptions", err)
	}
}

func TestClientClose(t *testing.T) {
	src := config.NewMemory(map[string]string{"a": "1"})
	c, err := config.New(context.Background(), src, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Health(context.Background()); err != nil {
		t.Fatalf("Health: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := c.Health(context.Background()); !errors.Is(err, config.ErrClosed) {
		t.Errorf("Health after Close: %v, want ErrClosed", err)
	}
	if _, err := src.Load(context.Background()); !errors.Is(err, config.ErrClosed) {
		t.Errorf("the source after Close: %v, want ErrClosed", err)
	}
	if v, ok := c.Get("a"); v != "1" || !ok {
		t.Errorf("Get after Close = %q, %v; want the last value", v, ok)
	}
}

// TestSnapshotWrites checks that the file is written for each new
// version, values changed or not, and leaves no temporary file.
func TestSnapshotWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	src := newScriptSource(snap("v1", "a", "1"))
	c, err := config.New(context.Background(), src, config.Options{Snapshot: path})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	readVersion := func() string {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var f struct{ Version string }
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatal(err)
		}
		return f.Version
	}
	if v := readVersion(); v != "v1" {
		t.Fatalf("snapshot version = %q after New, want v1", v)
	}
	src.next <- nextResult{snap: snap("v1", "a", "1")} // the same again: no write
	src.next <- nextResult{snap: snap("v2", "a", "1")} // same values, new version: written
	src.waitNextCall(t, 3)
	if v := readVersion(); v != "v2" {
		t.Fatalf("snapshot version = %q, want v2", v)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("the directory holds %d entries, want the snapshot file only (no temporary files left)", len(entries))
	}
}

// TestSourceClosedUnder closes the source, not the Client: the Client
// reports it instead of claiming to follow it.
func TestSourceClosedUnder(t *testing.T) {
	src := config.NewMemory(map[string]string{"a": "1"})
	logger, log := logtest.New(t)
	c, err := config.New(context.Background(), src, config.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	src.Close()
	log.WaitFor(t, 0, "level=WARN", "not by Client.Close")
	if err := c.Health(context.Background()); !errors.Is(err, config.ErrUnavailable) || !strings.Contains(err.Error(), "not by Client.Close") {
		t.Fatalf("Health: %v, want ErrUnavailable saying the source was closed", err)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	src := config.NewMemory(map[string]string{"a": "1"})
	c, err := config.New(context.Background(), src, config.Options{Name: "app", Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 1)
	c.OnChange(func(old, new config.Snapshot) { changed <- struct{}{} })
	src.Set(map[string]string{"a": "2"})
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no change delivered")
	}
	want := `
# HELP kiev_config_changes_total Configuration changes delivered.
# TYPE kiev_config_changes_total counter
kiev_config_changes_total{client="app"} 1
# HELP kiev_config_source_up 1 while the last read of the config source succeeded.
# TYPE kiev_config_source_up gauge
kiev_config_source_up{client="app"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kiev_config_changes_total", "kiev_config_source_up"); err != nil {
		t.Error(err)
	}
	c.Close()
	if n, _ := testutil.GatherAndCount(reg); n != 0 {
		t.Errorf("%d series left after Close; want the collector unregistered", n)
	}
}

package zookeeper_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/kievrpc/kiev/internal/zktest"
	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/registry/registrytest"
	"github.com/kievrpc/kiev/registry/zookeeper"
)

// runRoot holds the nodes of this test run on the shared server; TestMain
// deletes it at the end.
var runRoot = fmt.Sprintf("/kiev-test/run-%d", time.Now().UnixNano())

// testDigest is the Config.Digest of TestDigest.
const testDigest = "kiev:s3cret"

func TestMain(m *testing.M) {
	code := m.Run()
	for _, env := range []string{zktest.EnvAddr, zktest.EnvEnsemble} {
		if addrs := os.Getenv(env); addrs != "" {
			if err := deleteRunRoot(strings.Split(addrs, ",")[0]); err != nil {
				fmt.Fprintf(os.Stderr, "deleting %s from $%s: %v\n", runRoot, env, err)
			}
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

func deleteRunRoot(addr string) error {
	return zktest.DeleteTree(addr, runRoot, testDigest)
}

// TestConformance runs registrytest against the shared server, each test
// under a root of its own.
func TestConformance(t *testing.T) {
	addr := zktest.Shared(t)
	registrytest.Run(t, func(t *testing.T) registry.Registry {
		r, err := zookeeper.New(config(t, addr))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return r
	})
}

// config returns a Config for the server at addr, with a root of the
// test's own and a logger writing to the test's log.
func config(t testing.TB, addr string) zookeeper.Config {
	logger, _ := testLogger(t)
	return zookeeper.Config{Servers: []string{addr}, Root: testRoot(t), Logger: logger}
}

// testRoot returns the root of t's nodes: one per test, also when -count
// runs a test again.
func testRoot(t testing.TB) string {
	rootsMu.Lock()
	defer rootsMu.Unlock()
	root, ok := roots[t]
	if !ok {
		root = fmt.Sprintf("%s/%s-%d", runRoot, url.PathEscape(strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())), len(roots))
		roots[t] = root
	}
	return root
}

var (
	rootsMu sync.Mutex
	roots   = map[testing.TB]string{}
)

// open makes a registry that is closed when the test ends.
func open(t testing.TB, cfg zookeeper.Config) *zookeeper.Registry {
	t.Helper()
	r, err := zookeeper.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// dial opens a plain ZooKeeper session, closed when the test ends, and
// waits until it is established.
func dial(t testing.TB, addr string, opts ...func(*zk.Conn)) *zk.Conn {
	t.Helper()
	c, events, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatalf("zk.Connect: %v", err)
	}
	t.Cleanup(func() {
		c.Close()
		for range events {
		}
	})
	timeout := time.NewTimer(registrytest.Timeout)
	defer timeout.Stop()
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return c
			}
		case <-timeout.C:
			t.Fatalf("no ZooKeeper session with %s within %v", addr, registrytest.Timeout)
		}
	}
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// testLogger returns a logger writing to t's log until t ends, and the
// buffer of all it wrote.
func testLogger(t testing.TB) (*slog.Logger, *logBuffer) {
	b := &logBuffer{t: t}
	t.Cleanup(func() {
		b.mu.Lock()
		b.ended = true
		b.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

type logBuffer struct {
	t     testing.TB
	mu    sync.Mutex
	buf   bytes.Buffer
	ended bool
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if !b.ended {
		b.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// count returns how many lines logged so far contain s.
func (b *logBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, line := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), registrytest.Timeout)
	t.Cleanup(cancel)
	return ctx
}

func instance(service string, port int) registry.Instance {
	return registry.Instance{
		Service: service,
		Network: "tcp",
		Address: fmt.Sprintf("127.0.0.1:%d", port),
		Codecs:  []string{"msgpack"},
		Weight:  1,
	}
}

// providerPath is where root's registry keeps in, as the package doc says.
func providerPath(root string, in registry.Instance) string {
	return root + "/" + in.Service + "/providers/" + in.Network + "-" + url.PathEscape(in.Address)
}

func register(t testing.TB, r registry.Registry, in registry.Instance) {
	t.Helper()
	if err := r.Register(ctxFor(t), in); err != nil {
		t.Fatalf("Register(%s): %v", in.ID(), err)
	}
}

func watch(t testing.TB, r registry.Registry, service string) registry.Watcher {
	t.Helper()
	w, err := r.Watch(ctxFor(t), service)
	if err != nil {
		t.Fatalf("Watch(%s): %v", service, err)
	}
	t.Cleanup(w.Stop)
	return w
}

// await calls Next until it returns want, and fails if a set lacks one of
// the instances in always.
func await(t testing.TB, w registry.Watcher, always []registry.Instance, want ...registry.Instance) {
	t.Helper()
	registry.Sort(want)
	ctx := ctxFor(t)
	for {
		got, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("Next: %v while waiting for %v", err, ids(want))
		}
		for _, in := range always {
			if !contains(got, in) {
				t.Fatalf("Next returned %v, without %s", ids(got), in.ID())
			}
		}
		if registry.SameSet(got, want) {
			return
		}
	}
}

func contains(set []registry.Instance, in registry.Instance) bool {
	for _, x := range set {
		if x.Equal(in) {
			return true
		}
	}
	return false
}

func ids(set []registry.Instance) []string {
	s := make([]string, len(set))
	for i, in := range set {
		s[i] = in.ID()
	}
	return s
}

// waitNode waits until the node at path exists (or, with exists false, does
// not) and returns its stat. It waits on ZooKeeper's watch events.
func waitNode(t testing.TB, c *zk.Conn, path string, exists bool, timeout time.Duration) *zk.Stat {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		ok, stat, events, err := c.ExistsW(path)
		if err != nil {
			t.Fatalf("ExistsW(%s): %v", path, err)
		}
		if ok == exists {
			return stat
		}
		select {
		case <-events:
		case <-deadline.C:
			t.Fatalf("%s exists=%v after %v; want exists=%v", path, ok, timeout, exists)
		}
	}
}

// TestWatchBeforeService watches a service that has no node yet, under a
// root that does not exist: the first set is empty, and the provider shows
// when it registers.
func TestWatchBeforeService(t *testing.T) {
	addr := zktest.Shared(t)
	cfg := config(t, addr)
	obs := dial(t, addr)
	if ok, _, err := obs.Exists(cfg.Root); ok || err != nil {
		t.Fatalf("Exists(%s) = %v, %v before the test", cfg.Root, ok, err)
	}
	client := open(t, cfg)
	w := watch(t, client, "Echo")
	if got, err := w.Next(ctxFor(t)); err != nil || len(got) != 0 {
		t.Fatalf("first Next = %v, %v; want an empty set", ids(got), err)
	}
	server := open(t, cfg)
	in := instance("Echo", 7001)
	register(t, server, in)
	await(t, w, nil, in)
}

// TestDigest registers with digest credentials: anyone can read the
// provider and watch the service, nobody else can delete or change it, and
// a registry with other credentials cannot add a provider beside it.
func TestDigest(t *testing.T) {
	addr := zktest.Shared(t)
	cfg := config(t, addr)
	cfg.Digest = testDigest
	r := open(t, cfg)
	in := instance("Secure", 7001)
	register(t, r, in)

	path := providerPath(cfg.Root, in)
	obs := dial(t, addr)
	data, _, err := obs.Get(path)
	if err != nil || !bytes.Contains(data, []byte(`"address":"127.0.0.1:7001"`)) {
		t.Fatalf("Get(%s) without credentials = %s, %v; want the provider", path, data, err)
	}
	if err := obs.Delete(path, -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("Delete without credentials = %v; want ErrNoAuth", err)
	}
	if _, err := obs.Set(path, []byte(`{}`), -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("Set without credentials = %v; want ErrNoAuth", err)
	}
	if _, err := obs.Create(path[:strings.LastIndexByte(path, '/')]+"/tcp-rogue", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("Create beside the provider without credentials = %v; want ErrNoAuth", err)
	}
	// ZooKeeper hides the digest from readers without credentials.
	acl, _, err := obs.GetACL(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(acl) != 2 || acl[0].Scheme != "digest" || acl[0].Perms != zk.PermAll ||
		acl[1] != zk.WorldACL(zk.PermRead)[0] {
		t.Errorf("ACL = %v; want every permission for the digest user and READ for anyone", acl)
	}

	anon := config(t, addr) // no credentials
	w := watch(t, open(t, anon), "Secure")
	await(t, w, nil, in)

	wrong := config(t, addr)
	wrong.Digest = "kiev:wrong"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = open(t, wrong).Register(ctx, instance("Secure", 7002))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), zk.ErrNoAuth.Error()) {
		t.Errorf("Register with wrong credentials = %v; want DeadlineExceeded naming %v", err, zk.ErrNoAuth)
	}
}

// TestMalformedNodes puts nodes beside the providers that no kiev wrote:
// they are skipped and logged once, and the rest of the set is delivered,
// including a provider written by a newer kiev with fields this one does
// not know.
func TestMalformedNodes(t *testing.T) {
	addr := zktest.Shared(t)
	cfg := config(t, addr)
	logger, logs := testLogger(t)
	cfg.Logger = logger
	good := instance("Mixed", 7001)
	r := open(t, cfg)
	register(t, r, good)

	dir := providerPath(cfg.Root, good)
	dir = dir[:strings.LastIndexByte(dir, '/')]
	obs := dial(t, addr)
	newer := registry.Instance{Service: "Mixed", Network: "tcp", Address: "127.0.0.1:7002", Weight: 3}
	for name, data := range map[string]string{
		"tcp-127.0.0.1:7002": `{"v":2,"service":"Mixed","network":"tcp","address":"127.0.0.1:7002","weight":3,"health":{"ok":true}}`,
		"tcp-127.0.0.1:7003": `not json`,
		"tcp-127.0.0.1:7004": `{"service":"Mixed","network":"tcp","address":"127.0.0.1:7004"}`,
		"tcp-127.0.0.1:7005": `{"v":1,"service":"Mixed","network":"tcp","address":"127.0.0.1:9999"}`,
		"tcp-127.0.0.1:7006": ``,
	} {
		if _, err := obs.Create(dir+"/"+name, []byte(data), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatalf("Create(%s): %v", name, err)
		}
	}
	w := watch(t, r, "Mixed")
	await(t, w, nil, good, newer)
	const skipped = "skipping a malformed provider node"
	if n := logs.count(skipped); n != 4 {
		t.Errorf("logged %d skipped nodes; want 4", n)
	}
	// A change reads every node again, but the bad ones are not logged
	// again.
	more := instance("Mixed", 7010)
	register(t, r, more)
	await(t, w, nil, good, newer, more)
	if n := logs.count(skipped); n != 4 {
		t.Errorf("logged %d skipped nodes after a second read; want still 4", n)
	}
}

// TestUnreachable checks that a registry whose ensemble never answers
// gives up within each ctx and closes promptly.
func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nobody listens there now
	r, err := zookeeper.New(config(t, addr))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := r.Register(ctx, instance("Nowhere", 7001)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Register = %v; want DeadlineExceeded", err)
	}
	if _, err := r.Watch(ctx, "Nowhere"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Watch = %v; want DeadlineExceeded", err)
	}
	start := time.Now()
	r.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := r.Register(ctxFor(t), instance("Nowhere", 7001)); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Register after Close = %v; want ErrClosed", err)
	}
}

package etcd_test

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

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/registry/etcd"
	"github.com/kievrpc/kiev/registry/etcd/internal/etcdtest"
	"github.com/kievrpc/kiev/registry/registrytest"
)

// runRoot holds the keys of this test run on the shared server; TestMain
// deletes them at the end.
var runRoot = fmt.Sprintf("/kiev-test/run-%d", time.Now().UnixNano())

func TestMain(m *testing.M) {
	if name := os.Getenv(envProvider); name != "" {
		os.Exit(runProvider(name))
	}
	code := m.Run()
	if addr := os.Getenv(etcdtest.EnvAddr); addr != "" {
		if err := deletePrefix(addr, runRoot+"/"); err != nil {
			fmt.Fprintf(os.Stderr, "deleting %s: %v\n", runRoot, err)
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

func deletePrefix(addr, prefix string) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.Delete(ctx, prefix, clientv3.WithPrefix())
	return err
}

// TestConformance runs registrytest against the shared server, each test
// under a root of its own.
func TestConformance(t *testing.T) {
	addr := etcdtest.Shared(t)
	registrytest.Run(t, func(t *testing.T) registry.Registry {
		r, err := etcd.New(config(t, addr))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return r
	})
}

// config returns a Config for the server at addr, with a root of the
// test's own and a logger writing to the test's log.
func config(t testing.TB, addr string) etcd.Config {
	logger, _ := testLogger(t)
	return etcd.Config{Endpoints: []string{addr}, Root: testRoot(t), Logger: logger}
}

// testRoot returns the root of t's keys: one per test, also when -count
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
func open(t testing.TB, cfg etcd.Config) *etcd.Registry {
	t.Helper()
	r, err := etcd.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// client returns a plain etcd client of the server at addr, closed when
// the test ends.
func client(t testing.TB, addr string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("clientv3.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

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

// lines returns the lines logged so far that contain s.
func (b *logBuffer) lines(s string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, line := range strings.Split(b.buf.String(), "\n") {
		if line != "" && strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
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

// providerKey is where root's registry keeps in, as the package doc says.
func providerKey(root string, in registry.Instance) string {
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
// the instances in always. It returns when it saw want.
func await(t testing.TB, w registry.Watcher, always []registry.Instance, want ...registry.Instance) time.Time {
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
			return time.Now()
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

// get returns the key's value and lease, or ok false if it does not
// exist.
func get(t testing.TB, c *clientv3.Client, key string) (value string, lease clientv3.LeaseID, ok bool) {
	t.Helper()
	resp, err := c.Get(ctxFor(t), key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0, false
	}
	return string(resp.Kvs[0].Value), clientv3.LeaseID(resp.Kvs[0].Lease), true
}

// The key and value of a registration are the layout and JSON that
// package registry describes, the same as ZooKeeper's, attached to a lease
// of the registry's TTL; Deregister deletes the key.
func TestKeyLayout(t *testing.T) {
	addr := etcdtest.Shared(t)
	cfg := config(t, addr)
	cfg.TTL = 7 * time.Second
	r := open(t, cfg)
	in := registry.Instance{Service: "Arith", Network: "tcp", Address: "10.0.0.7:7000", Codecs: []string{"msgpack"}, Weight: 2}
	unix := registry.Instance{Service: "Arith", Network: "unix", Address: "/run/a b.sock"}
	register(t, r, in)
	register(t, r, unix)
	c := client(t, addr)
	key := cfg.Root + "/Arith/providers/tcp-10.0.0.7:7000"
	value, lease, ok := get(t, c, key)
	if want := `{"v":1,"service":"Arith","network":"tcp","address":"10.0.0.7:7000","codecs":["msgpack"],"weight":2}`; !ok || value != want {
		t.Fatalf("key %s = %q (exists %v); want %s", key, value, ok, want)
	}
	if _, unixLease, ok := get(t, c, cfg.Root+"/Arith/providers/unix-%2Frun%2Fa%20b.sock"); !ok || unixLease != lease {
		t.Fatalf("the unix provider's key: exists %v, lease %x; want it under the same lease %x", ok, unixLease, lease)
	}
	ttl, err := c.TimeToLive(ctxFor(t), lease)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.GrantedTTL != 7 {
		t.Errorf("lease granted with TTL %d s; want 7", ttl.GrantedTTL)
	}
	if err := r.Deregister(ctxFor(t), in); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := get(t, c, key); ok {
		t.Errorf("key %s still there after Deregister", key)
	}
}

// TestWatchBeforeService watches a service that has no key yet: the first
// set is empty, and the provider shows when it registers.
func TestWatchBeforeService(t *testing.T) {
	addr := etcdtest.Shared(t)
	cfg := config(t, addr)
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

// TestMalformedKeys puts keys beside the providers that no kiev wrote:
// they are skipped and logged once, and the rest of the set is delivered,
// including a provider written by a newer kiev with fields this one does
// not know.
func TestMalformedKeys(t *testing.T) {
	addr := etcdtest.Shared(t)
	cfg := config(t, addr)
	logger, logs := testLogger(t)
	cfg.Logger = logger
	good := instance("Mixed", 7001)
	r := open(t, cfg)
	register(t, r, good)

	dir := cfg.Root + "/Mixed/providers/"
	c := client(t, addr)
	newer := registry.Instance{Service: "Mixed", Network: "tcp", Address: "127.0.0.1:7002", Weight: 3}
	for name, data := range map[string]string{
		"tcp-127.0.0.1:7002": `{"v":2,"service":"Mixed","network":"tcp","address":"127.0.0.1:7002","weight":3,"health":{"ok":true}}`,
		"tcp-127.0.0.1:7003": `not json`,
		"tcp-127.0.0.1:7004": `{"service":"Mixed","network":"tcp","address":"127.0.0.1:7004"}`,
		"tcp-127.0.0.1:7005": `{"v":1,"service":"Mixed","network":"tcp","address":"127.0.0.1:9999"}`,
		"tcp-127.0.0.1:7006": ``,
		"deeper/tcp-1:1":     `{"v":1,"service":"Mixed","network":"tcp","address":"1:1"}`,
	} {
		if _, err := c.Put(ctxFor(t), dir+name, data); err != nil {
			t.Fatalf("Put(%s): %v", name, err)
		}
	}
	w := watch(t, r, "Mixed")
	await(t, w, nil, good, newer)
	const skipped = "skipping a malformed provider key"
	if n := len(logs.lines(skipped)); n != 5 {
		t.Errorf("logged %d skipped keys; want 5", n)
	}
	// A change is applied as an event, and the bad keys are not logged
	// again; a bad key made good shows.
	more := instance("Mixed", 7010)
	register(t, r, more)
	await(t, w, nil, good, newer, more)
	fixed := instance("Mixed", 7003)
	fixed.Codecs = nil
	if _, err := c.Put(ctxFor(t), dir+"tcp-127.0.0.1:7003", `{"v":1,"network":"tcp","address":"127.0.0.1:7003","weight":1}`); err != nil {
		t.Fatal(err)
	}
	await(t, w, nil, good, newer, more, fixed)
	if n := len(logs.lines(skipped)); n != 5 {
		t.Errorf("logged %d skipped keys after more changes; want still 5", n)
	}
}

// TestStaleKey starts a registry while the key of its instance is still
// held by another lease, as when a server restarts before etcd has expired
// its previous lease: the registry writes the key under its own lease, so
// that it stays when the other lease ends.
func TestStaleKey(t *testing.T) {
	addr := etcdtest.Shared(t)
	cfg := config(t, addr)
	in := instance("Restarted", 7001)
	key := providerKey(cfg.Root, in)
	c := client(t, addr)
	old, err := c.Grant(ctxFor(t), 60)
	if err != nil {
		t.Fatal(err)
	}
	stale := in
	stale.Weight = 9 // what the previous incarnation published
	data, _ := registry.EncodeNode(stale)
	if _, err := c.Put(ctxFor(t), key, string(data), clientv3.WithLease(old.ID)); err != nil {
		t.Fatal(err)
	}

	logger, logs := testLogger(t)
	cfg.Logger = logger
	r := open(t, cfg)
	register(t, r, in)
	_, lease, ok := get(t, c, key)
	if !ok || lease == old.ID {
		t.Fatalf("the key is still the stale one, of lease %x (exists %v)", lease, ok)
	}
	if len(logs.lines("replaced a provider key of another lease")) != 1 {
		t.Errorf("the replacement was not logged once")
	}
	w := watch(t, r, "Restarted")
	await(t, w, nil, in)
	// The old lease ends; the key is no longer attached to it.
	if _, err := c.Revoke(ctxFor(t), old.ID); err != nil {
		t.Fatal(err)
	}
	if _, after, ok := get(t, c, key); !ok || after != lease {
		t.Fatalf("after the old lease was revoked: exists %v, lease %x; want the registry's %x", ok, after, lease)
	}
}

// TestDeregisterOthers checks that Deregister leaves alone a key that
// another lease holds.
func TestDeregisterOthers(t *testing.T) {
	addr := etcdtest.Shared(t)
	cfg := config(t, addr)
	in := instance("Other", 7001)
	key := providerKey(cfg.Root, in)
	r := open(t, cfg)
	register(t, r, in)
	// Another registry with the same instance takes the key over.
	other := open(t, cfg)
	register(t, other, in)
	_, otherLease, _ := get(t, client(t, addr), key)
	if err := r.Deregister(ctxFor(t), in); err != nil {
		t.Fatal(err)
	}
	if _, lease, ok := get(t, client(t, addr), key); !ok || lease != otherLease {
		t.Fatalf("after Deregister: exists %v, lease %x; want the other registry's key, lease %x", ok, lease, otherLease)
	}
}

// TestUnreachable checks that a registry whose cluster never answers
// gives up within each ctx, saying why, and closes promptly.
func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nobody listens there now
	r, err := etcd.New(config(t, addr))
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

// TestCloseCutOff closes a registry whose connection hangs: Close gives up
// on etcd within its bound rather than waiting for the client's
// timeouts, and the keys go when the lease expires.
func TestCloseCutOff(t *testing.T) {
	addr := etcdtest.Shared(t)
	proxy := etcdtest.NewProxy(t, addr)
	cfg := config(t, proxy.Addr())
	cfg.TTL = 2 * time.Second
	r := open(t, cfg)
	in := instance("Hung", 7001)
	register(t, r, in)
	watch(t, r, "Hung")
	proxy.Pause()
	start := time.Now()
	r.Close()
	d := time.Since(start)
	t.Logf("Close took %v", d.Round(time.Millisecond))
	if d > 5*time.Second {
		t.Errorf("Close took %v; want at most 5s", d)
	}
	w := watch(t, open(t, config(t, addr)), "Hung")
	await(t, w, nil)
	proxy.Resume()
}

// Registries that connect, register, watch and close cleanly log nothing
// above Debug, and the etcd client library's own lines reach their logger
// at Debug.
func TestCleanCloseLogsOnlyDebug(t *testing.T) {
	addr := etcdtest.Shared(t)
	root := testRoot(t)
	for i := range 3 {
		provLog, provLines := testLogger(t)
		prov := open(t, etcd.Config{Endpoints: []string{addr}, Root: root, Logger: provLog})
		watchLog, watchLines := testLogger(t)
		watching := open(t, etcd.Config{Endpoints: []string{addr}, Root: root, Logger: watchLog})

		w, err := watching.Watch(ctxFor(t), "Echo")
		if err != nil {
			t.Fatalf("Watch: %v", err)
		}
		in := instance("Echo", 7000+i)
		register(t, prov, in)
		await(t, w, nil, in)
		if err := prov.Deregister(ctxFor(t), in); err != nil {
			t.Fatalf("Deregister: %v", err)
		}
		watching.Close()
		prov.Close()
		if _, err := w.Next(ctxFor(t)); err != registry.ErrClosed {
			t.Fatalf("Next after Close: %v, want registry.ErrClosed", err)
		}
		for _, l := range []struct {
			name string
			log  *logBuffer
		}{{"provider", provLines}, {"watcher", watchLines}} {
			for _, line := range l.log.lines("") {
				if !strings.Contains(line, "level=DEBUG") {
					t.Errorf("round %d: the %s's registry logged above Debug: %s", i, l.name, line)
				}
			}
		}
		if len(provLines.lines("lease revoked")) != 1 {
			t.Errorf("round %d: the provider's Close did not revoke its lease", i)
		}
	}
}

func TestNewConfig(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  etcd.Config
		err  string
	}{
		{"no endpoints", etcd.Config{}, "no Endpoints"},
		{"empty endpoint", etcd.Config{Endpoints: []string{"127.0.0.1:2379", " "}}, "empty address"},
		{"path in endpoint", etcd.Config{Endpoints: []string{"127.0.0.1:2379/app"}}, "Config.Root"},
		{"https", etcd.Config{Endpoints: []string{"https://127.0.0.1:2379"}}, "TLS is not"},
		{"relative root", etcd.Config{Endpoints: []string{"127.0.0.1:2379"}, Root: "kiev"}, "does not start with '/'"},
		{"trailing slash", etcd.Config{Endpoints: []string{"127.0.0.1:2379"}, Root: "/kiev/"}, "ends with '/'"},
		{"dot component", etcd.Config{Endpoints: []string{"127.0.0.1:2379"}, Root: "/a/../b"}, `".."`},
		{"negative TTL", etcd.Config{Endpoints: []string{"127.0.0.1:2379"}, TTL: -time.Second}, "negative TTL"},
		{"fractional TTL", etcd.Config{Endpoints: []string{"127.0.0.1:2379"}, TTL: 1500 * time.Millisecond}, "whole number of seconds"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := etcd.New(tt.cfg)
			if err == nil {
				r.Close()
				t.Fatalf("New(%+v) succeeded; want an error mentioning %q", tt.cfg, tt.err)
			}
			if !errors.Is(err, etcd.ErrConfig) || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("New(%+v) = %v; want ErrConfig mentioning %q", tt.cfg, err, tt.err)
			}
		})
	}
}

package etcd_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/internal/servetest"
	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/registry/etcd"
	"github.com/kievrpc/kiev/registry/etcd/internal/etcdtest"
)

// These tests run kiev servers and clients on etcd registries and disturb
// etcd under them: a restart, a partition that outlasts a lease, a wiped
// member, and a provider process killed with SIGKILL (this test binary,
// started again in provider mode). Each logs its figures as "figure: ...".

const (
	envProvider = "KIEV_TEST_ETCD_PROVIDER" // the provider's name; set in provider mode
	envEndpoint = "KIEV_TEST_ETCD_ENDPOINT"
	envRoot     = "KIEV_TEST_ETCD_ROOT"
	envTTL      = "KIEV_TEST_ETCD_TTL"
)

// Who answers with the name of the provider that served the call.
type Who struct{ name string }

func (w *Who) Name(ctx context.Context, args int, reply *string) error {
	*reply = w.name
	return nil
}

// runProvider serves Who named name, registered in the etcd the
// environment names, until its standard input closes.
func runProvider(name string) int {
	ttl, err := time.ParseDuration(os.Getenv(envTTL))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	reg, err := etcd.New(etcd.Config{
		Endpoints: []string{os.Getenv(envEndpoint)},
		Root:      os.Getenv(envRoot),
		TTL:       ttl,
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, nil)).With("provider", name),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer reg.Close()
	srv := kiev.NewServer(kiev.WithRegistry(reg))
	if err := srv.Register(&Who{name: name}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go srv.Serve(l)
	fmt.Printf("serving %s\n", l.Addr())
	io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	return 0
}

// proc is a provider process.
type proc struct {
	addr string
	cmd  *exec.Cmd
	in   io.WriteCloser
}

// startProvider starts a provider process registered under root in the
// etcd at addr, with a lease of ttl; it is stopped when the test ends.
func startProvider(t *testing.T, addr, root, name string, ttl time.Duration) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envProvider+"="+name, envEndpoint+"="+addr, envRoot+"="+root, envTTL+"="+ttl.String())
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, in: in}
	t.Cleanup(func() {
		p.in.Close()
		done := make(chan struct{})
		go func() { p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("provider %s did not start: %v", name, err)
	}
	p.addr = strings.TrimSpace(strings.TrimPrefix(line, "serving "))
	return p
}

// provider serves Who named name in this process, registered in reg; it
// is closed when the test ends, before reg if reg was opened first.
func provider(t *testing.T, reg registry.Registry, name string) string {
	t.Helper()
	srv := kiev.NewServer(kiev.WithRegistry(reg))
	if err := srv.Register(&Who{name: name}); err != nil {
		t.Fatal(err)
	}
	return servetest.Start(t, srv)
}

// dialWho dials the Who service through an etcd:// target, as a program
// that imports the package does.
func dialWho(t *testing.T, addr, root string, opts ...kiev.DialOption) *kiev.Client {
	t.Helper()
	c, err := kiev.Dial("etcd://"+addr+root+"/Who", opts...)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitProviders waits until c balances over n providers, none ejected or
// unlisted.
func waitProviders(t *testing.T, c *kiev.Client, n int) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; {
		usable := 0
		for _, p := range c.Providers() {
			if !p.Ejected && !p.Unlisted {
				usable++
			}
		}
		if usable == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client did not see %d usable providers within 15s: %+v", n, c.Providers())
		}
		time.Sleep(5 * time.Millisecond) // polling the client's view; nothing to wait on
	}
}

func callName(t *testing.T, c *kiev.Client) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var name string
	if err := c.Call(ctx, "Who.Name", 0, &name); err != nil {
		t.Fatalf("Who.Name: %v", err)
	}
	return name
}

// awaitCount waits until w reports n providers and returns when; it fails
// if a set it reports has fewer than atLeast.
func awaitCount(t *testing.T, w registry.Watcher, n, atLeast int, within time.Duration) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		set, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %d providers in etcd: %v", n, err)
		}
		if len(set) < atLeast {
			t.Fatalf("the watcher reported %d providers %v while waiting for %d; want never fewer than %d", len(set), ids(set), n, atLeast)
		}
		if len(set) == n {
			return time.Now()
		}
	}
}

// loadRun is a load of Who.Name calls running in the background, bounded
// in count and stopped by stop.
type loadRun struct {
	calls  atomic.Int64
	failed atomic.Int64
	quit   chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	firstErr error
}

// startLoad starts workers that call c until stop, or until each made
// maxCalls calls.
func startLoad(c *kiev.Client, workers, maxCalls int) *loadRun {
	r := &loadRun{quit: make(chan struct{}), done: make(chan struct{})}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range maxCalls {
				select {
				case <-r.quit:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := c.Call(ctx, "Who.Name", 0, new(string))
				cancel()
				if err != nil {
					r.failed.Add(1)
					r.mu.Lock()
					if r.firstErr == nil {
						r.firstErr = err
					}
					r.mu.Unlock()
				}
				r.calls.Add(1)
			}
		})
	}
	go func() {
		wg.Wait()
		close(r.done)
	}()
	return r
}

// await waits until the load has made n calls.
func (r *loadRun) await(t *testing.T, n int64) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); r.calls.Load() < n; {
		select {
		case <-r.done:
			t.Fatalf("the load ended after %d calls, before %d", r.calls.Load(), n)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the load made %d calls in 30s, not %d", r.calls.Load(), n)
		}
		time.Sleep(time.Millisecond) // polling a counter the load goroutines advance
	}
}

// stop ends the load; it returns the calls made, those failed and the
// first error.
func (r *loadRun) stop() (calls, failed int64, first error) {
	close(r.quit)
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls.Load(), r.failed.Load(), r.firstErr
}

// TestRestartUnderLoad stops the etcd server under two providers and a
// client calling them, then starts it again: no call fails, the watchers
// never report a provider missing, the leases survive (nothing is
// registered again), and a provider that starts afterwards is picked up.
func TestRestartUnderLoad(t *testing.T) {
	srv := etcdtest.Start(t)
	root := testRoot(t)
	var logs []*logBuffer
	for i := range 2 {
		cfg := config(t, srv.Addr())
		cfg.Root = root
		logger, lb := testLogger(t)
		cfg.Logger = logger
		logs = append(logs, lb)
		provider(t, open(t, cfg), fmt.Sprint("p", i))
	}
	obsCfg := config(t, srv.Addr())
	obsCfg.Root = root
	w := watch(t, open(t, obsCfg), "Who")
	awaitCount(t, w, 2, 0, 15*time.Second)
	c := dialWho(t, srv.Addr(), root)
	waitProviders(t, c, 2)

	run := startLoad(c, 8, 100_000)
	run.await(t, 200)
	srv.Stop()
	stopped := time.Now()
	before := run.calls.Load()
	run.await(t, before+2000)
	during := run.calls.Load() - before
	srv.Start()
	down := time.Since(stopped)

	// The restarted server still holds both providers, under their
	// leases; a third provider shows to the watcher and the client.
	cfg := config(t, srv.Addr())
	cfg.Root = root
	provider(t, open(t, cfg), "p2")
	registered := time.Now()
	seen := awaitCount(t, w, 3, 2, 15*time.Second)
	waitProviders(t, c, 3)
	clientSaw := time.Since(registered)
	run.await(t, run.calls.Load()+500)
	calls, failed, first := run.stop()

	if failed != 0 {
		t.Errorf("%d of %d calls failed while etcd restarted; want none: %v", failed, calls, first)
	}
	for i, lb := range logs {
		if lines := lb.lines("lease lost"); len(lines) != 0 {
			t.Errorf("provider p%d lost its lease across the restart: %s", i, lines[0])
		}
	}
	t.Logf("figure: etcd stopped for %v and restarted under load: %d calls while it was down, %d in all, %d failed; leases kept (nothing registered again); a provider registered after the restart reached the watcher in %v and the client in %v",
		down.Round(time.Millisecond), during, calls, failed, seen.Sub(registered).Round(time.Millisecond), clientSaw.Round(time.Millisecond))
}

// TestLeaseExpiredByPartition cuts a provider's registry off from etcd (a
// proxy holds its connections silent) until etcd expires its lease and
// deletes its key, then lets it back: the registry grants a new lease and
// registers again by itself, saying so in two warnings. A client connected
// to the provider keeps calling it throughout.
func TestLeaseExpiredByPartition(t *testing.T) {
	addr := etcdtest.Shared(t)
	root := testRoot(t)
	const ttl = 2 * time.Second
	proxy := etcdtest.NewProxy(t, addr)
	cfg := config(t, proxy.Addr())
	cfg.TTL = ttl
	logger, logs := testLogger(t)
	cfg.Logger = logger
	provider(t, open(t, cfg), "p0")
	w := watch(t, open(t, config(t, addr)), "Who")
	awaitCount(t, w, 1, 0, 15*time.Second)
	c := dialWho(t, addr, root)
	waitProviders(t, c, 1)
	callName(t, c) // connects the client to the provider

	proxy.Pause()
	paused := time.Now()
	expired := awaitCount(t, w, 0, 0, 15*time.Second)
	for range 20 {
		if got := callName(t, c); got != "p0" {
			t.Fatalf("answered by %q", got)
		}
	}
	proxy.Resume()
	resumed := time.Now()
	back := awaitCount(t, w, 1, 0, 15*time.Second)
	waitProviders(t, c, 1)
	callName(t, c)

	if took := back.Sub(resumed); took > 5*time.Second {
		t.Errorf("the provider's key came back %v after the partition ended; want within 5s", took)
	}
	var said string
	for deadline := time.Now().Add(5 * time.Second); ; {
		lost, again := logs.lines("lease lost"), logs.lines("registered again under a new lease")
		if len(lost) == 1 && len(again) == 1 {
			said = lost[0] + " / " + again[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry logged %d lease-lost and %d registered-again warnings; want one of each", len(lost), len(again))
		}
		time.Sleep(5 * time.Millisecond) // polling the log; nothing to wait on
	}
	t.Logf("figure: partition of a provider from etcd (lease TTL %v): key deleted %v into the partition; re-registered under a new lease %v after the partition ended; the client kept calling the provider throughout; the registry logged: %s",
		ttl, expired.Sub(paused).Round(time.Millisecond), back.Sub(resumed).Round(time.Millisecond), said)
}

// TestProviderKilled kills one of three provider processes with SIGKILL
// under load: etcd deletes its key once its lease expires, within the
// lease's TTL of the kill (and etcd's half-second check), and the client,
// which retries calls that may run twice, sees no call fail.
func TestProviderKilled(t *testing.T) {
	addr := etcdtest.Shared(t)
	root := testRoot(t)
	const ttl = 3 * time.Second
	var procs []*proc
	for i := range 3 {
		procs = append(procs, startProvider(t, addr, root, fmt.Sprint("p", i), ttl))
	}
	obsCfg := config(t, addr)
	obsCfg.Root = root
	w := watch(t, open(t, obsCfg), "Who")
	awaitCount(t, w, 3, 0, 15*time.Second)
	c := dialWho(t, addr, root, kiev.WithRetry(kiev.RetryPolicy{Idempotent: kiev.IdempotentMethods("Who.Name")}))
	waitProviders(t, c, 3)

	run := startLoad(c, 8, 100_000)
	run.await(t, 300)
	killed := time.Now()
	if err := procs[1].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	gone := awaitCount(t, w, 2, 2, 15*time.Second).Sub(killed)
	run.await(t, run.calls.Load()+500)
	calls, failed, first := run.stop()

	if limit := ttl + time.Second; gone > limit {
		t.Errorf("the killed provider's key went %v after the kill; want within its lease TTL %v (and etcd's expiry check), %v", gone, ttl, limit)
	}
	if failed != 0 {
		t.Errorf("%d of %d idempotent calls failed when a provider was killed; want none: %v", failed, calls, first)
	}
	t.Logf("figure: provider killed with SIGKILL under load: key deleted %v after the kill (lease TTL %v); %d calls, %d failed",
		gone.Round(time.Millisecond), ttl, calls, failed)
}

// TestDataLost restarts the etcd server without its data, as a member
// rebuilt from nothing: the lease is gone, so the provider's registry
// grants a new one and registers again, and the watchers, whose revisions
// mean nothing to the new cluster, read their sets afresh and see it.
func TestDataLost(t *testing.T) {
	srv := etcdtest.Start(t)
	root := testRoot(t)
	cfg := config(t, srv.Addr())
	cfg.Root = root
	logger, logs := testLogger(t)
	cfg.Logger = logger
	provider(t, open(t, cfg), "p0")
	obsCfg := config(t, srv.Addr())
	obsCfg.Root = root
	w := watch(t, open(t, obsCfg), "Who")
	awaitCount(t, w, 1, 0, 15*time.Second)
	c := dialWho(t, srv.Addr(), root)
	waitProviders(t, c, 1)

	srv.Stop()
	srv.Wipe()
	srv.Start()
	started := time.Now()
	// The new cluster is empty until the provider's registry notices its
	// lease is gone and registers again.
	kv := client(t, srv.Addr())
	for deadline := time.Now().Add(15 * time.Second); ; {
		resp, err := kv.Get(ctxFor(t), root+"/Who/providers/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the provider was not registered again within 15s of the restart (last read: %v, %v)", resp, err)
		}
		time.Sleep(5 * time.Millisecond) // polling etcd; the test has no watch of its own
	}
	back := time.Since(started)
	for deadline := time.Now().Add(5 * time.Second); len(logs.lines("lease lost")) == 0 || len(logs.lines("registered again under a new lease")) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the provider's registry did not report its lease lost and registered again")
		}
		time.Sleep(5 * time.Millisecond) // polling the log; nothing to wait on
	}
	// Later changes reach the watcher and the client: their watches
	// follow the new cluster's revisions.
	cfg2 := config(t, srv.Addr())
	cfg2.Root = root
	provider(t, open(t, cfg2), "p1")
	registered := time.Now()
	seen := awaitCount(t, w, 2, 0, 15*time.Second)
	waitProviders(t, c, 2)
	t.Logf("figure: etcd restarted without its data: the provider registered again under a new lease %v after the restart; a provider registered afterwards reached the watcher in %v",
		back.Round(time.Millisecond), seen.Sub(registered).Round(time.Millisecond))
}

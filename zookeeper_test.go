package kiev_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/balance"
	"github.com/kievrpc/kiev/internal/logtest"
	"github.com/kievrpc/kiev/internal/zkconn"
	"github.com/kievrpc/kiev/internal/zktest"
	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/registry/zookeeper"
)

// These tests run providers as separate processes (this test binary,
// started again in provider mode) registered in a real ZooKeeper, so that
// a provider can be killed with SIGKILL or frozen with SIGSTOP.

const (
	envProvider = "KIEV_TEST_PROVIDER" // the provider's name; set in provider mode
	envZK       = "KIEV_TEST_PROVIDER_ZK"
	envRoot     = "KIEV_TEST_PROVIDER_ROOT"
	envSession  = "KIEV_TEST_PROVIDER_SESSION" // the providers' session timeout, if not providerSession

	providerSession = 4 * time.Second // the providers' ZooKeeper session timeout
)

// Work and Charge take args milliseconds. Work may run twice (the tests
// mark it idempotent); Charge may not.
func (w *Who) Work(ctx context.Context, ms int, reply *string) error {
	time.Sleep(time.Duration(ms) * time.Millisecond) // simulated work, not synchronization
	*reply = w.name
	return nil
}

func (w *Who) Charge(ctx context.Context, ms int, reply *string) error {
	return w.Work(ctx, ms, reply)
}

// runProvider serves Who named name, registered in the ZooKeeper the
// environment names, until its standard input closes.
func runProvider(name string) int {
	session := providerSession
	if s := os.Getenv(envSession); s != "" {
		session, _ = time.ParseDuration(s)
	}
	reg, err := zookeeper.New(zookeeper.Config{
		Servers:        []string{os.Getenv(envZK)},
		Root:           os.Getenv(envRoot),
		SessionTimeout: session,
		// What the registry and its ZooKeeper client say (connections,
		// sessions) goes to the test's output, tagged with the provider.
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)).With("provider", name),
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
	name string
	addr string
	cmd  *exec.Cmd
	in   io.WriteCloser
}

// startProvider starts a provider process registered under root in the
// ZooKeeper at zkAddr; it is stopped when the test ends.
func startProvider(t *testing.T, zkAddr, root, name string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envProvider+"="+name, envZK+"="+zkAddr, envRoot+"="+root)
	cmd.Env = append(cmd.Env, env...)
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
	p := &proc{name: name, cmd: cmd, in: in}
	t.Cleanup(func() {
		if p.cmd.ProcessState != nil {
			return // stopped by the test
		}
		p.cmd.Process.Signal(syscall.SIGCONT)
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

// stop shuts the provider down gracefully and waits for it to exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.in.Close()
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("provider %s exited with %v", p.name, err)
	}
}

// zkRoot returns a registry root unique to the test.
func zkRoot(t *testing.T) string {
	return fmt.Sprintf("/kiev-test/%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano())
}

func zkDial(t *testing.T, zkAddr, root string, opts ...kiev.DialOption) *kiev.Client {
	t.Helper()
	return dial(t, "zookeeper://"+zkAddr+root+"/Who?session_timeout=4s", opts...)
}

// watchZK returns a watcher of Who on its own ZooKeeper session.
func watchZK(t *testing.T, zkAddr, root string) registry.Watcher {
	t.Helper()
	reg, err := zookeeper.New(zookeeper.Config{Servers: []string{zkAddr}, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	w, err := reg.Watch(context.Background(), "Who")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

// awaitCount waits until w reports n providers and returns when.
func awaitCount(t *testing.T, w registry.Watcher, n int, within time.Duration) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		set, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %d providers in ZooKeeper: %v", n, err)
		}
		if len(set) == n {
			return time.Now()
		}
	}
}

func TestZooKeeperBalancing(t *testing.T) {
	zkAddr := zktest.Shared(t)
	root := zkRoot(t)
	for i := range 3 {
		startProvider(t, zkAddr, root, fmt.Sprint("p", i))
	}
	t.Run("RoundRobin", func(t *testing.T) {
		c := zkDial(t, zkAddr, root)
		waitProviders(t, c, 3)
		counts := map[string]int{}
		for range 300 {
			counts[callName(t, c, context.Background())]++
		}
		if len(counts) != 3 || counts["p0"] != 100 || counts["p1"] != 100 || counts["p2"] != 100 {
			t.Errorf("300 calls spread as %v; want 100 on each of p0, p1, p2", counts)
		}
	})
	t.Run("ConsistentHash", func(t *testing.T) {
		// Two clients, as two processes would be, agree on every key.
		c1 := zkDial(t, zkAddr, root, kiev.WithBalancer(balance.ConsistentHash()))
		c2 := zkDial(t, zkAddr, root, kiev.WithBalancer(balance.ConsistentHash()))
		waitProviders(t, c1, 3)
		waitProviders(t, c2, 3)
		used := map[string]int{}
		for k := range 60 {
			ctx := kiev.WithHashKey(context.Background(), fmt.Sprint("device-", k))
			first := callName(t, c1, ctx)
			used[first]++
			for range 3 {
				if got := callName(t, c2, ctx); got != first {
					t.Fatalf("key device-%d went to %s, then to %s", k, first, got)
				}
			}
		}
		if len(used) != 3 {
			t.Errorf("60 keys used %d providers: %v", len(used), used)
		}
	})
}

func TestZooKeeperKeysMove(t *testing.T) {
	zkAddr := zktest.Shared(t)
	root := zkRoot(t)
	const n = 4
	procs := make([]*proc, n)
	for i := range n {
		procs[i] = startProvider(t, zkAddr, root, fmt.Sprint("p", i))
	}
	c := zkDial(t, zkAddr, root, kiev.WithBalancer(balance.ConsistentHash()))
	waitProviders(t, c, n)
	const keys = 2000
	placement := func() []string {
		homes := make([]string, keys)
		for k := range keys {
			homes[k] = callName(t, c, kiev.WithHashKey(context.Background(), fmt.Sprint("device-", k)))
		}
		return homes
	}
	before := placement()

	// p3 leaves gracefully: only its keys move.
	procs[n-1].stop(t)
	waitProviders(t, c, n-1)
	after := placement()
	var moved, owned int
	for k := range keys {
		if before[k] == "p3" {
			owned++
		}
		if before[k] != after[k] {
			moved++
			if before[k] != "p3" {
				t.Fatalf("key device-%d moved from %s to %s when p3 left", k, before[k], after[k])
			}
		}
	}
	if moved != owned {
		t.Fatalf("%d keys moved, but p3 held %d", moved, owned)
	}
	leave := float64(moved) / keys

	// p4 joins: only keys that move to it move.
	startProvider(t, zkAddr, root, "p4")
	waitProviders(t, c, n)
	joined := placement()
	moved = 0
	for k := range keys {
		if after[k] != joined[k] {
			moved++
			if joined[k] != "p4" {
				t.Fatalf("key device-%d moved from %s to %s when p4 joined", k, after[k], joined[k])
			}
		}
	}
	join := float64(moved) / keys
	for _, m := range []struct {
		what   string
		share  float64
		expect float64
	}{{"leave", leave, 1.0 / n}, {"join", join, 1.0 / n}} {
		if m.share < m.expect*0.6 || m.share > m.expect*1.4 {
			t.Errorf("when one of %d providers %s, %.3f of keys moved; want about 1/%d = %.3f", n, m.what+"s", m.share, n, m.expect)
		}
	}
	t.Logf("consistent hash over %d providers, %d keys: %.3f moved when one left, %.3f when one joined (1/N = %.3f)", n, keys, leave, join, 1.0/n)
}

func TestZooKeeperClientBeforeService(t *testing.T) {
	zkAddr := zktest.Shared(t)
	root := zkRoot(t)
	c := zkDial(t, zkAddr, root)
	answer := make(chan string, 1)
	fail := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var name string
		if err := c.Call(ctx, "Who.Name", 0, &name); err != nil {
			fail <- err
			return
		}
		answer <- name
	}()
	startProvider(t, zkAddr, root, "late")
	select {
	case name := <-answer:
		if name != "late" {
			t.Fatalf("answered by %q", name)
		}
	case err := <-fail:
		t.Fatalf("call made before the service started: %v", err)
	}
}

// loadResult counts the outcomes of a load run.
type loadResult struct {
	mu       sync.Mutex
	ok       map[string]int
	failed   map[string][]error
	slowest  time.Duration // longest time a failed call took to fail
	firstErr time.Time
}

func (r *loadResult) add(method string, err error, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.ok[method]++
		return
	}
	if r.firstErr.IsZero() {
		r.firstErr = time.Now()
	}
	r.failed[method] = append(r.failed[method], err)
	r.slowest = max(r.slowest, took)
}

// load runs workers that call Work and Charge (2 ms each) on c until stop
// is closed or each has made maxCalls calls.
func load(c *kiev.Client, workers, maxCalls int, stop <-chan struct{}, calls *atomic.Int64) *loadResult {
	r := &loadResult{ok: map[string]int{}, failed: map[string][]error{}}
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			for n := range maxCalls {
				select {
				case <-stop:
					return
				default:
				}
				method := "Who.Work"
				if (i+n)%2 == 1 {
					method = "Who.Charge"
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				start := time.Now()
				err := c.Call(ctx, method, 2, new(string))
				cancel()
				r.add(method, err, time.Since(start))
				calls.Add(1)
			}
		})
	}
	wg.Wait()
	return r
}

// loadRun is a load running in the background.
type loadRun struct {
	calls atomic.Int64
	quit  chan struct{}
	done  chan struct{}
	res   *loadResult
}

// startLoad starts load on c.
func startLoad(c *kiev.Client, workers, maxCalls int) *loadRun {
	r := &loadRun{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		r.res = load(c, workers, maxCalls, r.quit, &r.calls)
		close(r.done)
	}()
	return r
}

// await waits until the load has made n calls.
func (r *loadRun) await(t *testing.T, n int64) {
	t.Helper()
	for r.calls.Load() < n {
		select {
		case <-r.done:
			t.Fatalf("load ended after %d calls, before %d", r.calls.Load(), n)
		default:
			time.Sleep(time.Millisecond) // polling a counter the load goroutines advance
		}
	}
}

// stop ends the load and returns its outcome.
func (r *loadRun) stop() *loadResult {
	close(r.quit)
	<-r.done
	return r.res
}

func TestZooKeeperProviderKilled(t *testing.T) {
	zkAddr := zktest.Shared(t)
	root := zkRoot(t)
	var procs []*proc
	for i := range 3 {
		procs = append(procs, startProvider(t, zkAddr, root, fmt.Sprint("p", i)))
	}
	w := watchZK(t, zkAddr, root)
	awaitCount(t, w, 3, 30*time.Second)
	c := zkDial(t, zkAddr, root, kiev.WithRetry(kiev.RetryPolicy{Idempotent: kiev.IdempotentMethods("Who.Work")}))
	waitProviders(t, c, 3)

	run := startLoad(c, 16, 3000)
	run.await(t, 500)

	victim := procs[1]
	killed := time.Now()
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	noticed := awaitEjected(t, c, victim.addr).Sub(killed)
	run.await(t, run.calls.Load()+1000)
	gone := awaitCount(t, w, 2, 30*time.Second)
	res := run.stop()

	if n := len(res.failed["Who.Work"]); n != 0 {
		t.Errorf("%d idempotent calls failed when a provider was killed; want none: %v", n, res.failed["Who.Work"][0])
	}
	for _, err := range res.failed["Who.Charge"] {
		if !errors.Is(err, kiev.ErrShutdown) || !strings.Contains(err.Error(), "lost") {
			t.Errorf("non-idempotent call failed with %v; want a lost-connection ErrShutdown", err)
		}
	}
	if res.slowest > time.Second {
		t.Errorf("a failed call took %v to fail; it should fail at once", res.slowest)
	}
	t.Logf("SIGKILL under load: %d calls ok (%d Work, %d Charge); Work failed %d, Charge failed %d (calls in flight on the dead connection); first failure %v after the kill; provider ejected %v after the kill; ZooKeeper dropped its node %v after the kill (session timeout %v)",
		res.ok["Who.Work"]+res.ok["Who.Charge"], res.ok["Who.Work"], res.ok["Who.Charge"], len(res.failed["Who.Work"]), len(res.failed["Who.Charge"]),
		sinceOrNone(res.firstErr, killed), noticed.Round(time.Millisecond), gone.Sub(killed).Round(time.Millisecond), providerSession)
}

func sinceOrNone(at, from time.Time) string {
	if at.IsZero() {
		return "none"
	}
	return at.Sub(from).Round(time.Millisecond).String()
}

func TestZooKeeperProviderFrozen(t *testing.T) {
	zkAddr := zktest.Shared(t)
	root := zkRoot(t)
	// The providers keep ZooKeeper's default session, 10s; the client
	// keeps kiev's default heartbeat.
	const session = zookeeper.DefaultSessionTimeout
	var procs []*proc
	for i := range 3 {
		procs = append(procs, startProvider(t, zkAddr, root, fmt.Sprint("p", i), envSession+"="+session.String()))
	}
	c := zkDial(t, zkAddr, root,
		kiev.WithRetry(kiev.RetryPolicy{Idempotent: kiev.IdempotentMethods("Who.Work", "Who.Charge")}))
	waitProviders(t, c, 3)

	run := startLoad(c, 16, 3000)
	run.await(t, 300)

	victim := procs[2]
	if err := victim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	// The frozen provider neither answers nor closes its connection; only
	// the heartbeat can tell.
	noticed := awaitEjected(t, c, victim.addr).Sub(frozen)
	run.await(t, run.calls.Load()+500)
	res := run.stop()
	victim.cmd.Process.Signal(syscall.SIGCONT)

	if n := len(res.failed["Who.Work"]) + len(res.failed["Who.Charge"]); n != 0 {
		t.Errorf("%d idempotent calls failed while a provider was frozen; want none: %v", n, append(res.failed["Who.Work"], res.failed["Who.Charge"]...)[0])
	}
	if limit := kiev.DefaultHeartbeatTimeout + 3*kiev.DefaultHeartbeatInterval; noticed > limit || noticed >= session {
		t.Errorf("frozen provider noticed after %v; want within %v (the heartbeat timeout and a few probes), before its ZooKeeper session of %v ends", noticed, limit, session)
	}
	t.Logf("SIGSTOP under load: noticed by the default heartbeat after %v (timeout %v; ZooKeeper session %v); %d calls ok, 0 failed",
		noticed.Round(time.Millisecond), kiev.DefaultHeartbeatTimeout, session, res.ok["Who.Work"]+res.ok["Who.Charge"])
}

func TestZooKeeperRestartUnderLoad(t *testing.T) {
	zks := zktest.Start(t)
	root := zkRoot(t)
	for i := range 2 {
		startProvider(t, zks.Addr(), root, fmt.Sprint("p", i))
	}
	c := zkDial(t, zks.Addr(), root)
	waitProviders(t, c, 2)

	run := startLoad(c, 8, 5000)
	run.await(t, 200)

	zks.Stop()
	stopped := time.Now()
	during := run.calls.Load()
	run.await(t, during+1000)
	during = run.calls.Load() - during
	zks.Start()
	down := time.Since(stopped)
	w := watchZK(t, zks.Addr(), root)
	awaitCount(t, w, 2, 30*time.Second)
	// Watches are armed again: a provider that starts now is seen.
	startProvider(t, zks.Addr(), root, "p2")
	waitProviders(t, c, 3)
	run.await(t, run.calls.Load()+300)
	res := run.stop()

	if n := len(res.failed["Who.Work"]) + len(res.failed["Who.Charge"]); n != 0 {
		t.Errorf("%d calls failed while ZooKeeper was down; want none: %v", n, append(res.failed["Who.Work"], res.failed["Who.Charge"]...)[0])
	}
	t.Logf("ZooKeeper stopped for %v and restarted: %d calls made while it was down, %d in all, none failed; registrations whole after restart", down.Round(time.Millisecond), during, run.calls.Load())
}

// awaitEjected waits until c shows the provider at addr out of balancing,
// and returns when it saw it.
func awaitEjected(t *testing.T, c *kiev.Client, addr string) time.Time {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := true
		for _, p := range c.Providers() {
			if p.Instance.Address == addr && !p.Ejected {
				out = false
			}
		}
		if out {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("provider %s still in balancing 10s later: %+v", addr, c.Providers())
		}
		time.Sleep(5 * time.Millisecond) // polling the client's view; nothing to wait on
	}
}

func TestZooKeeperSessionExpiry(t *testing.T) {
	zkAddr := zktest.Shared(t)
	root := zkRoot(t)
	// The provider reaches ZooKeeper through a proxy the test can pause,
	// as a network partition would; the client and the test's watcher
	// reach it directly.
	proxy := zktest.NewProxy(t, zkAddr)
	p := startProvider(t, proxy.Addr(), root, "p0")
	w := watchZK(t, zkAddr, root)
	awaitCount(t, w, 1, 30*time.Second)
	c := zkDial(t, zkAddr, root)
	waitProviders(t, c, 1)
	callName(t, c, context.Background())

	proxy.Pause()
	paused := time.Now()
	expired := awaitCount(t, w, 0, 30*time.Second)
	// ZooKeeper dropped the provider, but it still serves: the client
	// keeps calling it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 20 {
		if got := callName(t, c, ctx); got != "p0" {
			t.Fatalf("answered by %q", got)
		}
	}
	// The client's own watch sees the deletion a moment after the test's.
	unlisted := func() bool {
		ps := c.Providers()
		return len(ps) == 1 && ps[0].Unlisted && ps[0].Instance.Address == p.addr
	}
	for wait := time.Now().Add(10 * time.Second); !unlisted() && time.Now().Before(wait); {
		time.Sleep(5 * time.Millisecond) // polling the client's view; nothing to wait on
	}
	if !unlisted() {
		t.Errorf("client's providers while the registry lists none: %+v; want p0, kept though unlisted", c.Providers())
	}

	proxy.Resume()
	resumed := time.Now()
	back := awaitCount(t, w, 1, 30*time.Second)
	if took := back.Sub(resumed); took > providerSession {
		t.Errorf("the provider's node came back %v after its session expired and ZooKeeper was reachable again; want within the session timeout %v", took, providerSession)
	}
	// The client takes the provider back as a listed one.
	for deadline := time.Now().Add(10 * time.Second); ; {
		ps := c.Providers()
		if len(ps) == 1 && !ps[0].Unlisted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("client's providers 10s after re-registration: %+v", ps)
		}
		time.Sleep(5 * time.Millisecond) // polling the client's view; nothing to wait on
	}
	t.Logf("session expiry: node dropped %v after the partition began (session %v); re-registered %v after the partition ended; every call succeeded throughout",
		expired.Sub(paused).Round(time.Millisecond), providerSession, back.Sub(resumed).Round(time.Millisecond))
}

func TestZooKeeperClientSessionExpiry(t *testing.T) {
	zkAddr := zktest.Shared(t)
	root := zkRoot(t)
	// The client and p0 reach ZooKeeper through a proxy; the client's
	// session (2s) is shorter than p0's (4s), so once ZooKeeper drops p0's
	// node, the client's session has expired too.
	proxy := zktest.NewProxy(t, zkAddr)
	startProvider(t, proxy.Addr(), root, "p0")
	w := watchZK(t, zkAddr, root)
	awaitCount(t, w, 1, 30*time.Second)
	c := dial(t, "zookeeper://"+proxy.Addr()+root+"/Who?session_timeout=2s")
	waitProviders(t, c, 1)

	proxy.Pause()
	startProvider(t, zkAddr, root, "p1") // registers while the client is cut off
	awaitCount(t, w, 2, 30*time.Second)
	awaitCount(t, w, 1, 30*time.Second) // p0's session expired, so the client's has
	for range 10 {
		if got := callName(t, c, context.Background()); got != "p0" {
			t.Fatalf("while cut off from ZooKeeper the client called %q; it knows only p0", got)
		}
	}
	proxy.Resume()
	// The client's watch comes back with its new session and finds both.
	waitProviders(t, c, 2)
	seen := map[string]bool{}
	for range 10 {
		seen[callName(t, c, context.Background())] = true
	}
	if !seen["p0"] || !seen["p1"] {
		t.Fatalf("after its session expired and came back, the client called %v; want p0 and p1", seen)
	}
}

// A client dialed with a zookeeper:// target logs what its registry
// reports (here a malformed provider node) through its own logger.
func TestZooKeeperClientLogsRegistryWarnings(t *testing.T) {
	zkAddr := zktest.Shared(t)
	root := zkRoot(t)
	conn, _, err := zk.Connect([]string{zkAddr}, 4*time.Second, zk.WithLogger(zkconn.Logger{Logger: slog.New(slog.DiscardHandler)}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dir := root + "/Who/providers"
	for _, p := range []string{"/kiev-test", root, root + "/Who", dir} {
		if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("Create(%s): %v", p, err)
		}
	}
	if _, err := conn.Create(dir+"/tcp-127.0.0.1:7003", []byte("not json"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	logger, logs := logtest.New(t)
	zkDial(t, zkAddr, root, kiev.WithLogger(logger))
	logs.WaitFor(t, 0, "skipping a malformed provider node", "tcp-127.0.0.1:7003")
}

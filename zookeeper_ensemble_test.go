package kiev_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/internal/zktest"
	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/registry/zookeeper"
)

// The ZooKeeper ensemble tests each start a three-member ensemble of their
// own (zktest.StartEnsemble) and register three providers in it: kiev
// Servers in this process, each with a registry, so a ZooKeeper session,
// of its own. A client follows them through a registry of its own and
// calls them in a loop, while the test kills, stops or cuts off members.
// A monitor, on another session straight to the members, records every
// provider set the ensemble delivers. Each test logs its figures on a line
// that begins "figure: "; RELIABILITY.md keeps them.

// ensembleSession is the session timeout of the tests' registries. The
// ensembles' tickTime of 500 ms allows 1 s to 10 s.
const ensembleSession = 4 * time.Second

// Steady is the service of the ensemble tests' providers.
type Steady struct{ name string }

// Name answers with the provider's name. It may run twice.
func (s *Steady) Name(ctx context.Context, _ int, reply *string) error {
	*reply = s.name
	return nil
}

// ensembleRig is one test's ensemble, providers, client and records.
type ensembleRig struct {
	t       *testing.T
	zk      *zktest.Ensemble
	servers []string // what the providers' and the client's registries dial
	root    string
	log     *zktest.Sessions
	obs     *zk.Conn // straight to the members, for the nodes' stats
}

// ensembleProvider is a provider of Steady registered in the ensemble.
type ensembleProvider struct {
	name string
	addr string
}

// newEnsembleRig prepares a rig on e whose registries dial servers (the
// members, or proxies in front of them).
func newEnsembleRig(t *testing.T, e *zktest.Ensemble, servers []string) *ensembleRig {
	r := &ensembleRig{
		t:       t,
		zk:      e,
		servers: servers,
		root:    "/kiev-test/" + strings.ReplaceAll(t.Name(), "/", "_"),
		log:     zktest.NewSessions(),
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("what the registries, servers and client logged:\n%s", r.log.Tail(64<<10))
		}
	})
	obs, events, err := zk.Connect(e.Servers(), 10*time.Second, zk.WithLogger(quietZK{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		obs.Close()
		for range events {
		}
	})
	r.obs = obs
	return r
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

// registry opens a registry for who, closed when the test ends.
func (r *ensembleRig) registry(who string) *zookeeper.Registry {
	r.t.Helper()
	reg, err := zookeeper.New(zookeeper.Config{
		Servers:        r.servers,
		Root:           r.root,
		SessionTimeout: ensembleSession,
		Logger:         r.log.Logger(who),
	})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { reg.Close() })
	return reg
}

// startProvider serves Steady as name, registered through a registry of
// its own, until the test ends.
func (r *ensembleRig) startProvider(name string) *ensembleProvider {
	t := r.t
	t.Helper()
	reg := r.registry(name)
	srv := kiev.NewServer(kiev.WithRegistry(reg), kiev.WithLogger(r.log.Logger(name)))
	if err := srv.Register(&Steady{name: name}); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(l)
	}()
	t.Cleanup(func() { // before the registry's Close, which the cleanup order runs next
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-served
	})
	return &ensembleProvider{name: name, addr: l.Addr().String()}
}

// dial returns a client of Steady that follows it through a registry of
// its own and may retry Steady.Name on another provider.
func (r *ensembleRig) dial() *kiev.Client {
	t := r.t
	t.Helper()
	reg := r.registry("client")
	c, err := kiev.Dial("Steady", kiev.WithRegistry(reg), kiev.WithLogger(r.log.Logger("client")),
		kiev.WithRetry(kiev.RetryPolicy{Idempotent: kiev.IdempotentMethods("Steady.Name")}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// startEnsembleRig starts, on e, n providers (p0, p1, ...) and a client
// whose registries dial servers, waits until the client and a monitor see
// every provider, and starts the load, which has made 200 calls when it
// returns.
func startEnsembleRig(t *testing.T, e *zktest.Ensemble, servers []string, n int) (*ensembleRig, []*ensembleProvider, *kiev.Client, *setMonitor, *ensembleLoad) {
	r := newEnsembleRig(t, e, servers)
	var ps []*ensembleProvider
	for i := range n {
		ps = append(ps, r.startProvider(fmt.Sprint("p", i)))
	}
	c := r.dial()
	awaitListed(t, c, addrsOf(ps), 30*time.Second)
	m := r.monitor(addrsOf(ps))
	load := startEnsembleLoad(c)
	t.Cleanup(load.stop)
	load.awaitCalls(t, 200)
	return r, ps, c, m, load
}

func addrsOf(ps []*ensembleProvider) []string {
	addrs := make([]string, len(ps))
	for i, p := range ps {
		addrs[i] = p.addr
	}
	return addrs
}

// awaitListed waits until c lists exactly the providers at addrs, none
// ejected or unlisted.
func awaitListed(t *testing.T, c *kiev.Client, addrs []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var got []string
		for _, p := range c.Providers() {
			if !p.Ejected && !p.Unlisted {
				got = append(got, p.Instance.Address)
			}
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(addrs))
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client lists %v after %v; want %v: %+v", got, within, want, c.Providers())
		}
		time.Sleep(5 * time.Millisecond) // polling the client's view; nothing to wait on
	}
}

// nodePath is where the registry keeps the provider at addr, as
// registry/zookeeper's package doc lays it out.
func (r *ensembleRig) nodePath(addr string) string {
	return r.root + "/Steady/providers/tcp-" + url.PathEscape(addr)
}

// stats returns the stat of each provider's node (nil where there is
// none), retrying while the observer's session reconnects.
func (r *ensembleRig) stats(ps []*ensembleProvider) map[string]*zk.Stat {
	t := r.t
	t.Helper()
	out := make(map[string]*zk.Stat, len(ps))
	deadline := time.Now().Add(20 * time.Second)
	for _, p := range ps {
		for {
			ok, stat, err := r.obs.Exists(r.nodePath(p.addr))
			if err == nil {
				if ok {
					out[p.addr] = stat
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("reading %s: %v", r.nodePath(p.addr), err)
			}
			time.Sleep(20 * time.Millisecond) // the observer reconnects by itself; poll its answer
		}
	}
	return out
}

// lost lists the registrations of ps that did not survive since before:
// a provider missing from a set a monitor was given, or a node that is
// gone or was made again (by a new session, after the old one expired).
func (r *ensembleRig) lost(ps []*ensembleProvider, before map[string]*zk.Stat, ms ...*setMonitor) []string {
	r.t.Helper()
	after := r.stats(ps)
	var lost []string
	for _, p := range ps {
		b, a := before[p.addr], after[p.addr]
		for i, m := range ms {
			if n := m.missing(p.addr); n > 0 {
				lost = append(lost, fmt.Sprintf("%s missing from %d of the %d sets monitor %d was given", p.name, n, m.count(), i))
			}
		}
		switch {
		case a == nil:
			lost = append(lost, p.name+"'s node is gone")
		case b == nil:
			lost = append(lost, p.name+"'s node was missing before")
		case a.Czxid != b.Czxid || a.EphemeralOwner != b.EphemeralOwner:
			lost = append(lost, fmt.Sprintf("%s's node was made again: by session %#x at zxid %#x, before by %#x at %#x",
				p.name, a.EphemeralOwner, a.Czxid, b.EphemeralOwner, b.Czxid))
		}
	}
	return lost
}

// setMonitor follows Steady through a registry of its own, straight to
// the members, and counts the sets lacking a provider it must keep.
type setMonitor struct {
	done chan struct{}

	mu      sync.Mutex
	armed   bool           // counting: every set must hold every provider in want
	first   time.Time      // when the first set came
	sets    int            // counted
	absent  map[string]int // by address in want: sets without it
	want    []string
	changed chan struct{}
}

// monitor starts a setMonitor of the providers at addrs and waits until it
// counts, from the first set that holds them all: a new session may first
// read a member that has yet to apply the latest writes.
func (r *ensembleRig) monitor(addrs []string) *setMonitor {
	r.t.Helper()
	m := r.startMonitor(addrs, false)
	m.await(r.t, func() bool { return m.armed }, 30*time.Second)
	return m
}

// startMonitor starts a setMonitor of the providers at addrs, counting
// from its first set if armed, and returns at once: its Watch waits for
// the ensemble to answer, as a client's does when it starts during a
// failure.
func (r *ensembleRig) startMonitor(addrs []string, armed bool) *setMonitor {
	t := r.t
	t.Helper()
	reg, err := zookeeper.New(zookeeper.Config{Servers: r.zk.Servers(), Root: r.root, SessionTimeout: ensembleSession})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &setMonitor{done: make(chan struct{}), armed: armed, absent: map[string]int{}, want: addrs, changed: make(chan struct{})}
	go func() {
		defer close(m.done)
		w, err := reg.Watch(ctx, "Steady")
		if err != nil {
			return // canceled by the test's end
		}
		defer w.Stop()
		for {
			set, err := w.Next(ctx)
			if err != nil {
				return
			}
			m.add(set)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-m.done
		reg.Close()
	})
	return m
}

func (m *setMonitor) add(set []registry.Instance) {
	m.mu.Lock()
	defer m.mu.Unlock()
	has := map[string]bool{}
	for _, in := range set {
		has[in.Address] = true
	}
	all := true
	for _, a := range m.want {
		all = all && has[a]
	}
	m.armed = m.armed || all
	if m.first.IsZero() {
		m.first = time.Now()
	}
	if m.armed {
		m.sets++
		for _, a := range m.want {
			if !has[a] {
				m.absent[a]++
			}
		}
	}
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *setMonitor) missing(addr string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.absent[addr]
}

// firstSet returns when the first set came, or the zero time.
func (m *setMonitor) firstSet() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.first
}

func (m *setMonitor) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sets
}

// await waits until cond, called with m.mu held, holds.
func (m *setMonitor) await(t *testing.T, cond func() bool, within time.Duration) {
	t.Helper()
	timeout := time.NewTimer(within)
	defer timeout.Stop()
	for {
		m.mu.Lock()
		ok, changed := cond(), m.changed
		m.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-timeout.C:
			t.Fatalf("the monitor's sets did not come to what the test waits for within %v", within)
		}
	}
}

// ensembleLoad calls Steady.Name from a few workers, each at most one
// call every loadTick, until stopped or until each made loadMaxCalls.
type ensembleLoad struct {
	quit     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup

	calls, failed atomic.Int64
	lastOK        atomic.Int64 // UnixNano of the latest answer
	maxGap        atomic.Int64 // the longest time between two answers, ns

	mu       sync.Mutex
	firstErr error
	byName   map[string]int
}

const (
	loadWorkers  = 4
	loadTick     = 2 * time.Millisecond // so at most 2,000 calls a second in all
	loadMaxCalls = 60_000               // each: two minutes at that pace
)

func startEnsembleLoad(c *kiev.Client) *ensembleLoad {
	l := &ensembleLoad{quit: make(chan struct{}), byName: map[string]int{}}
	for range loadWorkers {
		l.wg.Go(func() {
			tick := time.NewTicker(loadTick)
			defer tick.Stop()
			for range loadMaxCalls {
				select {
				case <-l.quit:
					return
				case <-tick.C:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				var name string
				err := c.Call(ctx, "Steady.Name", 0, &name)
				cancel()
				l.record(name, err)
			}
		})
	}
	return l
}

func (l *ensembleLoad) record(name string, err error) {
	l.calls.Add(1)
	if err != nil {
		l.failed.Add(1)
		l.mu.Lock()
		if l.firstErr == nil {
			l.firstErr = err
		}
		l.mu.Unlock()
		return
	}
	now := time.Now().UnixNano()
	if prev := l.lastOK.Swap(now); prev != 0 {
		for gap := now - prev; ; {
			m := l.maxGap.Load()
			if gap <= m || l.maxGap.CompareAndSwap(m, gap) {
				break
			}
		}
	}
	l.mu.Lock()
	l.byName[name]++
	l.mu.Unlock()
}

// stop ends the load and waits for its workers.
func (l *ensembleLoad) stop() {
	l.stopOnce.Do(func() { close(l.quit) })
	l.wg.Wait()
}

// awaitCalls waits until the load has made n more calls.
func (l *ensembleLoad) awaitCalls(t *testing.T, n int64) {
	t.Helper()
	target := l.calls.Load() + n
	within := time.Duration(n)*loadTick + 30*time.Second
	deadline := time.Now().Add(within)
	for l.calls.Load() < target {
		if time.Now().After(deadline) {
			t.Fatalf("the load made %d calls, not %d, in %v", l.calls.Load(), target, within)
		}
		time.Sleep(time.Millisecond) // polling a counter the workers advance
	}
}

// answered returns how many calls name answered.
func (l *ensembleLoad) answered(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byName[name]
}

// check fails the test if a call failed, and returns the figures of the
// load: "N calls, 0 failed, longest gap between answers D".
func (l *ensembleLoad) check(t *testing.T) string {
	t.Helper()
	if n := l.failed.Load(); n > 0 {
		l.mu.Lock()
		err := l.firstErr
		l.mu.Unlock()
		t.Errorf("%d of %d calls failed; want none; the first: %v", n, l.calls.Load(), err)
	}
	return fmt.Sprintf("%d calls, %d failed, longest gap between answers %v",
		l.calls.Load(), l.failed.Load(), time.Duration(l.maxGap.Load()).Round(time.Millisecond))
}

// checkLost fails the test for each registration lost and returns the
// figure: "0 of 3 registrations lost".
func checkLost(t *testing.T, lost []string, n int) string {
	t.Helper()
	for _, l := range lost {
		t.Errorf("registration lost: %s", l)
	}
	return fmt.Sprintf("%d of %d registrations lost", len(lost), n)
}

// checkExpired fails the test if a registry's session expired among es.
func checkExpired(t *testing.T, es []zktest.SessionEvent) {
	t.Helper()
	for _, e := range es {
		if e.What == zktest.Expired {
			t.Errorf("%s's session expired at %s (server %s)", e.Who, e.At.Format("15:04:05.000"), e.Server)
		}
	}
}

// TestZooKeeperEnsembleLeaderCrash kills the leader with SIGKILL while
// providers are registered and a client calls them: the other two elect
// a new one, the sessions carry on in it, no registration is lost, no
// call fails and calls go on throughout. It measures the time until the
// ensemble has a new leader and until a registry can register again.
func TestZooKeeperEnsembleLeaderCrash(t *testing.T) {
	e := zktest.StartEnsemble(t, 3)
	r, ps, _, m, load := startEnsembleRig(t, e, e.Servers(), 3)
	before := r.stats(ps)
	// The probe registers once now, so that it holds a session when the
	// leader dies, and again after.
	probe := r.registry("probe")
	probeIn := func(port int) registry.Instance {
		return registry.Instance{Service: "Probe", Network: "tcp", Address: fmt.Sprintf("127.0.0.1:%d", port)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := probe.Register(ctx, probeIn(1)); err != nil {
		t.Fatal(err)
	}

	leader := e.AwaitLeader(10 * time.Second)
	leader.Kill()
	killed := time.Now()
	callsAtKill := load.calls.Load()
	// A watcher started now reads during the election: its every set
	// must hold every provider, the first included.
	late := r.startMonitor(addrsOf(ps), true)
	writable := make(chan error, 1)
	var wrote time.Time
	go func() {
		err := probe.Register(ctx, probeIn(2))
		wrote = time.Now()
		writable <- err
	}()
	next := e.AwaitLeader(10 * time.Second)
	elected := time.Now()
	if err := <-writable; err != nil {
		t.Fatalf("Register after the leader's crash: %v", err)
	}
	callsMeanwhile := load.calls.Load() - callsAtKill
	late.await(t, func() bool { return late.sets > 0 }, 30*time.Second)
	load.awaitCalls(t, 500)
	load.stop()

	lost := checkLost(t, r.lost(ps, before, m, late), len(ps))
	events := r.log.Since(killed)
	checkExpired(t, events)
	t.Logf("figure: leader crash (SIGKILL of %s): new leader (%s) after %v, registrations writable after %v; %s (%d between the kill and writable); %s; %d sessions reconnected, none expired; a watcher started at the kill got its first set %v after it, whole",
		leader, next, elected.Sub(killed).Round(10*time.Millisecond), wrote.Sub(killed).Round(10*time.Millisecond),
		load.check(t), callsMeanwhile, lost, zktest.Count(events, zktest.Established), late.firstSet().Sub(killed).Round(10*time.Millisecond))
}

// TestZooKeeperEnsembleQuorumLoss stops two of the three members, for
// longer than the sessions' timeout: the last one serves no one, yet the
// client calls on the providers it knows and nothing is deregistered. A
// provider starts meanwhile. Once the two are back, the registrations are
// whole, in the same sessions, and the new provider is found and called.
func TestZooKeeperEnsembleQuorumLoss(t *testing.T) {
	e := zktest.StartEnsemble(t, 3)
	r, ps, c, m, load := startEnsembleRig(t, e, e.Servers(), 3)
	before := r.stats(ps)

	leader := e.AwaitLeader(10 * time.Second)
	stopped := []*zktest.Server{leader} // and one follower
	var last *zktest.Server
	for _, mem := range e.Members {
		switch {
		case mem == leader:
		case last == nil:
			last = mem
		default:
			stopped = append(stopped, mem)
		}
	}
	stop := time.Now()
	for _, mem := range stopped {
		mem.Stop()
	}
	// The last member stops serving once it finds itself alone.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := last.Mode(time.Second); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still serves 10s after two of three members stopped: %s", last, e.Modes())
		}
		time.Sleep(10 * time.Millisecond) // polling the member; nothing to wait on
	}
	lostQuorum := time.Now()
	callsAtStop := load.calls.Load()
	late := r.startProvider("p3")
	// A watcher started now, when no member serves, waits: its first set,
	// once the quorum is back, holds every provider.
	watcher := r.startMonitor(addrsOf(ps), true)
	// The outage lasts longer than the sessions' timeout: that they
	// outlive it is what is under test. All along, the client lists the
	// providers it knew.
	for end := stop.Add(ensembleSession + time.Second); time.Now().Before(end); {
		awaitListed(t, c, addrsOf(ps), 0)
		time.Sleep(50 * time.Millisecond) // looking at the client's view through the outage
	}
	callsDuring := load.calls.Load() - callsAtStop

	restart := time.Now()
	stopped[0].Start() // with the last member, a quorum
	back := time.Now()
	stopped[1].Start()
	awaitListed(t, c, addrsOf(append(ps, late)), 30*time.Second)
	found := time.Now()
	for deadline := time.Now().Add(10 * time.Second); load.answered("p3") == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("p3 is listed but answered no call in 10s")
		}
		time.Sleep(5 * time.Millisecond) // polling the load's counts
	}
	watcher.await(t, func() bool { return watcher.sets > 0 }, 30*time.Second)
	if first := watcher.firstSet(); first.Before(restart) {
		t.Errorf("a watcher started while no member served got a set %v before the restart began", restart.Sub(first))
	}
	load.awaitCalls(t, 500)
	load.stop()

	lost := checkLost(t, r.lost(ps, before, m, watcher), len(ps))
	checkExpired(t, r.log.Since(stop))
	t.Logf("figure: quorum loss: 2 of 3 members stopped for %v (the last one stopped serving %v after them; sessions %v): %d calls meanwhile; quorum back %v after the restart began; p3, started during the outage, listed by the client %v after that; a watcher started during the outage got its first set, whole, %v after the restart began; %s; %s, none expired",
		restart.Sub(stop).Round(10*time.Millisecond), lostQuorum.Sub(stop).Round(10*time.Millisecond), ensembleSession, callsDuring,
		back.Sub(restart).Round(10*time.Millisecond), found.Sub(back).Round(10*time.Millisecond),
		watcher.firstSet().Sub(restart).Round(10*time.Millisecond), load.check(t), lost)
}

// TestZooKeeperEnsemblePartition cuts the member that a provider's
// registry is connected to off from its clients (a proxy in front of each
// member stops forwarding and closes nothing) while it stays in the
// quorum: every registry on it moves to another member within its session
// timeout, in the same session, and the providers' nodes survive.
func TestZooKeeperEnsemblePartition(t *testing.T) {
	e := zktest.StartEnsemble(t, 3)
	proxies := make([]*zktest.Proxy, len(e.Members))
	var viaProxies []string
	for i, mem := range e.Members {
		proxies[i] = zktest.NewProxy(t, mem.Addr())
		viaProxies = append(viaProxies, proxies[i].Addr())
	}
	r, ps, _, m, load := startEnsembleRig(t, e, viaProxies, 3)
	before := r.stats(ps)

	victim := slices.Index(viaProxies, r.log.Where("p0"))
	if victim < 0 {
		t.Fatalf("p0's registry is connected to %q, none of the proxies %v", r.log.Where("p0"), viaProxies)
	}
	var on []string // the registries connected to the victim
	for _, who := range []string{"p0", "p1", "p2", "client"} {
		if r.log.Where(who) == viaProxies[victim] {
			on = append(on, who)
		}
	}
	proxies[victim].Pause()
	paused := time.Now()
	var slowest time.Duration
	for _, who := range on {
		ev := r.log.AwaitEstablished(t, who, viaProxies[victim], paused, 3*ensembleSession)
		took := ev.At.Sub(paused)
		if took >= ensembleSession {
			t.Errorf("%s's registry moved to %s %v after the partition began; want within its session timeout %v", who, ev.Server, took, ensembleSession)
		}
		slowest = max(slowest, took)
	}
	load.awaitCalls(t, 500)
	proxies[victim].Resume()
	load.stop()

	lost := checkLost(t, r.lost(ps, before, m), len(ps))
	checkExpired(t, r.log.Since(paused))
	t.Logf("figure: partition: %s cut off from its %d registries (%s); all moved to another member within %v (session %v), none expired; %s; %s",
		e.Members[victim], len(on), strings.Join(on, ", "), slowest.Round(10*time.Millisecond), ensembleSession, lost, load.check(t))
}

// TestZooKeeperEnsembleRollingRestart restarts the three members one at a
// time, each as soon as the one before serves again, under load: no call
// fails, no registration is lost, no session expires.
func TestZooKeeperEnsembleRollingRestart(t *testing.T) {
	e := zktest.StartEnsemble(t, 3)
	r, ps, _, m, load := startEnsembleRig(t, e, e.Servers(), 3)
	before := r.stats(ps)

	begin := time.Now()
	var steps []string
	for _, mem := range e.Members {
		mode, _ := mem.Mode(time.Second)
		start := time.Now()
		mem.Stop()
		mem.Start()
		e.AwaitLeader(10 * time.Second)
		steps = append(steps, fmt.Sprintf("%s %v", mode, time.Since(start).Round(10*time.Millisecond)))
	}
	took := time.Since(begin)
	load.awaitCalls(t, 500)
	load.stop()

	lost := checkLost(t, r.lost(ps, before, m), len(ps))
	events := r.log.Since(begin)
	checkExpired(t, events)
	t.Logf("figure: rolling restart: 3 members restarted one at a time in %v (%s); %s; %s; %d reconnections, no session expired",
		took.Round(10*time.Millisecond), strings.Join(steps, ", "), load.check(t), lost, zktest.Count(events, zktest.Established))
}

package kiev_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/balance"
	"github.com/kievrpc/kiev/internal/dnstest"
	"github.com/kievrpc/kiev/internal/logtest"
	"github.com/kievrpc/kiev/internal/servetest"
)

// pods are providers of Who on loopback addresses 127.0.0.2, 127.0.0.3,
// ..., all on one port, as a headless service's pods are.
type pods struct {
	t    *testing.T
	port string
	srv  map[string]*kiev.Server // by IP
}

func newPods(t *testing.T) *pods {
	l := listen(t)
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	return &pods{t: t, port: port, srv: map[string]*kiev.Server{}}
}

// start serves a Who named ip on ip and the pods' port.
func (p *pods) start(ip string) {
	p.t.Helper()
	p.startWho(ip, &Who{name: ip})
}

// startWho serves w on ip and the pods' port.
func (p *pods) startWho(ip string, w *Who) {
	p.t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, p.port))
	if err != nil {
		p.t.Fatalf("pod %s: %v", ip, err)
	}
	srv := kiev.NewServer()
	if err := srv.Register(w); err != nil {
		p.t.Fatal(err)
	}
	servetest.Serve(p.t, srv, l)
	p.srv[ip] = srv
}

// stop shuts the pod at ip down gracefully, as Kubernetes does once it has
// taken the pod out of DNS.
func (p *pods) stop(ip string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.srv[ip].Shutdown(ctx); err != nil {
		p.t.Fatalf("shutting pod %s down: %v", ip, err)
	}
	delete(p.srv, ip)
}

// dnsDial dials name on the DNS server d, resolving it every interval.
func dnsDial(t *testing.T, d *dnstest.Server, name string, interval time.Duration, opts ...kiev.DialOption) *kiev.Client {
	t.Helper()
	return dial(t, fmt.Sprintf("dns://%s/%s?interval=%v", d.Addr(), name, interval), opts...)
}

// awaitAddrs waits until c's providers are exactly the listed addresses
// (as "ip" for the pods' port), and none is unlisted.
func awaitAddrs(t *testing.T, c *kiev.Client, port string, ips ...string) {
	t.Helper()
	want := make([]string, len(ips))
	for i, ip := range ips {
		want[i] = net.JoinHostPort(ip, port)
	}
	slices.Sort(want)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got []string
		for _, p := range c.Providers() {
			if !p.Unlisted {
				got = append(got, p.Instance.Address)
			}
		}
		slices.Sort(got)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("client's providers are %v 10s on; want %v", got, want)
		}
		time.Sleep(5 * time.Millisecond) // polling the client's view; nothing to wait on
	}
}

// namesSeen makes n calls and returns the providers that answered.
func namesSeen(t *testing.T, c *kiev.Client, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for range n {
		seen[callName(t, c, context.Background())]++
	}
	return seen
}

func TestDNSCallsEveryAddressOfTheName(t *testing.T) {
	d := dnstest.Start(t)
	p := newPods(t)
	ips := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	for _, ip := range ips {
		p.start(ip)
	}
	d.SetHosts(map[string][]string{"feed.test": ips})
	c := dnsDial(t, d, "feed.test:"+p.port, time.Hour)
	awaitAddrs(t, c, p.port, ips...)
	if seen := namesSeen(t, c, 30); len(seen) != 3 {
		t.Errorf("30 calls reached %v; want all 3 pods", seen)
	}
}

func TestDNSPodsAddedAndRemoved(t *testing.T) {
	d := dnstest.Start(t)
	p := newPods(t)
	p.start("127.0.0.2")
	d.SetHosts(map[string][]string{"feed.test": {"127.0.0.2"}})
	c := dnsDial(t, d, "feed.test:"+p.port, 50*time.Millisecond)
	awaitAddrs(t, c, p.port, "127.0.0.2")

	p.start("127.0.0.3")
	d.SetHosts(map[string][]string{"feed.test": {"127.0.0.2", "127.0.0.3"}})
	awaitAddrs(t, c, p.port, "127.0.0.2", "127.0.0.3")
	if seen := namesSeen(t, c, 20); seen["127.0.0.3"] == 0 {
		t.Errorf("20 calls after a pod was added reached %v; want the new pod among them", seen)
	}

	d.SetHosts(map[string][]string{"feed.test": {"127.0.0.3"}})
	awaitAddrs(t, c, p.port, "127.0.0.3")
	if seen := namesSeen(t, c, 20); seen["127.0.0.2"] != 0 {
		t.Errorf("20 calls after a pod was removed reached %v; want none on the removed pod", seen)
	}
}

func TestDNSAllPodsRemoved(t *testing.T) {
	d := dnstest.Start(t)
	p := newPods(t)
	p.start("127.0.0.2")
	d.SetHosts(map[string][]string{"feed.test": {"127.0.0.2"}})
	c := dnsDial(t, d, "feed.test:"+p.port, 50*time.Millisecond, kiev.WithProviderWait(300*time.Millisecond))
	awaitAddrs(t, c, p.port, "127.0.0.2")
	callName(t, c, context.Background())

	// The name is gone: a connected pod is called until its connection
	// ends, as when a registry empties.
	d.SetHosts(nil)
	awaitAddrs(t, c, p.port)
	if ps := c.Providers(); len(ps) != 1 || !ps[0].Unlisted {
		t.Fatalf("providers after the name went: %+v; want the connected pod, unlisted", ps)
	}
	if st, _ := c.Discovery(); st.Error != "" {
		t.Errorf("Discovery().Error = %q after the name went; want none: a name that has resolved and is gone lists no provider", st.Error)
	}
	callName(t, c, context.Background())

	// Once it shuts down, nothing is left to call. (A call racing the
	// connection's end may see ErrShutdown rather than ErrUnavailable.)
	p.stop("127.0.0.2")
	err := c.Call(context.Background(), "Who.Name", 0, new(string))
	if !errors.Is(err, kiev.ErrUnavailable) && !errors.Is(err, kiev.ErrShutdown) {
		t.Fatalf("call with every pod gone = %v; want ErrUnavailable", err)
	}
}

func TestDNSNameThatNeverResolvedFailsCallsNamingIt(t *testing.T) {
	d := dnstest.Start(t)
	c := dnsDial(t, d, "nosuch.test:7000", time.Hour, kiev.WithProviderWait(300*time.Millisecond))
	start := time.Now()
	err := c.Call(context.Background(), "Who.Name", 0, new(string))
	took := time.Since(start)
	if !errors.Is(err, kiev.ErrUnavailable) {
		t.Fatalf("call = %v; want ErrUnavailable", err)
	}
	for _, want := range []string{"nosuch.test", "no such host", "300ms"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if took > 5*time.Second {
		t.Errorf("call failed after %v; want within about the provider wait (300ms)", took)
	}
	if st, ok := c.Discovery(); !ok || !strings.Contains(st.Error, "no such host") || st.FailingSince.IsZero() {
		t.Errorf("Discovery() = %+v, %v; want the lookup's error", st, ok)
	}
}

func TestDNSFailingLookupKeepsTheLastGoodSet(t *testing.T) {
	d := dnstest.Start(t)
	p := newPods(t)
	p.start("127.0.0.2")
	p.start("127.0.0.3")
	d.SetHosts(map[string][]string{"feed.test": {"127.0.0.2", "127.0.0.3"}})
	logger, log := logtest.New(t)
	c := dnsDial(t, d, "feed.test:"+p.port, 20*time.Millisecond, kiev.WithLogger(logger))
	awaitAddrs(t, c, p.port, "127.0.0.2", "127.0.0.3")

	mark := log.Mark()
	d.Stop()
	log.WaitFor(t, mark, "keeping the last known set", "feed.test")
	st, _ := c.Discovery()
	if st.Error == "" || st.FailingSince.IsZero() {
		t.Errorf("Discovery() = %+v while DNS is down; want the lookup's error", st)
	}
	awaitAddrs(t, c, p.port, "127.0.0.2", "127.0.0.3")
	if seen := namesSeen(t, c, 20); len(seen) != 2 {
		t.Errorf("20 calls while DNS is down reached %v; want both pods still", seen)
	}
}

func TestDNSSRVRecords(t *testing.T) {
	d := dnstest.Start(t)
	a, b, spare := newPods(t), newPods(t), newPods(t)
	a.start("127.0.0.2")
	b.start("127.0.0.3")
	spare.start("127.0.0.4")
	hosts := map[string][]string{"a.feed.test": {"127.0.0.2"}, "b.feed.test": {"127.0.0.3"}, "spare.feed.test": {"127.0.0.4"}}
	port := func(p *pods) int { n, _ := net.LookupPort("tcp", p.port); return n }
	d.SetSRV(hosts, []dnstest.SRV{
		{Name: "_kiev._tcp.feed.test", Target: "a.feed.test", Port: port(a), Priority: 0, Weight: 3},
		{Name: "_kiev._tcp.feed.test", Target: "b.feed.test", Port: port(b), Priority: 0, Weight: 1},
		{Name: "_kiev._tcp.feed.test", Target: "spare.feed.test", Port: port(spare), Priority: 1, Weight: 5},
	})
	c := dnsDial(t, d, "_kiev._tcp.feed.test", 50*time.Millisecond, kiev.WithBalancer(balance.WeightedRoundRobin()))
	waitProviders(t, c, 2)
	weights := map[string]int{}
	for _, p := range c.Providers() {
		weights[p.Instance.Address] = p.Instance.Weight
	}
	want := map[string]int{"127.0.0.2:" + a.port: 3, "127.0.0.3:" + b.port: 1}
	if fmt.Sprint(weights) != fmt.Sprint(want) {
		t.Fatalf("providers' weights = %v; want %v (the priority-1 record is a fallback)", weights, want)
	}
	seen := namesSeen(t, c, 40)
	if seen["127.0.0.2"] != 30 || seen["127.0.0.3"] != 10 {
		t.Errorf("40 calls reached %v; want 30 and 10, by the SRV weights 3 and 1", seen)
	}

	// With the priority-0 targets gone, the fallback serves.
	d.SetSRV(hosts, []dnstest.SRV{{Name: "_kiev._tcp.feed.test", Target: "spare.feed.test", Port: port(spare), Priority: 1, Weight: 5}})
	awaitAddrs(t, c, spare.port, "127.0.0.4")
}

func TestDNSLostConnectionResolvesAtOnce(t *testing.T) {
	d := dnstest.Start(t)
	p := newPods(t)
	p.start("127.0.0.2")
	d.SetHosts(map[string][]string{"feed.test": {"127.0.0.2"}})
	c := dnsDial(t, d, "feed.test:"+p.port, time.Hour)
	awaitAddrs(t, c, p.port, "127.0.0.2")
	callName(t, c, context.Background())

	// The pod is replaced; the client, which would look again only in an
	// hour, looks at once when the old pod's connection ends.
	p.start("127.0.0.3")
	d.SetHosts(map[string][]string{"feed.test": {"127.0.0.3"}})
	stopped := time.Now()
	p.stop("127.0.0.2")
	awaitAddrs(t, c, p.port, "127.0.0.3")
	t.Logf("the replacement pod was listed %v after the old one shut down (resolve interval: 1h)", time.Since(stopped).Round(time.Millisecond))
}

func TestDNSChurnUnderLoadFailsNoCall(t *testing.T) {
	d := dnstest.Start(t)
	p := newPods(t)
	live := []string{"127.0.0.2", "127.0.0.3"}
	for _, ip := range live {
		p.start(ip)
	}
	set := func() { d.SetHosts(map[string][]string{"feed.test": live}) }
	set()
	c := dnsDial(t, d, "feed.test:"+p.port, 20*time.Millisecond)
	awaitAddrs(t, c, p.port, live...)

	run := startLoad(c, 4, 100000)
	run.await(t, 100)
	next := 4
	for range 5 {
		// Add a pod, then remove the oldest: out of DNS first, then,
		// once the client has seen it go, shut down, as Kubernetes does.
		ip := fmt.Sprintf("127.0.0.%d", next)
		next++
		p.start(ip)
		live = append(live, ip)
		set()
		awaitAddrs(t, c, p.port, live...)
		run.await(t, run.calls.Load()+200)

		old := live[0]
		live = live[1:]
		set()
		awaitAddrs(t, c, p.port, live...)
		p.stop(old)
		run.await(t, run.calls.Load()+200)
	}
	res := run.stop()
	failed := append(res.failed["Who.Work"], res.failed["Who.Charge"]...)
	if len(failed) != 0 {
		t.Errorf("%d calls failed while pods came and went; want none: %v", len(failed), failed[0])
	}
	t.Logf("5 pods added and 5 removed under load: %d calls ok, %d failed", res.ok["Who.Work"]+res.ok["Who.Charge"], len(failed))
}

func TestDialHostPortResolvesTheName(t *testing.T) {
	l := listen(t)
	_, port, _ := net.SplitHostPort(l.Addr().String())
	srv := kiev.NewServer()
	if err := srv.Register(&Who{name: "local"}); err != nil {
		t.Fatal(err)
	}
	servetest.Serve(t, srv, l)
	c := dial(t, "localhost:"+port)
	waitProviders(t, c, 1)
	if ps := c.Providers(); !slices.ContainsFunc(ps, func(p kiev.Provider) bool { return p.Instance.Address == "127.0.0.1:"+port }) {
		t.Fatalf("Dial(localhost:%s) providers = %+v; want 127.0.0.1:%s among them", port, ps, port)
	}
	callName(t, c, context.Background())
}

func TestDialDNSTargetErrors(t *testing.T) {
	for target, want := range map[string]string{
		"dns:///":                           "no name to resolve",
		"dns:///feed.test:7000?interval=-1": "not a positive duration",
		"dns:///feed.test:7000?ttl=5":       `unknown parameter "ttl"`,
		"dns://me@10.0.0.10/feed.test:7000": "takes no credentials",
	} {
		_, err := kiev.Dial(target)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Dial(%q) = %v; want an error saying %q", target, err, want)
		}
	}
	if _, err := kiev.Dial("dns:///feed.test"); err == nil || !strings.Contains(err.Error(), "host:port") {
		t.Errorf("Dial(dns:///feed.test) = %v; want an error that asks for host:port", err)
	}
}

func TestDNSOneSlowPodIsHedgedAround(t *testing.T) {
	d := dnstest.Start(t)
	p := newPods(t)
	p.startWho("127.0.0.2", &Who{name: "slow", hang: make(chan struct{})}) // answers only when canceled
	p.start("127.0.0.3")
	p.start("127.0.0.4")
	d.SetHosts(map[string][]string{"feed.test": {"127.0.0.2", "127.0.0.3", "127.0.0.4"}})
	c := dnsDial(t, d, "feed.test:"+p.port, time.Hour,
		kiev.WithRetry(kiev.RetryPolicy{Idempotent: kiev.IdempotentMethods("Who.Slow")}),
		kiev.WithHedging(kiev.Hedging{Delay: 20 * time.Millisecond}))
	awaitAddrs(t, c, p.port, "127.0.0.2", "127.0.0.3", "127.0.0.4")
	for i := range 9 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var name string
		err := c.Call(ctx, "Who.Slow", 0, &name)
		cancel()
		if err != nil || name == "slow" {
			t.Fatalf("call %d = %q, %v; want an answer from a pod that is not slow", i, name, err)
		}
	}
	if st := c.HedgeStats(); st.Won < 1 {
		t.Errorf("HedgeStats = %+v; want the calls that went to the slow pod answered by hedges", st)
	}
}

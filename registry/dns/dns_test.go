package dns_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kievrpc/kiev/internal/dnstest"
	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/registry/dns"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newRegistry(t *testing.T, d *dnstest.Server, interval time.Duration) *dns.Registry {
	t.Helper()
	r, err := dns.New(dns.Config{Server: d.Addr(), Interval: interval, MinInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func watch(t *testing.T, r *dns.Registry, name string) registry.Watcher {
	t.Helper()
	w, err := r.Watch(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

func next(t *testing.T, w registry.Watcher) ([]registry.Instance, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return w.Next(ctx)
}

func addrs(set []registry.Instance) string {
	var s []string
	for _, in := range set {
		s = append(s, in.Address)
	}
	return strings.Join(s, " ")
}

func TestWatchListsEveryAddressAndFollowsChanges(t *testing.T) {
	d := dnstest.Start(t)
	d.SetHosts(map[string][]string{"feed.test": {"10.0.0.2", "10.0.0.1", "fd00::1"}})
	w := watch(t, newRegistry(t, d, time.Hour), "feed.test:7000")
	set, err := next(t, w)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := addrs(set), "10.0.0.1:7000 10.0.0.2:7000 [fd00::1]:7000"; got != want {
		t.Fatalf("first set = %q; want %q", got, want)
	}
	if in := set[0]; in.Service != "feed.test:7000" || in.Network != "tcp" || in.Metadata[dns.MetaHost] != "feed.test" {
		t.Errorf("instance = %+v; want service feed.test:7000 over tcp, found under feed.test", in)
	}

	// The interval is an hour: ResolveNow makes the change seen.
	d.SetHosts(map[string][]string{"feed.test": {"10.0.0.3"}})
	w.(*dns.Watcher).ResolveNow()
	set, err = next(t, w)
	if err != nil || addrs(set) != "10.0.0.3:7000" {
		t.Fatalf("set after a change = %q, %v; want 10.0.0.3:7000", addrs(set), err)
	}

	// A name that has resolved and is gone lists no provider.
	d.SetHosts(nil)
	w.(*dns.Watcher).ResolveNow()
	set, err = next(t, w)
	if err != nil || len(set) != 0 {
		t.Fatalf("set after the name went = %q, %v; want an empty set", addrs(set), err)
	}
}

func TestWatchOfANameThatNeverResolvedFails(t *testing.T) {
	d := dnstest.Start(t)
	w := watch(t, newRegistry(t, d, time.Hour), "nosuch.test:7000")
	_, err := next(t, w)
	if err == nil || !strings.Contains(err.Error(), "nosuch.test") || !strings.Contains(err.Error(), d.Addr()) {
		t.Fatalf("Next = %v; want an error naming the name and the DNS server", err)
	}
	// The next call looks up again at once, and sees the name appear.
	d.SetHosts(map[string][]string{"nosuch.test": {"10.0.0.1"}})
	if set, err := next(t, w); err != nil || addrs(set) != "10.0.0.1:7000" {
		t.Fatalf("Next after the name appeared = %q, %v", addrs(set), err)
	}
}

func TestWatchFailsWhileDNSIsDown(t *testing.T) {
	d := dnstest.Start(t)
	d.SetHosts(map[string][]string{"feed.test": {"10.0.0.1"}})
	r, err := dns.New(dns.Config{Server: d.Addr(), Interval: time.Millisecond, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w := watch(t, r, "feed.test:7000")
	if _, err := next(t, w); err != nil {
		t.Fatal(err)
	}
	d.Stop()
	if _, err := next(t, w); err == nil || !strings.Contains(err.Error(), "looking up feed.test:7000") {
		t.Fatalf("Next with DNS down = %v; want the lookup's error", err)
	}
}

func TestSRVWeightsAndPriorities(t *testing.T) {
	d := dnstest.Start(t)
	hosts := map[string][]string{"a.feed.test": {"10.0.0.1"}, "b.feed.test": {"10.0.0.2", "10.0.0.3"}, "c.feed.test": {"10.0.0.4"}}
	d.SetSRV(hosts, []dnstest.SRV{
		{Name: "_kiev._tcp.feed.test", Target: "a.feed.test", Port: 7001, Priority: 10, Weight: 5},
		{Name: "_kiev._tcp.feed.test", Target: "b.feed.test", Port: 7002, Priority: 10, Weight: 0},
		{Name: "_kiev._tcp.feed.test", Target: "c.feed.test", Port: 7003, Priority: 20, Weight: 9},
		{Name: "_kiev._tcp.feed.test", Target: "gone.feed.test", Port: 7004, Priority: 5, Weight: 9},
	})
	w := watch(t, newRegistry(t, d, time.Hour), "_kiev._tcp.feed.test")
	set, err := next(t, w)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range set {
		got = append(got, in.Address+"/"+string(rune('0'+in.Weight))+"/"+in.Metadata[dns.MetaHost])
	}
	// Priority 5's target does not resolve; priority 10 is used; 20 is
	// the fallback.
	want := "10.0.0.1:7001/5/a.feed.test 10.0.0.2:7002/0/b.feed.test 10.0.0.3:7002/0/b.feed.test"
	if strings.Join(got, " ") != want {
		t.Fatalf("SRV set = %q; want %q", strings.Join(got, " "), want)
	}
}

func TestNames(t *testing.T) {
	r, err := dns.New(dns.Config{Server: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for name, ok := range map[string]bool{
		"feed.test:7000": true, "feed.test:http": true, "[fd00::1]:7000": true, "_kiev._tcp.feed.test": true,
		"feed.test": false, ":7000": false, "feed.test:0": false, "feed.test:99999": false, "_kiev._tcp.feed.test:7000": false, "_kiev": false,
	} {
		w, err := r.Watch(context.Background(), name)
		if ok != (err == nil) || !ok && !errors.Is(err, dns.ErrName) {
			t.Errorf("Watch(%q) = %v; want ok=%v (or ErrName)", name, err, ok)
		}
		if w != nil {
			w.Stop()
		}
	}
	if err := r.Register(context.Background(), registry.Instance{}); !errors.Is(err, dns.ErrReadOnly) {
		t.Errorf("Register = %v; want ErrReadOnly", err)
	}
}

func TestStopAndClose(t *testing.T) {
	d := dnstest.Start(t)
	d.SetHosts(map[string][]string{"feed.test": {"10.0.0.1"}})
	r := newRegistry(t, d, time.Hour)
	w1, w2 := watch(t, r, "feed.test:7000"), watch(t, r, "feed.test:7000")
	for _, w := range []registry.Watcher{w1, w2} {
		if _, err := next(t, w); err != nil {
			t.Fatal(err)
		}
	}
	w1.Stop()
	if _, err := next(t, w1); !errors.Is(err, registry.ErrStopped) {
		t.Errorf("Next after Stop = %v; want ErrStopped", err)
	}
	r.Close()
	if _, err := next(t, w2); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Next after Close = %v; want ErrClosed", err)
	}
	if _, err := r.Watch(context.Background(), "feed.test:7000"); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Watch after Close = %v; want ErrClosed", err)
	}
}

package kiev_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/health"
	"github.com/kievrpc/kiev/registry/memory"
)

// TestHealthCheckOverEveryFront asks kiev.Health.Check over TCP, UDP and
// HTTP for the server, a service, and one the server lacks, as the
// health checks and SetHealth change the answer.
func TestHealthCheckOverEveryFront(t *testing.T) {
	for _, fr := range fronts3 {
		t.Run(fr.name, func(t *testing.T) {
			srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)))
			srv.Register(&Arith{})
			call := fr.serve(t, srv)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			check := func(service string, want health.ServingStatus) {
				t.Helper()
				var r health.CheckResponse
				if got := call(ctx, health.ServiceName+".Check", health.CheckRequest{Service: service}, &r, ""); got != "OK" || r.Status != want {
					t.Fatalf("Check(%q) = %s, %v; want OK, %v", service, got, r.Status, want)
				}
			}
			check("", health.Serving)
			check("Arith", health.Serving)
			var r health.CheckResponse
			if got := call(ctx, health.ServiceName+".Check", health.CheckRequest{Service: "Nope"}, &r, ""); got != "NotFound" {
				t.Fatalf("Check of a service the server lacks = %s; want NotFound", got)
			}

			down := errors.New("connection refused")
			srv.RegisterHealth("db", func(context.Context) error { return down })
			check("", health.NotServing)
			check("Arith", health.NotServing)
			srv.RegisterHealth("db", func(context.Context) error { return nil })
			check("", health.Serving)

			srv.SetHealth("Arith", health.NotServing)
			check("Arith", health.NotServing)
			check("", health.Serving)
			srv.SetHealth("Arith", health.ServingUnknown)
			check("Arith", health.Serving)
		})
	}
}

// TestHealthWatchSeesShutdown watches a server's health; it turns
// NOT_SERVING as soon as Shutdown begins, while the server still drains.
func TestHealthWatchSeesShutdown(t *testing.T) {
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 1)}
	watching := make(chan struct{}, 2)
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)), kiev.WithServerInterceptor(func(next kiev.Handler) kiev.Handler {
		return func(ctx context.Context, req *kiev.Request) error {
			if req.ServiceMethod == health.ServiceName+".Watch" {
				watching <- struct{}{}
			}
			return next(ctx, req)
		}
	}))
	srv.Register(svc)
	c := dial(t, startServer(t, srv))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var r health.CheckResponse
	if err := c.Call(ctx, health.ServiceName+".Watch", health.WatchRequest{}, &r); err != nil || r.Status != health.Serving {
		t.Fatalf("Watch with nothing known = %v, %v; want SERVING at once", r.Status, err)
	}
	<-watching
	// A call in flight holds the drain open.
	blocked := make(chan error, 1)
	go func() { blocked <- c.Call(ctx, "Arith.Block", Args{A: 1}, new(Reply)) }()
	<-svc.started

	watched := make(chan error, 1)
	var w health.CheckResponse
	watch := c.Go(ctx, health.ServiceName+".Watch", health.WatchRequest{Last: health.Serving}, &w, nil)
	go func() { <-watch.Done; watched <- watch.Error }()
	<-watching // the server runs the Watch

	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(ctx) }()
	if err := <-watched; err != nil || w.Status != health.NotServing {
		t.Fatalf("Watch from SERVING as Shutdown began = %v, %v; want NOT_SERVING", w.Status, err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a call in flight", err)
	default:
	}
	close(svc.block)
	if err := <-blocked; err != nil {
		t.Fatalf("the call in flight during the drain: %v", err)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// TestHealthWatchSeesSetHealth: Watch answers when SetHealth changes the
// status it knows, and with the status unchanged before its deadline.
func TestHealthWatchSeesSetHealth(t *testing.T) {
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)))
	srv.Register(&Arith{})
	c := dial(t, startServer(t, srv))

	// Watch answers at nine tenths of the time left: a deadline of 2 s
	// leaves its answer 200 ms to arrive, which a loaded machine needs.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var r health.CheckResponse
	if err := c.Call(ctx, health.ServiceName+".Watch", health.WatchRequest{Service: "Arith", Last: health.Serving}, &r); err != nil || r.Status != health.Serving {
		t.Fatalf("Watch with no change before the deadline = %v, %v; want SERVING, answered before the deadline", r.Status, err)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	watch := c.Go(ctx, health.ServiceName+".Watch", health.WatchRequest{Service: "Arith", Last: health.Serving}, &r, nil)
	srv.SetHealth("Arith", health.NotServing)
	<-watch.Done
	if watch.Error != nil || r.Status != health.NotServing {
		t.Fatalf("Watch as SetHealth changed the status = %v, %v; want NOT_SERVING", r.Status, watch.Error)
	}
	if err := c.Call(ctx, health.ServiceName+".Watch", health.WatchRequest{Service: "Nope"}, &r); err != nil || r.Status != health.ServiceUnknown {
		t.Fatalf("Watch of a service the server lacks = %v, %v; want SERVICE_UNKNOWN", r.Status, err)
	}
}

// TestProbes checks /healthz and /readyz as a Kubernetes probe sees them:
// curl -f, which fails on a status of 400 or more.
func TestProbes(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("no curl on this machine: it stands for a Kubernetes HTTP probe")
	}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)), kiev.WithAdminAuth(func(*http.Request) error {
		return errors.New("no credentials")
	}))
	srv.Register(&Arith{})
	startServer(t, srv)
	hs := httptest.NewServer(srv.AdminHandler())
	t.Cleanup(hs.Close)
	probe := func(path string) (bool, string) {
		t.Helper()
		out, err := exec.Command(curl, "-sS", "-f", "-m", "5", hs.URL+path).CombinedOutput()
		return err == nil, string(out)
	}
	if ok, out := probe("/healthz"); !ok || out != "ok\n" {
		t.Fatalf("/healthz = %v %q; want success, ok", ok, out)
	}
	if ok, out := probe("/readyz"); !ok || out != "ready\n" {
		t.Fatalf("/readyz = %v %q; want success, ready", ok, out)
	}
	if ok, _ := probe("/metrics"); ok {
		t.Fatal("/metrics answered without credentials; WithAdminAuth guards it")
	}

	srv.RegisterHealth("redis", func(context.Context) error { return errors.New("dial tcp 10.0.0.9:6379: connection refused") })
	resp, err := http.Get(hs.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "redis") || strings.Contains(string(body), "10.0.0.9") {
		t.Fatalf("/readyz with a failing check = %d %q; want 503 naming the check, not its error", resp.StatusCode, body)
	}
	if ok, _ := probe("/readyz"); ok {
		t.Fatal("curl -f /readyz succeeded with a failing check")
	}
	if ok, _ := probe("/healthz"); !ok {
		t.Fatal("/healthz failed with a failing dependency; liveness is the process's own")
	}
}

// TestWithHealthCheck keeps a provider that says it does not serve out of
// balancing, and takes it back once it serves.
func TestWithHealthCheck(t *testing.T) {
	reg := memory.New()
	_, a := provider(t, reg, "a")
	provider(t, reg, "b")
	c := dial(t, "Who", kiev.WithRegistry(reg), kiev.WithHealthCheck(20*time.Millisecond))
	waitProviders(t, c, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	a.SetHealth("", health.NotServing)
	waitFor(t, ctx, "provider a out of balancing", func() bool {
		for _, p := range c.Providers() {
			if p.NotServing {
				return true
			}
		}
		return false
	})
	waitProviders(t, c, 1) // the flag turns before the balancer is rebuilt
	for range 20 {
		if name := callName(t, c, ctx); name != "b" {
			t.Fatalf("a call went to %s, which says it does not serve", name)
		}
	}

	a.SetHealth("", health.ServingUnknown)
	waitFor(t, ctx, "provider a back in balancing", func() bool {
		for _, p := range c.Providers() {
			if p.NotServing {
				return false
			}
		}
		return true
	})
	waitProviders(t, c, 2) // the flag turns before the balancer is rebuilt
	seen := map[string]bool{}
	for range 20 {
		seen[callName(t, c, ctx)] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("calls reached %v once a serves again; want both", seen)
	}
}

// waitFor polls cond until it holds, or fails the test when ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

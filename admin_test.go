package kiev_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/admin"
	"github.com/kievrpc/kiev/health"
)

// TestStatusPageRendersOnServer reads the status page as a client without
// JavaScript does. It was an empty frame that its script filled, and the
// admin root was a 404.
func TestStatusPageRendersOnServer(t *testing.T) {
	hs, _ := observedServer(t)
	for _, path := range []string{"/", "/debug/kiev"} {
		page := get(t, hs.URL+path)
		for _, re := range []string{
			`<tr data-method="Arith.Add"><td>Arith.Add</td><td class="calls">3</td><td class="errors">0</td><td class="rate">[0-9.]+</td><td class="error-rate">0</td><td class="window">[0-9.]+ s</td><td class="p50">[0-9.]+</td><td class="p99">[0-9.]+</td><td class="in-flight">0</td><td class="queued">0</td><td class="limit">off</td>`,
			`<tr data-method="Arith.Div"><td>Arith.Div</td><td class="calls">1</td><td class="errors bad">1</td>`,
			`<tr data-method="Arith.Mul"><td>Arith.Mul</td><td class="calls">0</td>`,
			`<h2>Health: <span id="health-state" class="bad">FAILING</span></h2>`,
			`<tr data-check="cache"><td>cache</td><td class="state ok">ok</td><td>[0-9.]+</td></tr>`,
			`<tr data-check="db"><td>db</td><td class="state bad">db: connection refused</td>`,
			`<tr data-queue=""><td>queued</td>(<td>0</td>){10}</tr>`,
			`<tr data-reason="refused"><td>refused</td><td>0</td></tr>`,
			`<td class="state ok">ok</td></tr>`, // the test's client's provider
			`\d+ of \d+ \((fixed|elastic limit, ceiling \d+)\) workers busy, \d+ calls run`,
		} {
			if !regexp.MustCompile(re).MatchString(page) {
				t.Errorf("GET %s lacks %s", path, re)
			}
		}
		// The links lead to the status page, its JSON and the metrics.
		base, _ := url.Parse(hs.URL + path)
		links := regexp.MustCompile(`<a href="([^"]+)">`).FindAllStringSubmatch(page, -1)
		if len(links) != 3 {
			t.Fatalf("GET %s links to %q; want the status page, its JSON and the metrics", path, links)
		}
		for i, want := range []string{"kiev status", `"services": [`, "kiev_server_calls_total"} {
			u, err := base.Parse(links[i][1])
			if err != nil {
				t.Fatal(err)
			}
			if body := get(t, u.String()); !strings.Contains(body, want) {
				t.Errorf("GET %s: its link %s (%s) lacks %q", path, links[i][1], u, want)
			}
		}
	}
}

// TestStatusHealth checks that the JSON's health is a list, never null:
// it was null with no health checks.
func TestStatusHealth(t *testing.T) {
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	srv.Register(&Arith{})
	startServer(t, srv)
	hs := httptest.NewServer(srv.AdminHandler())
	t.Cleanup(hs.Close)
	health := func() string {
		var st struct{ Health json.RawMessage }
		if err := json.Unmarshal([]byte(get(t, hs.URL+"/debug/kiev?format=json")), &st); err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		json.Compact(&b, st.Health)
		return b.String()
	}
	if got, want := health(), `[]`; got != want {
		t.Errorf("health with no checks: %s; want %s", got, want)
	}
	if page := get(t, hs.URL); !strings.Contains(page, `<span id="health-state" class="ok">ok</span>`) || !strings.Contains(page, "No health checks") {
		t.Errorf("the page with no checks lacks an ok health and a word on RegisterHealth")
	}
	srv.RegisterHealth("db", func(ctx context.Context) error { return errors.New("refused") })
	if got, want := health(), `[{"name":"db","ok":false,"error":"refused","took_ms":`; !strings.HasPrefix(got, want) {
		t.Errorf("health with a failing check: %s; want it to start %s", got, want)
	}
}

// Sleeper sleeps as long as it is told to and says how long it took.
type Sleeper struct{}

func (Sleeper) Sleep(ctx context.Context, d time.Duration, took *time.Duration) error {
	start := time.Now()
	time.Sleep(d) // the workload: a method that takes a known time
	*took = time.Since(start)
	return nil
}

// TestStatusPercentiles checks the status JSON's percentiles of a method
// that takes 100ms against what its calls took. They were the upper bounds
// of power-of-two buckets: 163.84ms for both.
func TestStatusPercentiles(t *testing.T) {
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	srv.Register(Sleeper{})
	c := dial(t, startServer(t, srv))
	var (
		mu        sync.Mutex
		took, rtt []time.Duration // as the handler measured, as the caller did
		wg        sync.WaitGroup
	)
	for range 10 {
		wg.Go(func() {
			var d time.Duration
			start := time.Now()
			if err := c.Call(context.Background(), "Sleeper.Sleep", 100*time.Millisecond, &d); err != nil {
				t.Error(err)
				return
			}
			round := time.Since(start)
			mu.Lock()
			took, rtt = append(took, d), append(rtt, round)
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	slices.Sort(took)
	slices.Sort(rtt)
	hs := httptest.NewServer(srv.AdminHandler())
	t.Cleanup(hs.Close)
	var st admin.Status
	if err := json.Unmarshal([]byte(get(t, hs.URL+"/debug/kiev?format=json")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Services) != 1 || len(st.Services[0].Methods) != 1 {
		t.Fatalf("services %+v; want Sleeper.Sleep", st.Services)
	}
	m := st.Services[0].Methods[0]
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	p50, p99 := ms(took[len(took)/2]), ms(took[len(took)-1])
	c50, c99 := ms(rtt[len(rtt)/2]), ms(rtt[len(rtt)-1])
	t.Logf("p50, p99: %.2f, %.2f ms on the status page; %.2f, %.2f ms measured by the handler, %.2f, %.2f by the caller", m.P50Ms, m.P99Ms, p50, p99, c50, c99)
	// The server's time of a call lies between the handler's own and the
	// caller's round trip; on a loaded machine the three can part by more
	// than the histogram's few percent, so the bounds are those two.
	if m.P50Ms < p50*0.9 || m.P50Ms > c50*1.1 || m.P99Ms < p99*0.9 || m.P99Ms > c99*1.1 {
		t.Errorf("p50, p99 = %.2f, %.2f ms; want between the handler's %.2f, %.2f ms and the caller's %.2f, %.2f ms, within 10%%", m.P50Ms, m.P99Ms, p50, p99, c50, c99)
	}
	// The Prometheus histogram keeps its bounds at the doublings of 10µs.
	metrics := get(t, hs.URL+"/metrics")
	for _, want := range []string{
		`kiev_server_call_duration_seconds_bucket{method="Sleeper.Sleep",le="1e-05"} 0`,
		`kiev_server_call_duration_seconds_bucket{method="Sleeper.Sleep",le="0.08192"} 0`,
		`kiev_server_call_duration_seconds_bucket{method="Sleeper.Sleep",le="0.16384"} 10`,
		`kiev_server_call_duration_seconds_bucket{method="Sleeper.Sleep",le="41.94304"} 10`,
		`kiev_server_call_duration_seconds_bucket{method="Sleeper.Sleep",le="+Inf"} 10`,
		`kiev_server_call_duration_seconds_count{method="Sleeper.Sleep"} 10`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if n := strings.Count(metrics, `kiev_server_call_duration_seconds_bucket{method="Sleeper.Sleep"`); n != 24 {
		t.Errorf("the histogram has %d buckets; want 24, +Inf included", n)
	}
}

// TestStatusRunsHealthChecksOncePerTTL fetches the status page many times
// at once. Every GET ran every health check, so polling the page loaded
// the dependencies the checks probe.
func TestStatusRunsHealthChecksOncePerTTL(t *testing.T) {
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)))
	var runs atomic.Int32
	srv.RegisterHealth("db", func(ctx context.Context) error { runs.Add(1); return nil })
	hs := httptest.NewServer(srv.AdminHandler())
	t.Cleanup(hs.Close)
	start := time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				get(t, hs.URL+"/debug/kiev?format=json")
			}
		})
	}
	wg.Wait()
	most := 1 + int(time.Since(start)/health.CacheTTL)
	t.Logf("80 GETs in %v ran the check %d times", time.Since(start), runs.Load())
	if n := int(runs.Load()); n > most {
		t.Errorf("80 GETs ran the check %d times; want at most %d, once per %v", n, most, health.CacheTTL)
	}
	// A check registered since the last run is run at once.
	srv.RegisterHealth("cache", func(ctx context.Context) error { return errors.New("down") })
	if page := get(t, hs.URL+"/debug/kiev?format=json"); !strings.Contains(page, `"error": "down"`) {
		t.Errorf("a new check is missing from the status:\n%s", page)
	}
}

// TestAdminAuth protects the admin pages with WithAdminAuth: every page
// refuses a request the hook refuses, with its reason.
func TestAdminAuth(t *testing.T) {
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)),
		kiev.WithAdminAuth(func(r *http.Request) error {
			if r.Header.Get("Authorization") != "Bearer s3cret" {
				return errors.New("send Authorization: Bearer <the admin token>")
			}
			return nil
		}))
	hs := httptest.NewServer(srv.AdminHandler())
	t.Cleanup(hs.Close)
	for _, path := range []string{"/", "/debug/kiev", "/debug/kiev?format=json", "/metrics", "/nope"} {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "send Authorization: Bearer") {
			t.Errorf("GET %s without the token: %d %s; want 401 with the hook's reason", path, resp.StatusCode, body)
		}
		req, _ := http.NewRequest("GET", hs.URL+path, nil)
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: 404, false: 200}[path == "/nope"]; resp.StatusCode != want {
			t.Errorf("GET %s with the token: %d; want %d", path, resp.StatusCode, want)
		}
	}
}

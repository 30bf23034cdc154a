package kiev_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/admin"
	"github.com/kievrpc/kiev/registry/memory"
)

// records is a slog.Handler that keeps what is logged, for tests.
type records struct {
	mu    sync.Mutex
	recs  []slog.Record
	attrs []slog.Attr
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	h.recs = append(h.recs, r)
	return nil
}
func (h *records) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordsView{h, as}
}
func (h *records) WithGroup(string) slog.Handler { return h }

// recordsView is a records handler with attributes added.
type recordsView struct {
	h     *records
	attrs []slog.Attr
}

func (v *recordsView) Enabled(context.Context, slog.Level) bool { return true }
func (v *recordsView) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(v.attrs...)
	return v.h.Handle(ctx, r)
}
func (v *recordsView) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordsView{v.h, append(append([]slog.Attr{}, v.attrs...), as...)}
}
func (v *recordsView) WithGroup(string) slog.Handler { return v }

// count returns how many records have msg.
func (h *records) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if r.Message == msg {
			n++
		}
	}
	return n
}

// suppressedSeen reports whether a record with msg says that lines were
// suppressed before it.
func (h *records) suppressedSeen(msg string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		seen := false
		r.Attrs(func(a slog.Attr) bool {
			seen = seen || a.Key == "suppressed" && a.Value.Int64() > 0
			return !seen
		})
		if r.Message == msg && seen {
			return true
		}
	}
	return false
}

// find returns the attributes of the first record with msg.
func (h *records) find(msg string) (map[string]string, slog.Level, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r.Message != msg {
			continue
		}
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		return attrs, r.Level, true
	}
	return nil, 0, false
}

// closings lists the connections the server closed, and why.
func (h *records) closings() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		if r.Message != "kiev: closing connection" {
			continue
		}
		var peer, err string
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "peer":
				peer = a.Value.String()
			case "err":
				err = a.Value.String()
			}
			return true
		})
		out = append(out, peer+" ("+err+")")
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

// findWith returns the attributes of the first record with msg whose
// attribute key is value.
func (h *records) findWith(msg, key, value string) (map[string]string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r.Message != msg {
			continue
		}
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		if attrs[key] == value {
			return attrs, true
		}
	}
	return nil, false
}

// Logs logs a line with the call's logger, and one with a logger of the
// caller's own built on kiev.NewContextHandler.
type Logs struct{ own *slog.Logger }

func (l *Logs) Hello(ctx context.Context, name string, reply *string) error {
	kiev.Logger(ctx).Info("hello from the handler", "name", name)
	l.own.InfoContext(ctx, "hello from my own logger")
	*reply = "hi " + name
	return nil
}

func (l *Logs) Slow(ctx context.Context, ms int, reply *string) error {
	time.Sleep(time.Duration(ms) * time.Millisecond) // the slowness under test
	return nil
}

func TestRequestScopedLogging(t *testing.T) {
	h, own := &records{}, &records{}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(h)), kiev.WithAccessLog(), kiev.WithSlowLog(20*time.Millisecond))
	srv.Register(&Logs{own: slog.New(kiev.NewContextHandler(own))})
	c := dial(t, startServer(t, srv))
	ctx := kiev.WithPriority(kiev.WithMetadata(context.Background(), kiev.TraceIDKey, "trace-42"), 7)
	var reply string
	if err := c.Call(ctx, "Logs.Hello", "ann", &reply); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, "Logs.Slow", 40, &reply); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		h   *records
		msg string
	}{{h, "hello from the handler"}, {own, "hello from my own logger"}, {h, "kiev: call"}} {
		attrs, _, ok := tc.h.find(tc.msg)
		if !ok {
			t.Fatalf("no %q line", tc.msg)
		}
		if attrs["method"] != "Logs.Hello" || attrs["priority"] != "7" || attrs["trace_id"] != "trace-42" ||
			attrs["request_id"] == "" || !strings.HasPrefix(attrs["peer"], "127.0.0.1:") {
			t.Errorf("%q has attributes %v; want method, request_id, priority, peer and trace_id of the call", tc.msg, attrs)
		}
	}
	if attrs, _, _ := h.find("kiev: call"); attrs["code"] != "OK" || attrs["took"] == "" {
		t.Errorf("access line %v; want its code and duration", attrs)
	}
	attrs, level, ok := h.find("kiev: slow call")
	if !ok || level != slog.LevelWarn || attrs["method"] != "Logs.Slow" {
		t.Errorf("slow call line: %v at %v, found %v; want a Warn line for Logs.Slow", attrs, level, ok)
	}
	if kiev.Logger(context.Background()) != slog.Default() {
		t.Error("Logger outside a handler is not slog.Default()")
	}
}

// A server interceptor's WithLogAttrs reach the handler's Logger and
// NewContextHandler's records, after the call's own attributes, and
// nest: an inner interceptor's add to an outer one's.
func TestWithLogAttrsReachTheHandlersLogs(t *testing.T) {
	h, own := &records{}, &records{}
	tag := func(key, value string) kiev.ServerInterceptor {
		return func(next kiev.Handler) kiev.Handler {
			return func(ctx context.Context, req *kiev.Request) error {
				return next(kiev.WithLogAttrs(ctx, slog.String(key, value)), req)
			}
		}
	}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(h)), kiev.WithServerInterceptor(tag("span_id", "s-1"), tag("tenant", "t-7")))
	srv.Register(&Logs{own: slog.New(kiev.NewContextHandler(own))})
	c := dial(t, startServer(t, srv))
	var reply string
	if err := c.Call(context.Background(), "Logs.Hello", "ann", &reply); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		h   *records
		msg string
	}{{h, "hello from the handler"}, {own, "hello from my own logger"}} {
		attrs, _, ok := tc.h.find(tc.msg)
		if !ok {
			t.Fatalf("no %q line", tc.msg)
		}
		if attrs["method"] != "Logs.Hello" || attrs["span_id"] != "s-1" || attrs["tenant"] != "t-7" {
			t.Errorf("%q has attributes %v; want the call's and span_id, tenant", tc.msg, attrs)
		}
	}
	if kiev.LogAttrs(kiev.WithLogAttrs(context.Background(), slog.String("a", "b"))) != nil {
		t.Error("LogAttrs outside a handler is not nil")
	}
}

// observedServer serves Arith with admin pages, makes known calls, and
// returns the admin handler's test server and the client's target.
func observedServer(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	srv.Register(&Arith{})
	srv.RegisterHealth("cache", func(ctx context.Context) error { return nil })
	srv.RegisterHealth("db", func(ctx context.Context) error { return errors.New("db: connection refused") })
	addr := startServer(t, srv)
	c := dial(t, addr)
	for i := range 3 {
		if err := c.Call(context.Background(), "Arith.Add", Args{i, 1}, &Reply{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Call(context.Background(), "Arith.Div", Args{1, 0}, &Reply{}); err == nil {
		t.Fatal("Div by zero succeeded")
	}
	// A handler counts its call once its reply is sent: wait for the
	// server's own count of the four.
	deadline := time.Now().Add(10 * time.Second)
	for st := srv.Status(context.Background()); st.InFlight != 0 || countCalls(st) < 4; st = srv.Status(context.Background()) {
		if time.Now().After(deadline) {
			t.Fatalf("the server counts %d calls done and %d in flight 10 s after its four calls were answered", countCalls(st), st.InFlight)
		}
		time.Sleep(time.Millisecond) // polling the server's own count
	}
	hs := httptest.NewServer(srv.AdminHandler())
	t.Cleanup(hs.Close)
	return hs, addr
}

// countCalls is the calls a status counts done, in all its methods.
func countCalls(st admin.Status) (n int64) {
	for _, svc := range st.Services {
		for _, m := range svc.Methods {
			n += m.Calls
		}
	}
	return n
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
	}
	return string(b)
}

func TestMetricsScrape(t *testing.T) {
	hs, addr := observedServer(t)
	body := get(t, hs.URL+"/metrics")
	for _, want := range []string{
		`kiev_server_calls_total{code="OK",method="Arith.Add"} 3`,
		`kiev_server_calls_total{code="Application",method="Arith.Div"} 1`,
		`kiev_server_call_duration_seconds_count{method="Arith.Add"} 3`,
		`kiev_server_queue_length{priority="9"} 0`,
		`kiev_server_shed_total{reason="refused"} 0`,
		`kiev_client_calls_total{code="OK",target="` + addr + `"} 3`,
		`kiev_client_calls_total{code="Application",target="` + addr + `"} 1`,
		`kiev_client_retry_budget{target="` + addr + `"}`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "kiev_") {
			t.Errorf("metric %s breaks Prometheus conventions: %s", p.Metric, p.Text)
		}
	}
}

func TestStatusJSON(t *testing.T) {
	hs, addr := observedServer(t)
	var st admin.Status
	if err := json.Unmarshal([]byte(get(t, hs.URL+"/debug/kiev?format=json")), &st); err != nil {
		t.Fatal(err)
	}
	var add, div *admin.MethodStatus
	for i := range st.Services {
		for j := range st.Services[i].Methods {
			m := &st.Services[i].Methods[j]
			switch st.Services[i].Name + "." + m.Name {
			case "Arith.Add":
				add = m
			case "Arith.Div":
				div = m
			}
		}
	}
	if add == nil || add.Calls != 3 || add.MinuteCalls != 3 || add.Errors != 0 || add.P50Ms <= 0 || div == nil || div.Errors != 1 {
		t.Fatalf("status of Arith: Add %+v, Div %+v; want 3 calls, 1 error", add, div)
	}
	// A server up for less than a minute shows its rates over its
	// uptime (at least a second), not over a minute.
	if add.WindowSec < 1 || add.WindowSec > max(st.UptimeSec, 1) || add.Rate != float64(add.MinuteCalls)/add.WindowSec {
		t.Errorf("Arith.Add's rate is %v over %v s, for %d calls in %v s up; want the calls over the uptime", add.Rate, add.WindowSec, add.MinuteCalls, st.UptimeSec)
	}
	// The scheduler counts a call as run once its handler's goroutine is
	// done with it, a moment after the reply has left: poll for the last.
	for deadline := time.Now().Add(5 * time.Second); st.Scheduler.Ran < 4 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond) // polling the server's own counters
		var again admin.Status
		if err := json.Unmarshal([]byte(get(t, hs.URL+"/debug/kiev?format=json")), &again); err != nil {
			t.Fatal(err)
		}
		st.Scheduler = again.Scheduler
	}
	if len(st.Scheduler.Queued) != 10 || st.Scheduler.Ran < 4 {
		t.Errorf("scheduler %+v", st.Scheduler)
	}
	if h := st.Health; len(h) != 2 || !h[0].OK || h[1].OK || h[1].Error != "db: connection refused" {
		t.Errorf("health %+v; want failing, cache ok and db refused", st.Health)
	}
	found := false
	for _, c := range st.Clients {
		if c.Target == addr && c.Calls == 4 && len(c.Providers) == 1 {
			found = true
		}
	}
	if !found {
		t.Errorf("clients %+v lack the one dialing %s", st.Clients, addr)
	}
}

// TestStatusPageInBrowser loads the status page in headless Chromium,
// which runs its script: the page renders on the server, and the script
// refreshes it. A call made after the page loaded shows after a refresh.
func TestStatusPageInBrowser(t *testing.T) {
	chromium := os.Getenv("KIEV_CHROMIUM")
	if chromium == "" {
		t.Skip("KIEV_CHROMIUM is not set; run scripts/services.sh up and eval \"$(scripts/services.sh env)\" to test the status page in headless Chromium")
	}
	hs, addr := observedServer(t)
	admin := hs.Config.Handler
	c := dial(t, addr)
	var pages atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/debug/kiev" && pages.Add(1) == 2 { // the first refresh
			if err := c.Call(r.Context(), "Arith.Add", Args{1, 2}, &Reply{}); err != nil {
				t.Error(err)
			}
		}
		admin.ServeHTTP(w, r)
	}))
	defer front.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-dev-shm-usage", "--user-data-dir="+t.TempDir(),
		"--virtual-time-budget=5000", "--dump-dom", front.URL+"/debug/kiev").Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	dom := string(out)
	if !strings.Contains(dom, `data-rendered="true"`) || !strings.Contains(dom, "refreshed every 2 s") {
		t.Fatalf("the page did not render, or its script did not run:\n%s", dom)
	}
	if pages.Load() < 2 {
		t.Errorf("the page was fetched %d times in 5 seconds; want a refresh every 2", pages.Load())
	}
	for _, re := range []string{
		`data-method="Arith.Add"><td>Arith.Add</td><td class="calls">4</td><td class="errors">0</td>`, // 3, and 1 since the page loaded
		`data-method="Arith.Div"><td>Arith.Div</td><td class="calls">1</td><td class="errors bad">1</td>`,
		`data-check="db"><td>db</td><td class="state bad">db: connection refused</td>`,
		`data-check="cache"><td>cache</td><td class="state ok">ok</td>`,
		`data-reason="refused"><td>refused</td><td( class="")?>0</td>`,
	} {
		if !regexp.MustCompile(re).MatchString(dom) {
			t.Errorf("the page lacks %s", re)
		}
	}
	if !strings.Contains(dom, `<div id="error"></div>`) {
		t.Errorf("the page shows a refresh error:\n%s", dom)
	}
}

func TestWithAdminListens(t *testing.T) {
	srv := kiev.NewServer(kiev.WithAdmin("127.0.0.1:0"), kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	srv.Register(&Arith{})
	startServer(t, srv)
	deadline := time.Now().Add(5 * time.Second)
	for srv.AdminAddr() == "" && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // Serve starts the admin listener on its goroutine
	}
	if srv.AdminAddr() == "" {
		t.Fatal("no admin address after Serve")
	}
	if body := get(t, "http://"+srv.AdminAddr()+"/metrics"); !strings.Contains(body, "kiev_server_connections") {
		t.Fatal("admin /metrics lacks kiev's metrics")
	}
}

func TestProviderMetrics(t *testing.T) {
	reg := memory.New()
	for i := range 2 {
		srv := kiev.NewServer(kiev.WithRegistry(reg), kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
		srv.Register(&Who{name: fmt.Sprint("m", i)})
		startServer(t, srv)
	}
	c := dial(t, "Who", kiev.WithRegistry(reg), kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	waitProviders(t, c, 2)
	for range 10 {
		callName(t, c, context.Background())
	}
	admin := kiev.NewServer(kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	hs := httptest.NewServer(admin.AdminHandler())
	defer hs.Close()
	body := get(t, hs.URL+"/metrics")
	for _, p := range c.Providers() {
		for _, want := range []string{
			`kiev_client_provider_calls_total{code="OK",provider="` + p.Instance.ID() + `",target="Who"} 5`,
			`kiev_client_provider_call_duration_seconds_count{provider="` + p.Instance.ID() + `",target="Who"} 5`,
			`kiev_client_provider_ejected{provider="` + p.Instance.ID() + `",target="Who"} 0`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	}
}

func TestWithMetricsRegistersOnYourRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv := kiev.NewServer(kiev.WithMetrics(reg), kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	srv.Register(&Arith{})
	c := dial(t, startServer(t, srv))
	if err := c.Call(context.Background(), "Arith.Add", Args{1, 2}, &Reply{}); err != nil {
		t.Fatal(err)
	}
	want := "\n# HELP kiev_server_calls_total Calls a server answered, by method and code (OK, Application, Overloaded, ...; User for codes of 100 and up).\n# TYPE kiev_server_calls_total counter\nkiev_server_calls_total{code=\"OK\",method=\"Arith.Add\"} 1\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kiev_server_calls_total"); err != nil {
		t.Error(err)
	}
}

func TestSetDefaultRegistry(t *testing.T) {
	old := kiev.DefaultRegistry()
	defer kiev.SetDefaultRegistry(old)
	reg := memory.New()
	kiev.SetDefaultRegistry(reg)
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	srv.RegisterName("Elsewhere", &Who{name: "e"})
	startServer(t, srv)
	w, err := reg.Watch(context.Background(), "Elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		set, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("the server did not register in the registry SetDefaultRegistry set: %v", err)
		}
		if len(set) == 1 {
			break
		}
	}
}

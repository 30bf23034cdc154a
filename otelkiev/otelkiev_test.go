package otelkiev_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/internal/servetest"
	"github.com/kievrpc/kiev/otelkiev"
	"github.com/kievrpc/kiev/registry/memory"
	"github.com/kievrpc/kiev/shed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// telemetry is the real OpenTelemetry SDK, exporting spans to memory and
// metrics to a reader the test collects from.
type telemetry struct {
	spans   *tracetest.InMemoryExporter
	tp      *sdktrace.TracerProvider
	metrics *sdkmetric.ManualReader
	mp      *sdkmetric.MeterProvider
}

func newTelemetry(t testing.TB) *telemetry {
	tel := &telemetry{spans: tracetest.NewInMemoryExporter(), metrics: sdkmetric.NewManualReader()}
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(tel.spans))
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.metrics))
	t.Cleanup(func() {
		tel.tp.Shutdown(context.Background())
		tel.mp.Shutdown(context.Background())
	})
	return tel
}

func (tel *telemetry) opts(more ...otelkiev.Option) []otelkiev.Option {
	return append([]otelkiev.Option{otelkiev.WithTracerProvider(tel.tp), otelkiev.WithMeterProvider(tel.mp)}, more...)
}

// span returns the one ended span of that name and kind.
func (tel *telemetry) span(t *testing.T, name string, kind trace.SpanKind) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range tel.spans.GetSpans() {
		if s.Name == name && s.SpanKind == kind {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %v spans named %q; want 1; all: %v", len(found), kind, name, names(tel.spans.GetSpans()))
	}
	return found[0]
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.SpanKind.String()+" "+s.Name)
	}
	return out
}

// attrs returns a span's attributes by key, as strings.
func attrs(s tracetest.SpanStub) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value.Emit()
	}
	return m
}

// wantAttrs checks that s has each of want's attributes with its value.
func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[attribute.Key]string) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%v span %s: %s = %q; want %q (all: %v)", s.SpanKind, s.Name, k, got[k], v, got)
		}
	}
}

// Store is the last hop, C: it logs with the call's logger.
type Store struct{}

func (Store) Get(ctx context.Context, key string, reply *string) error {
	kiev.Logger(ctx).Info("store get", "key", key)
	*reply = "value of " + key
	return nil
}

// Front is the middle hop, B: it asks the Store with its own ctx.
type Front struct{ store *kiev.Client }

func (f *Front) Get(ctx context.Context, key string, reply *string) error {
	return f.store.Call(ctx, "Store.Get", key, reply)
}

// Slow blocks each call until released, to fill a scheduler's queue.
type Slow struct {
	started chan struct{}
	release chan struct{}
}

func (s *Slow) Block(ctx context.Context, _ int, _ *int) error {
	s.started <- struct{}{}
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Slow) Quick(ctx context.Context, _ int, _ *int) error { return nil }

// records keeps the log records a server writes.
type records struct {
	mu    sync.Mutex
	recs  []map[string]string
	attrs []slog.Attr
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message}
	for _, a := range h.attrs {
		m[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, m)
	return nil
}
func (h *records) WithAttrs(as []slog.Attr) slog.Handler {
	h.mu.Lock()
	defer h.mu.Unlock()
	return &recordsWith{h, as}
}
func (h *records) WithGroup(string) slog.Handler { return h }

type recordsWith struct {
	*records
	attrs []slog.Attr
}

func (h *recordsWith) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	return h.records.Handle(ctx, r)
}

func (h *records) find(msg string) map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r["msg"] == msg {
			return r
		}
	}
	return nil
}

var quiet = kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))

// serve starts srv on a loopback port, registers svc, and stops it when
// the test ends.
func serve(t testing.TB, svc any, opts ...kiev.ServerOption) (*kiev.Server, string) {
	t.Helper()
	srv := kiev.NewServer(append([]kiev.ServerOption{quiet}, opts...)...)
	if err := srv.Register(svc); err != nil {
		t.Fatal(err)
	}
	return srv, servetest.Start(t, srv)
}

func dial(t testing.TB, addr string, opts ...kiev.DialOption) *kiev.Client {
	t.Helper()
	c, err := kiev.Dial(addr, append([]kiev.DialOption{quiet}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A → B → C: the test (A) calls Front (B), which calls Store (C). One
// trace, each span the child of the one before, through kiev metadata
// alone: every server's span comes from its own base context. The
// global propagator is the default no-op, so this is the W3C fallback.
func TestTwoHopsMakeOneTrace(t *testing.T) {
	tel := newTelemetry(t)
	logs := &records{}
	_, cAddr := serve(t, Store{}, kiev.WithLogger(slog.New(logs)),
		kiev.WithServerInterceptor(otelkiev.ServerInterceptor(tel.opts()...)))
	toC := dial(t, cAddr, kiev.WithClientInterceptor(otelkiev.ClientInterceptor(tel.opts()...)))
	_, bAddr := serve(t, &Front{store: toC}, kiev.WithServerInterceptor(otelkiev.ServerInterceptor(tel.opts()...)))
	toB := dial(t, bAddr, kiev.WithClientInterceptor(otelkiev.ClientInterceptor(tel.opts()...)))

	ctx, root := tel.tp.Tracer("test").Start(context.Background(), "A")
	var reply string
	if err := toB.Call(kiev.WithPriority(ctx, 7), "Front.Get", "k", &reply); err != nil || reply != "value of k" {
		t.Fatalf("call = %q, %v", reply, err)
	}
	root.End()

	spans := tel.spans.GetSpans()
	if len(spans) != 5 {
		t.Fatalf("%d spans: %v; want A, its client span, B's server and client spans, C's server span", len(spans), names(spans))
	}
	a := tel.span(t, "A", trace.SpanKindInternal)
	aClient := tel.span(t, "Front/Get", trace.SpanKindClient)
	bServer := tel.span(t, "Front/Get", trace.SpanKindServer)
	bClient := tel.span(t, "Store/Get", trace.SpanKindClient)
	cServer := tel.span(t, "Store/Get", trace.SpanKindServer)
	for _, link := range []struct{ child, parent tracetest.SpanStub }{
		{aClient, a}, {bServer, aClient}, {bClient, bServer}, {cServer, bClient},
	} {
		c, p := link.child, link.parent
		if c.SpanContext.TraceID() != a.SpanContext.TraceID() {
			t.Errorf("%v %s is in trace %s; want A's, %s", c.SpanKind, c.Name, c.SpanContext.TraceID(), a.SpanContext.TraceID())
		}
		if c.Parent.SpanID() != p.SpanContext.SpanID() {
			t.Errorf("%v %s's parent is %s; want %v %s, %s", c.SpanKind, c.Name, c.Parent.SpanID(), p.SpanKind, p.Name, p.SpanContext.SpanID())
		}
		if remote := c.SpanKind == trace.SpanKindServer; c.Parent.IsRemote() != remote {
			t.Errorf("%v %s's parent is remote: %v; want %v", c.SpanKind, c.Name, c.Parent.IsRemote(), remote)
		}
	}

	_, cPort, _ := net.SplitHostPort(cAddr)
	wantAttrs(t, bClient, map[attribute.Key]string{
		"rpc.system": "kiev", "rpc.service": "Store", "rpc.method": "Get",
		"server.address": "127.0.0.1", "server.port": cPort,
		"rpc.kiev.code": "OK", "kiev.priority": "7",
	})
	wantAttrs(t, cServer, map[attribute.Key]string{
		"rpc.system": "kiev", "rpc.service": "Store", "rpc.method": "Get",
		"network.peer.address": "127.0.0.1", "rpc.kiev.code": "OK", "kiev.priority": "7",
	})
	for _, s := range []tracetest.SpanStub{aClient, bServer, bClient, cServer} {
		if s.Status.Code != codes.Unset {
			t.Errorf("%v %s: status %v; want unset", s.SpanKind, s.Name, s.Status)
		}
		if _, ok := attrs(s)["kiev.shed"]; ok {
			t.Errorf("%v %s says it was shed", s.SpanKind, s.Name)
		}
		if s.InstrumentationScope.Name != otelkiev.ScopeName && s.Name != "A" {
			t.Errorf("%v %s: scope %q", s.SpanKind, s.Name, s.InstrumentationScope.Name)
		}
	}

	// C's handler logged with kiev.Logger(ctx): its line carries C's
	// server span's ids.
	line := logs.find("store get")
	if line == nil {
		t.Fatal("C's handler logged no line")
	}
	if line["trace_id"] != cServer.SpanContext.TraceID().String() || line["span_id"] != cServer.SpanContext.SpanID().String() ||
		line["method"] != "Store.Get" || line["key"] != "k" {
		t.Errorf("C's log line %v; want the call's attributes with trace_id %s and span_id %s",
			line, cServer.SpanContext.TraceID(), cServer.SpanContext.SpanID())
	}
}

// The server's scheduler answers a call it sheds without running it: no
// server span, and the client's span says the call was shed.
func TestShedCallsSpanSaysSo(t *testing.T) {
	tel := newTelemetry(t)
	svc := &Slow{started: make(chan struct{}, 1), release: make(chan struct{})}
	srv, addr := serve(t, svc, kiev.WithShed(shed.Options{Workers: 1, QueueSize: 1}),
		kiev.WithServerInterceptor(otelkiev.ServerInterceptor(tel.opts()...)))
	c := dial(t, addr, kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1}),
		kiev.WithClientInterceptor(otelkiev.ClientInterceptor(tel.opts()...)))
	bg := context.Background()

	blocked := c.Go(bg, "Slow.Block", 0, nil, nil)
	<-svc.started
	queued := c.Go(kiev.WithPriority(bg, 3), "Slow.Quick", 0, nil, nil)
	waitQueued(t, srv, 1)
	// As important as the queued call: refused at once.
	err := c.Call(kiev.WithPriority(bg, 3), "Slow.Block", 0, nil)
	if !errors.Is(err, kiev.ErrOverloaded) {
		t.Fatalf("call to a full queue = %v; want ErrOverloaded", err)
	}
	refused := tel.span(t, "Slow/Block", trace.SpanKindClient) // the blocked call's has not ended
	wantAttrs(t, refused, map[attribute.Key]string{"kiev.shed": "overloaded", "rpc.kiev.code": "Overloaded", "kiev.priority": "3"})
	if refused.Status.Code != codes.Error || !strings.Contains(refused.Status.Description, "refused") {
		t.Errorf("refused call's span: status %v; want Error, saying it was refused", refused.Status)
	}

	// More important: takes the queued call's place, which is shed.
	important := c.Go(kiev.WithPriority(bg, 9), "Slow.Quick", 1, nil, nil)
	<-queued.Done
	close(svc.release)
	<-blocked.Done
	<-important.Done
	if !errors.Is(queued.Error, kiev.ErrOverloaded) || blocked.Error != nil || important.Error != nil {
		t.Fatalf("evicted %v, blocked %v, important %v; want ErrOverloaded, nil, nil", queued.Error, blocked.Error, important.Error)
	}
	var evicted, ran tracetest.SpanStub
	for _, s := range tel.spans.GetSpans() {
		if s.Name == "Slow/Quick" && s.SpanKind == trace.SpanKindClient {
			if attrs(s)["kiev.priority"] == "3" {
				evicted = s
			} else {
				ran = s
			}
		}
	}
	wantAttrs(t, evicted, map[attribute.Key]string{"kiev.shed": "overloaded", "rpc.kiev.code": "Overloaded"})
	if !strings.Contains(evicted.Status.Description, "more important call") {
		t.Errorf("evicted call's span: status %v; want it to say a more important call took its place", evicted.Status)
	}
	wantAttrs(t, ran, map[attribute.Key]string{"rpc.kiev.code": "OK", "kiev.priority": "9"})

	// The two calls that ran have server spans; the shed ones have none.
	var servers []string
	for _, s := range tel.spans.GetSpans() {
		if s.SpanKind == trace.SpanKindServer {
			servers = append(servers, s.Name)
			for _, shedSpan := range []tracetest.SpanStub{refused, evicted} {
				if s.Parent.SpanID() == shedSpan.SpanContext.SpanID() {
					t.Errorf("shed call %s has a server span", shedSpan.Name)
				}
			}
		}
	}
	if len(servers) != 2 {
		t.Errorf("server spans %v; want the two calls that ran", servers)
	}
}

// waitQueued waits until srv's scheduler holds n queued calls.
func waitQueued(t *testing.T, srv *kiev.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		total := 0
		for _, q := range srv.Scheduler().Stats().Queued {
			total += q
		}
		if total == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("scheduler holds %d queued calls, want %d", total, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// An HTTP call that brings a traceparent header continues its trace.
func TestHTTPFrontContinuesTheCallersTrace(t *testing.T) {
	tel := newTelemetry(t)
	srv, _ := serve(t, Store{}, kiev.WithServerInterceptor(otelkiev.ServerInterceptor(tel.opts()...)))
	hs := httptest.NewServer(srv.HTTPHandler())
	defer hs.Close()

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, _ := http.NewRequest("POST", hs.URL+"/Store.Get", strings.NewReader(`"k"`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
	req.Header.Set("tracestate", "vendor=x")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "value of k") {
		t.Fatalf("HTTP call: %d %s", resp.StatusCode, body)
	}
	s := tel.span(t, "Store/Get", trace.SpanKindServer)
	if s.SpanContext.TraceID().String() != traceID || s.Parent.SpanID().String() != parentID || !s.Parent.IsRemote() {
		t.Errorf("server span in trace %s with parent %s (remote %v); want trace %s, parent %s",
			s.SpanContext.TraceID(), s.Parent.SpanID(), s.Parent.IsRemote(), traceID, parentID)
	}
	if got := s.SpanContext.TraceState().Get("vendor"); got != "x" {
		t.Errorf("tracestate vendor = %q; want x", got)
	}
	wantAttrs(t, s, map[attribute.Key]string{"rpc.service": "Store", "rpc.method": "Get", "network.peer.address": "127.0.0.1"})
}

// Failures: a handler's error makes the server span an Error, a caller's
// mistake does not; a method the server lacks names neither span nor
// series after the caller.
func TestStatusOfFailedCalls(t *testing.T) {
	tel := newTelemetry(t)
	_, addr := serve(t, &Failing{}, kiev.WithServerInterceptor(otelkiev.ServerInterceptor(tel.opts()...)))
	c := dial(t, addr, kiev.WithClientInterceptor(otelkiev.ClientInterceptor(tel.opts()...)))
	bg := context.Background()

	for _, tc := range []struct {
		method      string
		code        int
		serverName  string
		serverError bool
		kievCode    string
	}{
		{"Failing.Do", 0, "Failing/Do", true, "Application"},
		{"Failing.Do", 404, "Failing/Do", false, "404"},
		{"Failing.Do", 503, "Failing/Do", true, "503"},
		{"Failing.Nope", 0, "_OTHER", true, "NotFound"},
	} {
		tel.spans.Reset()
		if err := c.Call(bg, tc.method, tc.code, nil); err == nil {
			t.Fatalf("%s(%d) succeeded", tc.method, tc.code)
		}
		client := tel.span(t, strings.Replace(tc.method, ".", "/", 1), trace.SpanKindClient)
		server := tel.span(t, tc.serverName, trace.SpanKindServer)
		if client.Status.Code != codes.Error {
			t.Errorf("%s(%d): client status %v; want Error", tc.method, tc.code, client.Status)
		}
		if got := server.Status.Code == codes.Error; got != tc.serverError {
			t.Errorf("%s(%d): server status %v; want Error: %v", tc.method, tc.code, server.Status, tc.serverError)
		}
		wantAttrs(t, client, map[attribute.Key]string{"rpc.kiev.code": tc.kievCode})
		wantAttrs(t, server, map[attribute.Key]string{"rpc.kiev.code": tc.kievCode})
	}

	// No server to call: the client span says so without a code, and
	// names the service it dialed.
	tel.spans.Reset()
	reg := memory.New()
	defer reg.Close()
	none := dial(t, "Nobody", kiev.WithRegistry(reg), kiev.WithFailFast(),
		kiev.WithClientInterceptor(otelkiev.ClientInterceptor(tel.opts()...)))
	if err := none.Call(bg, "Nobody.Home", 0, nil); !errors.Is(err, kiev.ErrUnavailable) {
		t.Fatalf("call with no provider = %v; want ErrUnavailable", err)
	}
	s := tel.span(t, "Nobody/Home", trace.SpanKindClient)
	wantAttrs(t, s, map[attribute.Key]string{"error.type": "Unavailable", "server.address": "Nobody", "rpc.kiev.code": ""})
	if s.Status.Code != codes.Error {
		t.Errorf("call with no provider: client status %v; want Error", s.Status)
	}
}

// Failing fails as asked: with code, or a plain error for 0.
type Failing struct{}

func (*Failing) Do(ctx context.Context, code int, _ *int) error {
	if code == 0 {
		return errors.New("it broke")
	}
	return kiev.Errorf(kiev.Code(code), "failed with %d", code)
}

// The call durations reach the MeterProvider, by method and code; an
// unknown method's as _OTHER.
func TestDurationsAreRecorded(t *testing.T) {
	tel := newTelemetry(t)
	_, addr := serve(t, Store{}, kiev.WithServerInterceptor(otelkiev.ServerInterceptor(tel.opts()...)))
	c := dial(t, addr, kiev.WithClientInterceptor(otelkiev.ClientInterceptor(tel.opts()...)))
	for range 3 {
		if err := c.Call(context.Background(), "Store.Get", "k", new(string)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Call(context.Background(), "Store.Nope", "k", nil); !errors.Is(err, kiev.ErrNotFound) {
		t.Fatalf("unknown method: %v", err)
	}
	var rm metricdata.ResourceMetrics
	if err := tel.metrics.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{} // "name unit {attrs}": count
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				t.Errorf("%s is %T; want a float64 histogram", m.Name, m.Data)
				continue
			}
			for _, dp := range h.DataPoints {
				var kv []string
				for _, a := range dp.Attributes.ToSlice() {
					if a.Key != "server.port" {
						kv = append(kv, string(a.Key)+"="+a.Value.Emit())
					}
				}
				got[m.Name+" "+m.Unit+" "+strings.Join(kv, ",")] += dp.Count
			}
		}
	}
	want := map[string]uint64{
		"rpc.server.duration ms rpc.kiev.code=OK,rpc.method=Get,rpc.service=Store,rpc.system=kiev":                                 3,
		"rpc.server.duration ms rpc.kiev.code=NotFound,rpc.method=_OTHER,rpc.system=kiev":                                          1,
		"rpc.client.duration ms rpc.kiev.code=OK,rpc.method=Get,rpc.service=Store,rpc.system=kiev,server.address=127.0.0.1":        3,
		"rpc.client.duration ms rpc.kiev.code=NotFound,rpc.method=Nope,rpc.service=Store,rpc.system=kiev,server.address=127.0.0.1": 1,
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: %d data; want %d\ngot %v", k, got[k], n, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("series %v; want %v", got, want)
	}
}

// WithPropagators sets what travels: here baggage beside the trace.
func TestWithPropagatorsCarriesBaggage(t *testing.T) {
	tel := newTelemetry(t)
	prop := otelkiev.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	_, addr := serve(t, BaggageReader{}, kiev.WithServerInterceptor(otelkiev.ServerInterceptor(tel.opts(prop)...)))
	c := dial(t, addr, kiev.WithClientInterceptor(otelkiev.ClientInterceptor(tel.opts(prop)...)))
	m, _ := baggage.NewMember("tenant", "t-7")
	b, _ := baggage.New(m)
	var reply string
	if err := c.Call(baggage.ContextWithBaggage(context.Background(), b), "BaggageReader.Read", "tenant", &reply); err != nil || reply != "t-7" {
		t.Fatalf("handler read baggage %q, %v; want t-7", reply, err)
	}
	server := tel.span(t, "BaggageReader/Read", trace.SpanKindServer)
	client := tel.span(t, "BaggageReader/Read", trace.SpanKindClient)
	if server.Parent.SpanID() != client.SpanContext.SpanID() {
		t.Errorf("server span's parent %s; want the client span %s", server.Parent.SpanID(), client.SpanContext.SpanID())
	}
}

// BaggageReader answers the baggage member its caller names.
type BaggageReader struct{}

func (BaggageReader) Read(ctx context.Context, key string, reply *string) error {
	*reply = baggage.FromContext(ctx).Member(key).Value()
	return nil
}

// With DropHook, a call the scheduler sheds has a server span, a child of
// the caller's, that says why.
func TestDropHookSpans(t *testing.T) {
	tel := newTelemetry(t)
	svc := &Slow{started: make(chan struct{}, 1), release: make(chan struct{})}
	srv, addr := serve(t, svc, kiev.WithShed(shed.Options{Workers: 1, QueueSize: 1}),
		kiev.WithServerInterceptor(otelkiev.ServerInterceptor(tel.opts()...)),
		kiev.WithDropHook(otelkiev.DropHook(tel.opts()...)))
	c := dial(t, addr, kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1}),
		kiev.WithClientInterceptor(otelkiev.ClientInterceptor(tel.opts()...)))
	bg := context.Background()

	blocked := c.Go(bg, "Slow.Block", 0, nil, nil)
	<-svc.started
	queued := c.Go(kiev.WithPriority(bg, 3), "Slow.Quick", 0, nil, nil)
	waitQueued(t, srv, 1)
	if err := c.Call(kiev.WithPriority(bg, 3), "Slow.Block", 0, nil); !errors.Is(err, kiev.ErrOverloaded) {
		t.Fatalf("call to a full queue = %v; want ErrOverloaded", err)
	}
	important := c.Go(kiev.WithPriority(bg, 9), "Slow.Quick", 1, nil, nil)
	<-queued.Done
	close(svc.release)
	<-blocked.Done
	<-important.Done

	spans := tel.spans.GetSpans()
	shedBy := map[string]string{} // client span name+priority → reason of its server span
	for _, client := range spans {
		if client.SpanKind != trace.SpanKindClient || attrs(client)["kiev.shed"] == "" {
			continue
		}
		for _, s := range spans {
			if s.SpanKind == trace.SpanKindServer && s.Parent.SpanID() == client.SpanContext.SpanID() {
				if s.Status.Code != codes.Error || attrs(s)["rpc.kiev.code"] != "Overloaded" || attrs(s)["kiev.priority"] != "3" {
					t.Errorf("%s's server span: status %v, attributes %v; want Error, Overloaded, priority 3", s.Name, s.Status, attrs(s))
				}
				shedBy[client.Name] = attrs(s)["kiev.shed"]
			}
		}
	}
	if want := map[string]string{"Slow/Block": "refused", "Slow/Quick": "evicted"}; !maps.Equal(shedBy, want) {
		t.Errorf("shed calls' server spans say %v; want %v", shedBy, want)
	}
}

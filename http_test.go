package kiev_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/internal/nginxtest"
	"github.com/kievrpc/kiev/shed"
)

// Web is the service the HTTP tests call.
type Web struct {
	block   chan struct{} // Hold waits on it
	started chan struct{}
}

type WebArgs struct {
	Name  string
	Count int
	Tags  []string
}

type WebReply struct {
	Greeting string
	Count    int
	Meta     string
	Priority int
	Bytes    int
}

func (w *Web) Hello(ctx context.Context, a WebArgs, r *WebReply) error {
	*r = WebReply{Greeting: "hello, " + a.Name, Count: a.Count * 2, Meta: kiev.MetadataFrom(ctx).Get("trace-id"),
		Priority: int(kiev.PriorityFrom(ctx)), Bytes: len(strings.Join(a.Tags, ""))}
	return nil
}

func (w *Web) Fail(ctx context.Context, a WebArgs, r *WebReply) error {
	if a.Count > 0 {
		return kiev.Errorf(kiev.Code(a.Count), "%s not found", a.Name)
	}
	return fmt.Errorf("cannot greet %s", a.Name)
}

func (w *Web) Hold(ctx context.Context, a WebArgs, r *WebReply) error {
	if w.started != nil {
		w.started <- struct{}{}
	}
	select {
	case <-w.block:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// httpCase is one request and the answer it must get.
type httpCase struct {
	name, method, path, body string
	header                   map[string]string
	status                   int
	code                     string // the error code, for errors
	contains                 string // in the body
}

func webCases(big int) []httpCase {
	return []httpCase{
		{name: "ok", method: "POST", path: "/Web.Hello", body: `{"Name":"ann","Count":21}`, status: 200, contains: `"Greeting":"hello, ann","Count":42`},
		{name: "slash path", method: "POST", path: "/Web/Hello", body: `{"Name":"bob"}`, status: 200, contains: `"hello, bob"`},
		{name: "empty body", method: "POST", path: "/Web.Hello", status: 200, contains: `"hello, "`},
		{name: "headers", method: "POST", path: "/Web.Hello", body: `{}`, header: map[string]string{"Kiev-Priority": "8", "Kiev-Meta-Trace-Id": "t-9"}, status: 200, contains: `"Meta":"t-9","Priority":8`},
		{name: "unknown method", method: "POST", path: "/Web.Nope", body: `{}`, status: 404, code: "NotFound"},
		{name: "unknown service", method: "POST", path: "/Nope.Hello", body: `{}`, status: 404, code: "NotFound"},
		{name: "GET", method: "GET", path: "/Web.Hello", status: 405, code: "MethodNotAllowed"},
		{name: "bad JSON", method: "POST", path: "/Web.Hello", body: `{"Name":`, status: 400, code: "BadRequest", contains: "invalid JSON"},
		{name: "wrong field type", method: "POST", path: "/Web.Hello", body: `{"Name":"ann","Count":"many"}`, status: 400, code: "BadRequest", contains: `field \"Count\"`},
		{name: "bad priority", method: "POST", path: "/Web.Hello", body: `{}`, header: map[string]string{"Kiev-Priority": "11"}, status: 400, code: "BadRequest"},
		{name: "bad timeout", method: "POST", path: "/Web.Hello", body: `{}`, header: map[string]string{"Kiev-Timeout": "soon"}, status: 400, code: "BadRequest"},
		{name: "too large", method: "POST", path: "/Web.Hello", body: `{"Name":"` + strings.Repeat("x", big) + `"}`, status: 413, code: "TooLarge"},
		{name: "handler error", method: "POST", path: "/Web.Fail", body: `{"Name":"ann"}`, status: 500, code: "Application", contains: "cannot greet ann"},
		{name: "handler status", method: "POST", path: "/Web.Fail", body: `{"Name":"ann","Count":404}`, status: 404, code: "404", contains: "ann not found"},
		{name: "deadline", method: "POST", path: "/Web.Hold", body: `{}`, header: map[string]string{"Kiev-Timeout": "50ms"}, status: 504, code: "DeadlineExceeded"},
		{name: "charset", method: "POST", path: "/Web.Hello", body: `{"Name":"cy"}`, header: map[string]string{"Content-Type": "application/json; charset=utf-8"}, status: 200, contains: `"hello, cy"`},
		{name: "+json type", method: "POST", path: "/Web.Hello", body: `{"Name":"vnd"}`, header: map[string]string{"Content-Type": "application/vnd.api+json"}, status: 200, contains: `"hello, vnd"`},
		// A web page may post these to any site without asking it first.
		{name: "text/plain", method: "POST", path: "/Web.Hello", body: `{}`, header: map[string]string{"Content-Type": "text/plain"}, status: 415, code: "UnsupportedMediaType", contains: "Content-Type: application/json"},
		{name: "form", method: "POST", path: "/Web.Hello", body: `{}`, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, status: 415, code: "UnsupportedMediaType"},
		{name: "no Content-Type", method: "POST", path: "/Web.Hello", body: `{}`, header: map[string]string{"Content-Type": ""}, status: 415, code: "UnsupportedMediaType"},
		{name: "large body", method: "POST", path: "/Web.Hello", body: `{"Tags":["` + strings.Repeat("y", 500_000) + `"]}`, status: 200, contains: `"Bytes":500000`},
	}
}

// check sends c to base and checks the answer.
func (c httpCase) check(t *testing.T, client *http.Client, base string) {
	t.Helper()
	req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	if c.method == "POST" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range c.header {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != c.status {
		t.Fatalf("%s: status %d, want %d; body %s", c.name, resp.StatusCode, c.status, body)
	}
	if c.contains != "" && !strings.Contains(string(body), c.contains) {
		t.Errorf("%s: body %s lacks %s", c.name, body, c.contains)
	}
	if c.code != "" {
		var e struct{ Error, Code string }
		if err := json.Unmarshal(body, &e); err != nil || e.Code != c.code || e.Error == "" || resp.Header.Get("Kiev-Error-Code") != c.code {
			t.Errorf("%s: error body %s (%v), header %q; want JSON with code %s", c.name, body, err, resp.Header.Get("Kiev-Error-Code"), c.code)
		}
	}
	if c.status == 405 && resp.Header.Get("Allow") != "POST" {
		t.Errorf("%s: Allow = %q", c.name, resp.Header.Get("Allow"))
	}
}

func newWebServer(t *testing.T, opts ...kiev.ServerOption) (*kiev.Server, *Web) {
	t.Helper()
	w := &Web{block: make(chan struct{})}
	t.Cleanup(func() { close(w.block) })
	srv := kiev.NewServer(append([]kiev.ServerOption{kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), kiev.WithHTTPMaxBody(1 << 20)}, opts...)...)
	if err := srv.Register(w); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, w
}

// fronts returns the HTTP bases to test: the handler directly, and
// through nginx over FastCGI.
func fronts(t *testing.T, srv *kiev.Server) map[string]string {
	hs := httptest.NewServer(srv.HTTPHandler())
	t.Cleanup(hs.Close)
	out := map[string]string{"direct": hs.URL}
	l := listen(t)
	done := make(chan error, 1)
	go func() { done <- srv.ServeFastCGI(l) }()
	// Before nginxtest.Start, which skips the test without nginx.
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	ng := nginxtest.Start(t, l.Addr().String(), nginxtest.MaxBody("64m"))
	t.Cleanup(ng.Stop) // first: nginx goes before the server
	out["nginx"] = ng.URL()
	return out
}

func TestHTTPFront(t *testing.T) {
	srv, _ := newWebServer(t)
	for name, base := range fronts(t, srv) {
		t.Run(name, func(t *testing.T) {
			for _, c := range webCases(1 << 20) {
				c.check(t, http.DefaultClient, base)
			}
		})
	}
}

func TestHTTPConcurrent(t *testing.T) {
	// A burst of 1,000 calls is some 100ms of work, more under -race on a
	// machine busy with other tests: past the scheduler's default MaxWait
	// it sheds some, as it should (TestHTTPOverloaded tests that). This
	// test is about each call getting its own answer, so calls may wait,
	// and their deadline is a minute, not WithHTTPTimeout's 10 s default:
	// on a loaded machine the scheduler once dropped a call it predicted
	// could not end within 10 s (503, Expired).
	srv, _ := newWebServer(t, kiev.WithShed(shed.Options{MaxWait: 10 * time.Second}), kiev.WithHTTPTimeout(time.Minute))
	for name, base := range fronts(t, srv) {
		t.Run(name, func(t *testing.T) {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
			defer client.CloseIdleConnections()
			var wg sync.WaitGroup
			errs := make(chan error, 1000)
			for i := range 1000 {
				wg.Go(func() {
					body := fmt.Sprintf(`{"Name":"n%d","Count":%d}`, i, i)
					resp, err := client.Post(base+"/Web.Hello", "application/json", strings.NewReader(body))
					if err != nil {
						errs <- err
						return
					}
					defer resp.Body.Close()
					var r WebReply
					if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != 200 || r.Greeting != fmt.Sprintf("hello, n%d", i) || r.Count != 2*i {
						errs <- fmt.Errorf("request %d: %d %+v %v", i, resp.StatusCode, r, err)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if t.Failed() {
				t.Logf("scheduler: %+v", srv.Scheduler().Stats())
			}
		})
	}
}

func TestHTTPOverloaded(t *testing.T) {
	srv, w := newWebServer(t, kiev.WithShed(shed.Options{Workers: 1, QueueSize: 1}))
	w.started = make(chan struct{}, 1)
	for name, base := range fronts(t, srv) {
		t.Run(name, func(t *testing.T) {
			// One call holds the only worker and one waits in the only
			// queue slot; the next is refused.
			held := make(chan *http.Response, 2)
			for range 2 {
				go func() {
					resp, err := http.Post(base+"/Web.Hold", "application/json", bytes.NewReader([]byte("{}")))
					if err == nil {
						resp.Body.Close()
					}
					held <- resp
				}()
			}
			<-w.started
			deadline := time.Now().Add(10 * time.Second)
			for srv.Scheduler().Stats().Queued[kiev.DefaultPriority] == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond) // the second call reaches the queue on its own goroutine
			}
			httpCase{name: "overloaded", method: "POST", path: "/Web.Hello", body: `{}`, status: 503, code: "Overloaded"}.check(t, http.DefaultClient, base)
			resp, err := http.Post(base+"/Web.Hello", "application/json", strings.NewReader("{}"))
			if err == nil {
				if ra := resp.Header.Get("Retry-After"); resp.StatusCode != 503 || ra == "" {
					t.Errorf("overloaded answer: %d, Retry-After %q", resp.StatusCode, ra)
				}
				resp.Body.Close()
			}
			w.block <- struct{}{}
			<-w.started
			w.block <- struct{}{}
			<-held
			<-held
		})
	}
}

// BenchmarkFront calls Web.Hello in parallel over native kiev TCP, over
// HTTP to HTTPHandler directly, and through nginx over FastCGI, in one
// run.
func BenchmarkFront(b *testing.B) {
	w := &Web{}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err := srv.Register(w); err != nil {
		b.Fatal(err)
	}
	c := dial(b, startServer(b, srv))
	hs := httptest.NewServer(srv.HTTPHandler())
	defer hs.Close()
	l := listen(b)
	go srv.ServeFastCGI(l)
	bases := map[string]string{"http-direct": hs.URL}
	var ng *nginxtest.Server
	if os.Getenv(nginxtest.EnvBinary) != "" {
		ng = nginxtest.Start(b, l.Addr().String())
		defer ng.Stop()
		bases["nginx-fastcgi"] = ng.URL()
	}
	args := WebArgs{Name: "ann", Count: 21}
	b.Run("kiev-tcp", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				var r WebReply
				if err := c.Call(context.Background(), "Web.Hello", args, &r); err != nil || r.Count != 42 {
					b.Error(err)
					return
				}
			}
		})
	})
	for _, name := range []string{"http-direct", "nginx-fastcgi"} {
		base, ok := bases[name]
		if !ok {
			continue
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(16)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
			defer client.CloseIdleConnections()
			body := []byte(`{"Name":"ann","Count":21}`)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Post(base+"/Web.Hello", "application/json", bytes.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}

func TestHTTPDefaultTimeout(t *testing.T) {
	srv, _ := newWebServer(t, kiev.WithHTTPTimeout(50*time.Millisecond))
	hs := httptest.NewServer(srv.HTTPHandler())
	defer hs.Close()
	httpCase{name: "default timeout", method: "POST", path: "/Web.Hold", body: `{}`, status: 504, code: "DeadlineExceeded"}.check(t, http.DefaultClient, hs.URL)
}

// TestHTTPUnauthenticatedIs401 calls through the HTTP front a server that
// checks tokens. A refused call was answered 500, as if the server had
// failed; now 401, and the token travels as Kiev-Meta-Authorization.
// The W3C Trace Context headers become metadata under their own names,
// so that a tracing interceptor continues the caller's trace; they win
// over Kiev-Meta-* headers of the same names.
func TestHTTPTraceContextHeadersBecomeMetadata(t *testing.T) {
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err := srv.Register(&Arith{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(srv.HTTPHandler())
	t.Cleanup(hs.Close)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	header := map[string]string{"traceparent": tp, "tracestate": "kiev=1", "Kiev-Meta-Traceparent": "other"}
	for key, want := range map[string]string{"traceparent": tp, "tracestate": "kiev=1"} {
		httpCase{name: key, method: "POST", path: "/Arith.Meta", body: `"` + key + `"`, header: header, status: 200, contains: `"` + want + `"`}.check(t, http.DefaultClient, hs.URL)
	}
}

func TestHTTPUnauthenticatedIs401(t *testing.T) {
	srv, _ := newWebServer(t, kiev.WithServerInterceptor(kiev.TokenAuth(func(ctx context.Context, token string) error {
		if token != "s3cret" {
			return errors.New("unknown token")
		}
		return nil
	})))
	hs := httptest.NewServer(srv.HTTPHandler())
	t.Cleanup(hs.Close)
	httpCase{name: "no token", method: "POST", path: "/Web.Hello", body: `{}`, status: 401, code: "Unauthenticated", contains: "unknown token"}.check(t, hs.Client(), hs.URL)
	httpCase{name: "token", method: "POST", path: "/Web.Hello", body: `{"Name":"ann"}`, header: map[string]string{"Kiev-Meta-Authorization": "s3cret"}, status: 200, contains: "hello, ann"}.check(t, hs.Client(), hs.URL)
}

type originKey struct{}

// Origin answers the origin value its context carries.
type Origin struct{}

func (Origin) Of(ctx context.Context, _ int, reply *string) error {
	*reply, _ = ctx.Value(originKey{}).(string)
	return nil
}

// TestHTTPBaseContext checks where the values of an HTTP call's context
// come from: over FastCGI, from WithBaseContext's context for the
// listener, as over TCP; through HTTPHandler, from the request's, which
// carries the http.Server's BaseContext.
func TestHTTPBaseContext(t *testing.T) {
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)), kiev.WithBaseContext(func(l net.Listener) context.Context {
		return context.WithValue(context.Background(), originKey{}, "WithBaseContext")
	}))
	srv.Register(Origin{})
	hs := httptest.NewUnstartedServer(srv.HTTPHandler())
	hs.Config.BaseContext = func(net.Listener) context.Context {
		return context.WithValue(context.Background(), originKey{}, "http.Server")
	}
	hs.Start()
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	check := func(base, want string) {
		t.Helper()
		resp, err := http.Post(base+"/Origin.Of", "application/json", strings.NewReader("0"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := strings.TrimSpace(string(b)); got != `"`+want+`"` {
			t.Errorf("POST %s/Origin.Of = %s; want the value of %s", base, got, want)
		}
	}
	check(hs.URL, "http.Server")

	l := listen(t)
	t.Cleanup(func() { l.Close() })
	ng := nginxtest.Start(t, l.Addr().String())
	done := make(chan error, 1)
	go func() { done <- srv.ServeFastCGI(l) }()
	t.Cleanup(func() {
		ng.Stop()
		srv.Close()
		<-done
	})
	check(ng.URL(), "WithBaseContext")
}

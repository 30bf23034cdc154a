package kiev_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kievrpc/kiev"
)

// A front is one of the ways calls reach a Server. Every front hands its
// calls to the same plumbing, so the server's limits, its interceptors
// and its metrics must treat them alike; these tests run one scenario
// over each.
type front struct {
	name string
	// serve serves srv through the front until the test ends, and returns
	// a frontCaller of one connection (socket) to it.
	serve func(t *testing.T, srv *kiev.Server) frontCaller
}

// frontCaller makes a call with the token, if not empty, as the
// AuthorizationKey metadata, and returns the code it was answered with,
// as Code.String names it ("OK" for a reply).
type frontCaller func(ctx context.Context, method string, args, reply any, token string) string

var fronts3 = []front{
	{"tcp", func(t *testing.T, srv *kiev.Server) frontCaller {
		return clientCaller(dial(t, startServer(t, srv), kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1})))
	}},
	{"udp", func(t *testing.T, srv *kiev.Server) frontCaller {
		return clientCaller(dial(t, servePacket(t, srv, nil), kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1})))
	}},
	{"http", func(t *testing.T, srv *kiev.Server) frontCaller {
		// HTTP/2, so that concurrent calls share one connection, as
		// they do over TCP (an HTTP/1.1 connection carries one at a
		// time).
		hs := httptest.NewUnstartedServer(srv.HTTPHandler())
		hs.EnableHTTP2 = true
		hs.StartTLS()
		t.Cleanup(func() {
			hs.Close()
			srv.Close()
		})
		hc := hs.Client()
		return func(ctx context.Context, method string, args, reply any, token string) string {
			body, _ := json.Marshal(args)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/"+method, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if token != "" {
				req.Header.Set(kiev.HeaderMetaPrefix+kiev.AuthorizationKey, token)
			}
			resp, err := hc.Do(req)
			if err != nil {
				return "transport error: " + err.Error()
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.ProtoMajor != 2 {
				return "not HTTP/2: " + resp.Proto
			}
			if resp.StatusCode != http.StatusOK {
				return resp.Header.Get(kiev.HeaderCode)
			}
			if err := json.Unmarshal(b, reply); err != nil {
				return "bad reply: " + err.Error()
			}
			return kiev.CodeOK.String()
		}
	}},
}

func clientCaller(c *kiev.Client) frontCaller {
	return func(ctx context.Context, method string, args, reply any, token string) string {
		if token != "" {
			ctx = kiev.WithMetadata(ctx, kiev.AuthorizationKey, token)
		}
		err := c.Call(ctx, method, args, reply)
		var se *kiev.ServerError
		switch {
		case err == nil:
			return kiev.CodeOK.String()
		case errors.As(err, &se):
			return se.Code.String()
		}
		return "error: " + err.Error()
	}
}

// TestEveryFrontAlike runs one scenario over TCP, UDP and HTTP: a call
// without the token TokenAuth wants is refused before it runs; two calls
// of one connection run, and a third is refused at
// WithMaxConcurrentCalls(2); once they end, a call runs again; and the
// server's metrics count the same calls with the same codes.
func TestEveryFrontAlike(t *testing.T) {
	for _, fr := range fronts3 {
		t.Run(fr.name, func(t *testing.T) {
			svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 2)}
			reg := prometheus.NewRegistry()
			srv := kiev.NewServer(
				kiev.WithLogger(slog.New(slog.DiscardHandler)),
				kiev.WithMetrics(reg),
				kiev.WithMaxConcurrentCalls(2),
				kiev.WithoutPacketKeysForTokenAuth(), // the udp front: loopback
				kiev.WithServerInterceptor(kiev.TokenAuth(func(ctx context.Context, token string) error {
					if token != "s3cret" {
						return errors.New("unknown token")
					}
					return nil
				})),
			)
			srv.Register(svc)
			call := fr.serve(t, srv)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			var r Reply
			if got := call(ctx, "Arith.Block", Args{A: 1}, &r, ""); got != "Unauthenticated" {
				t.Fatalf("a call without the token was answered %s; want Unauthenticated", got)
			}
			if got := call(ctx, "Arith.Block", Args{A: 1}, &r, "guess"); got != "Unauthenticated" {
				t.Fatalf("a call with a wrong token was answered %s; want Unauthenticated", got)
			}

			done := make(chan string, 2)
			for range 2 {
				go func() { done <- call(ctx, "Arith.Block", Args{A: 7}, new(Reply), "s3cret") }()
			}
			for range 2 {
				select {
				case <-svc.started:
				case got := <-done:
					t.Fatalf("a call within the limit was answered %s before it ran", got)
				case <-ctx.Done():
					t.Fatal("the two calls within the limit did not start")
				}
			}
			if got := call(ctx, "Arith.Add", Args{A: 1, B: 1}, &r, "s3cret"); got != "Overloaded" {
				t.Fatalf("a third call in flight on the connection was answered %s; want Overloaded (WithMaxConcurrentCalls(2))", got)
			}
			close(svc.block)
			for range 2 {
				if got := <-done; got != "OK" {
					t.Fatalf("a call within the limit was answered %s", got)
				}
			}
			if got := call(ctx, "Arith.Add", Args{A: 1, B: 2}, &r, "s3cret"); got != "OK" || r.C != 3 {
				t.Fatalf("a call once the others ended: %s, %d; want OK, 3", got, r.C)
			}

			want := []string{
				`kiev_server_calls_total{code="OK",method="Arith.Add"} 1`,
				`kiev_server_calls_total{code="OK",method="Arith.Block"} 2`,
				`kiev_server_calls_total{code="Overloaded",method="Arith.Add"} 1`,
				`kiev_server_calls_total{code="Unauthenticated",method="Arith.Block"} 2`,
			}
			if got := callsTotal(t, reg); !slices.Equal(got, want) {
				t.Errorf("kiev_server_calls_total over %s:\n%s\nwant:\n%s", fr.name, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// callsTotal returns the series of kiev_server_calls_total in reg, sorted.
func callsTotal(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "kiev_server_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out = append(out, fmt.Sprintf(`kiev_server_calls_total{code=%q,method=%q} %g`, labels["code"], labels["method"], m.GetCounter().GetValue()))
		}
	}
	slices.Sort(out)
	return out
}

// TestLimitCountsUnansweredCalls: at WithMaxConcurrentCalls(1), a caller
// that sends each call once the last is answered is never refused, over
// any front, though the server may not yet have forgotten the last call
// (its handler's goroutine finishes after the answer leaves).
func TestLimitCountsUnansweredCalls(t *testing.T) {
	for _, fr := range fronts3 {
		t.Run(fr.name, func(t *testing.T) {
			srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)), kiev.WithMaxConcurrentCalls(1))
			srv.Register(&Arith{})
			call := fr.serve(t, srv)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for i := range 300 {
				var r Reply
				if got := call(ctx, "Arith.Add", Args{A: i, B: 1}, &r, ""); got != "OK" || r.C != i+1 {
					t.Fatalf("call %d, one at a time: %s, %d; want OK, %d", i, got, r.C, i+1)
				}
			}
		})
	}
}

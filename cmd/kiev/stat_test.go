package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
)

// statusJSON is a status page as a server serves it.
const statusJSON = `{
  "time": "2026-01-02T03:04:05Z",
  "uptime_sec": 3723.5,
  "connections": 4,
  "in_flight": 2,
  "services": [
    {"name": "Shop", "methods": [
      {"name": "Place", "calls": 1200, "errors": 3, "minute_calls": 600, "minute_errors": 1, "window_sec": 60, "rate": 10, "error_rate": 0.02, "p50_ms": 0.25, "p99_ms": 12.5},
      {"name": "Wait", "calls": 7, "errors": 0, "minute_calls": 0, "minute_errors": 0, "window_sec": 60, "rate": 0, "error_rate": 0, "p50_ms": 0, "p99_ms": 0},
      {"name": "Feed", "calls": 4, "errors": 0, "minute_calls": 0, "minute_errors": 0, "window_sec": 60, "rate": 0, "error_rate": 0, "p50_ms": 0, "p99_ms": 0,
       "streams": {"kind": "server stream", "open": 2, "opened": 6, "messages_in": 0, "messages_out": 900, "bytes_in": 0, "bytes_out": 90000,
         "message_in_rate": 0, "message_out_rate": 15, "byte_in_rate": 0, "byte_out_rate": 1500, "window_sec": 60}}
    ]}
  ],
  "scheduler": {"workers": 8, "running": 2, "queued": [0,0,0,0,0,1,0,0,0,0], "overloaded": true, "ran": 123456,
    "dropped": {"queue_full": 5, "expired": 0}},
  "clients": [
    {"target": "zookeeper://zk:2181/Arith", "balancer": "round_robin", "calls": 50, "errors": 1, "retries": 2, "retry_budget": 9.5,
     "connection_ended_calls": {"unsent": 11, "failed": 1},
     "streams": {"open": 1, "opened": 3, "leaked": 2, "messages_in": 10, "messages_out": 0, "bytes_in": 100, "bytes_out": 0},
     "providers": [
       {"id": "tcp://10.0.0.7:7000", "address": "10.0.0.7:7000", "weight": 2, "in_flight": 1, "calls": 30, "errors": 0, "ejected": false},
       {"id": "tcp://10.0.0.8:7000", "address": "10.0.0.8:7000", "weight": 1, "in_flight": 0, "calls": 20, "errors": 1, "ejected": true, "ejected_until": "2026-01-02T03:04:35Z"}
     ]}
  ],
  "health": [
    {"name": "mysql", "ok": true, "took_ms": 1.5},
    {"name": "redis", "ok": false, "error": "dial tcp: connection refused", "took_ms": 0.1}
  ],
  "some_future_field": {"ignored": true}
}`

// adminServer serves statusJSON at /debug/kiev?format=json and counts
// the requests.
func adminServer(t *testing.T) (addr string, requests func() int) {
	t.Helper()
	var mu sync.Mutex
	n := 0
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/kiev" || r.URL.Query().Get("format") != "json" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		n++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(statusJSON))
	}))
	t.Cleanup(ts.Close)
	return strings.TrimPrefix(ts.URL, "http://"), func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

func TestStatOnce(t *testing.T) {
	addr, requests := adminServer(t)
	stdout, stderr := wantRun(t, exitOK, []string{
		"up 1h2m3s   connections 4   in flight 2",
		"Shop.Place  1200   3       10      0.02      60      0.25    12.5\n",
		"Shop.Wait",
		"scheduler: workers 8   running 2   queued by priority [0 0 0 0 0 1 0 0 0 0]   ran 123456   OVERLOADED",
		"dropped: queue_full 5\n",
		"zookeeper://zk:2181/Arith",
		"retries 2, budget 9.5, streams 1 open of 3, 2 leaked, at connection ends 11 unsent, 1 failed\n",
		"STREAM     KIND           OPEN  OPENED  MSGS IN  MSGS OUT  IN/S  OUT/S  BYTES IN/S  BYTES OUT/S\nShop.Feed  server stream  2     6       0        900       0     15     0           1500\n",
		"tcp://10.0.0.7:7000  2       1          30     0       ok",
		"tcp://10.0.0.8:7000  1       0          20     1       ejected until",
		"health:  mysql ok (1.5 ms)  redis FAILING: dial tcp: connection refused",
	}, nil, "stat", "--once", addr)
	if stderr != "" || strings.Contains(stdout, "\x1b[") {
		t.Errorf("stat --once to a pipe wrote stderr %q, or ANSI codes:\n%q", stderr, stdout)
	}
	if requests() != 1 {
		t.Errorf("stat --once made %d requests; want 1", requests())
	}
	// A URL works as well as an address.
	wantRun(t, exitOK, []string{"Shop.Place"}, nil, "stat", "--once", "http://"+addr+"/debug/kiev")
}

func TestStatErrors(t *testing.T) {
	addr, _ := adminServer(t)
	wantRun(t, exitFailed, nil, []string{"kiev stat: GET http://" + addr + "/elsewhere?format=json: 404 Not Found; is this the admin address of a kiev server?"},
		"stat", "--once", "http://"+addr+"/elsewhere")
	wantRun(t, exitFailed, nil, []string{"kiev stat: cannot read the status page", "is the address right?"},
		"stat", "--once", "127.0.0.1:1")
	notJSON := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("<html>")) }))
	defer notJSON.Close()
	wantRun(t, exitFailed, nil, []string{"did not answer with the status JSON"}, "stat", "--once", notJSON.URL)
}

// Without --once, stat refreshes the view every interval until
// interrupted; to a pipe, views follow one another.
func TestStatRefreshes(t *testing.T) {
	addr, requests := adminServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- (&statCmd{interval: 10 * time.Millisecond}).run(ctx, &cli{stdout: &out, stderr: &errOut}, []string{addr})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for requests() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("stat ended with %v; want nil when interrupted", err)
	}
	if n := strings.Count(out.String(), "kiev status at"); n < 2 || requests() < 3 {
		t.Errorf("stat printed %d views from %d requests; want 2 or more from 3 or more", n, requests())
	}
}

func TestStatusURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7001":                   "http://127.0.0.1:7001/debug/kiev?format=json",
		"http://h:1":                       "http://h:1/debug/kiev?format=json",
		"https://h:1/admin/kiev?x=1":       "https://h:1/admin/kiev?format=json&x=1",
		"http://h:1/debug/kiev?format=txt": "http://h:1/debug/kiev?format=json",
	} {
		if got, err := statusURL(in); err != nil || got != want {
			t.Errorf("statusURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestStatOnEitherAddress reads a live server's status at its RPC
// address, which once failed with "cannot read the status page: EOF",
// and at its admin address.
func TestStatOnEitherAddress(t *testing.T) {
	srv, addr := serveShop(t, kiev.WithAdmin("127.0.0.1:0"))
	wantRun(t, exitOK, []string{`"order_id": 7`}, nil, "call", addr, "Shop.Place", `{"id": 7}`)
	for deadline := time.Now().Add(5 * time.Second); srv.AdminAddr() == "" && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // Serve starts the admin listener on its goroutine
	}
	if srv.AdminAddr() == "" {
		t.Fatal("no admin address after Serve")
	}
	for _, at := range []string{addr, "tcp://" + addr, srv.AdminAddr()} {
		stdout, _ := wantRun(t, exitOK, []string{"admin http://" + srv.AdminAddr(), "\nShop.Place  1      0       "}, nil, "stat", "--once", at)
		if strings.Contains(stdout, "kiev.") {
			t.Errorf("stat at %s shows kiev's own services:\n%s", at, stdout)
		}
	}

	// A server whose admin pages need credentials does not show its
	// status on its RPC address.
	_, guarded := serveShop(t, kiev.WithAdminAuth(func(*http.Request) error { return errors.New("no") }))
	wantRun(t, exitFailed, nil, []string{"kiev stat: " + guarded + ": the status is guarded by WithAdminAuth; read it at the admin address, with credentials"},
		"stat", "--once", guarded)
}

package kiev_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
)

// Drip is a service whose server streams the HTTP tests drive.
type Drip struct {
	next    chan struct{} // Tick sends a message for each
	ended   chan error    // Tick's end: its ctx's error, or its Send's
	flooded chan int      // Flood's count of messages queued
}

// Tick sends an event each time the test asks, until its ctx ends.
func (tk *Drip) Tick(ctx context.Context, _ Query, out kiev.Out[Event]) error {
	for i := 0; ; i++ {
		select {
		case <-tk.next:
		case <-ctx.Done():
			tk.ended <- ctx.Err()
			return ctx.Err()
		}
		if err := out.Send(ctx, Event{N: i}); err != nil {
			tk.ended <- err
			return err
		}
	}
}

// Flood sends q.From events of q.To bytes, giving up on a Send that
// waits a second, and says how many it sent.
func (tk *Drip) Flood(ctx context.Context, q Query, out kiev.Out[Event]) error {
	ev := Event{Text: strings.Repeat("x", q.To)}
	for i := range q.From {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		err := out.Send(sctx, ev)
		cancel()
		if err != nil {
			tk.flooded <- i
			return err
		}
	}
	tk.flooded <- q.From
	return nil
}

func newStreamWeb(t *testing.T, opts ...kiev.ServerOption) (*kiev.Server, *Drip, string) {
	t.Helper()
	srv := kiev.NewServer(append([]kiev.ServerOption{kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)...)
	tk := &Drip{next: make(chan struct{}), ended: make(chan error, 1), flooded: make(chan int, 1)}
	for _, rcvr := range []any{&Feed{}, tk} {
		if err := srv.Register(rcvr); err != nil {
			t.Fatal(err)
		}
	}
	hs := httptest.NewServer(srv.HTTPHandler())
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	return srv, tk, hs.URL
}

// openStream requests method's stream with args, as accept.
func openStream(t *testing.T, ctx context.Context, base, method, args, accept string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/"+method, strings.NewReader(args))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestHTTPServerStreamAsNDJSON(t *testing.T) {
	_, _, base := newStreamWeb(t)
	resp := openStream(t, t.Context(), base, "Feed.Watch", `{"From": 1, "To": 4}`, "application/x-ndjson")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("status %d, Content-Type %q; want 200 and application/x-ndjson", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"N":1,"Text":"x"}` + "\n" + `{"N":2,"Text":"xx"}` + "\n" + `{"N":3,"Text":"xxx"}` + "\n"
	if string(body) != want {
		t.Errorf("body:\n%s\nwant:\n%s", body, want)
	}
	if code := resp.Trailer.Get(kiev.HeaderCode); code != "" {
		t.Errorf("a stream that ended well has trailer %s: %q", kiev.HeaderCode, code)
	}
}

func TestHTTPServerStreamErrorIsTheLastNDJSONLine(t *testing.T) {
	_, _, base := newStreamWeb(t)
	resp := openStream(t, t.Context(), base, "Feed.Fail", `{"From": 2}`, "application/x-ndjson")
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"N":0,"Text":""}` + "\n" + `{"N":1,"Text":""}` + "\n" + `{"error":"failed after 2","code":"123"}` + "\n"
	if resp.StatusCode != 200 || string(body) != want {
		t.Errorf("status %d, body:\n%s\nwant 200 and:\n%s", resp.StatusCode, body, want)
	}
	if code := resp.Trailer.Get(kiev.HeaderCode); code != "123" {
		t.Errorf("trailer %s is %q; want 123", kiev.HeaderCode, code)
	}
}

// sseEvent is one Server-Sent Event.
type sseEvent struct{ event, data string }

// readEvents reads the events of an SSE body until it ends.
func readEvents(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var evs []sseEvent
	var ev sseEvent
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev != (sseEvent{}) {
				evs = append(evs, ev)
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, ":"): // a comment
		case strings.HasPrefix(line, "event: "):
			ev.event = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			ev.data += line[len("data: "):]
		default:
			t.Errorf("unexpected SSE line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return evs
}

func TestHTTPServerStreamAsServerSentEvents(t *testing.T) {
	_, _, base := newStreamWeb(t)
	for _, tc := range []struct {
		name, method, args string
		want               []sseEvent
	}{
		{"ends", "Feed.Watch", `{"From": 1, "To": 3}`, []sseEvent{
			{"", `{"N":1,"Text":"x"}`}, {"", `{"N":2,"Text":"xx"}`}, {"end", `{"code":"OK"}`}}},
		{"fails", "Feed.Fail", `{"From": 1}`, []sseEvent{
			{"", `{"N":0,"Text":""}`}, {"error", `{"error":"failed after 1","code":"123"}`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := openStream(t, t.Context(), base, tc.method, tc.args, "text/event-stream")
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("Cache-Control") != "no-cache" {
				t.Fatalf("status %d, header %v; want 200, text/event-stream, no-cache", resp.StatusCode, resp.Header)
			}
			got := readEvents(t, resp.Body)
			if len(got) != len(tc.want) {
				t.Fatalf("events %q; want %q", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("event %d is %q; want %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestHTTPServerStreamMessagesArriveAsSent(t *testing.T) {
	_, tk, base := newStreamWeb(t)
	resp := openStream(t, t.Context(), base, "Drip.Tick", `{}`, "application/x-ndjson")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	lines := bufio.NewReader(resp.Body)
	for i := range 3 {
		tk.next <- struct{}{} // the handler sends message i only now
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		var ev Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.N != i {
			t.Fatalf("line %d is %q (%v); want event %d", i, line, err, i)
		}
	}
}

func TestHTTPClientThatLeavesCancelsTheStreamHandler(t *testing.T) {
	_, tk, base := newStreamWeb(t)
	ctx, cancel := context.WithCancel(t.Context())
	resp := openStream(t, ctx, base, "Drip.Tick", `{}`, "text/event-stream")
	tk.next <- struct{}{}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-tk.ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the handler ended with %v; want its ctx canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's ctx did not end 10s after its client left")
	}
}

func TestHTTPServerStreamIsPacedByItsReader(t *testing.T) {
	_, tk, base := newStreamWeb(t)
	const size, count = 64 << 10, 10000 // 640 MiB, were they all sent
	resp := openStream(t, t.Context(), base, "Drip.Flood", `{"From": 10000, "To": 65536}`, "application/x-ndjson")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// Not reading, the client holds the handler's Send once the
	// connection's buffers are full: a Send gives up after a second.
	sent := <-tk.flooded
	if sent == count || sent*size > 64<<20 {
		t.Errorf("the handler sent %d messages of %d bytes to a client that reads none; want what the connection holds", sent, size)
	}
	t.Logf("the handler sent %d messages (%d MiB) before its Send waited", sent, sent*size>>20)
}

func TestHTTPRefusesWhatItCannotStream(t *testing.T) {
	_, _, base := newStreamWeb(t)
	for _, tc := range []struct {
		name, method, path, accept string
		header                     map[string]string
		status                     int
		code, contains             string
	}{
		{"client stream", "POST", "/Feed.Upload", "application/x-ndjson", nil, 501, "NotImplemented", "call it with a kiev client"},
		{"bidirectional stream", "POST", "/Feed.Chat", "text/event-stream", nil, 501, "NotImplemented", "call it with a kiev client"},
		{"no stream format", "POST", "/Feed.Watch", "application/json", nil, 406, "NotAcceptable", "Accept: application/x-ndjson"},
		{"no Accept", "POST", "/Feed.Watch", "", nil, 406, "NotAcceptable", "text/event-stream"},
		{"PUT", "PUT", "/Feed.Watch", "text/event-stream", nil, 405, "MethodNotAllowed", "GET with the JSON args"},
		{"GET from another origin", "GET", "/Feed.Watch?args=%7B%7D", "text/event-stream", map[string]string{"Origin": "https://elsewhere.example"}, 403, "Forbidden", "another origin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, base+tc.path, strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			if tc.method != "GET" {
				req.Header.Set("Content-Type", "application/json")
			}
			if tc.accept != "" {
				req.Header.Set("Accept", tc.accept)
			}
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || resp.Header.Get(kiev.HeaderCode) != tc.code || !strings.Contains(string(body), tc.contains) {
				t.Errorf("got %d %s %s; want %d %s and a body with %q", resp.StatusCode, resp.Header.Get(kiev.HeaderCode), body, tc.status, tc.code, tc.contains)
			}
			if allow := resp.Header.Get("Allow"); tc.status == 405 && allow != "GET, POST" {
				t.Errorf("Allow: %q; want GET, POST", allow)
			}
		})
	}
}

func TestHTTPServerStreamByGETFromItsOwnOrigin(t *testing.T) {
	_, _, base := newStreamWeb(t)
	u := base + "/Feed/Watch?args=" + url.QueryEscape(`{"From": 5, "To": 6}`)
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Origin", base)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := readEvents(t, resp.Body)
	if len(got) != 2 || got[0].data != `{"N":5,"Text":"xxxxx"}` || got[1].event != "end" {
		t.Errorf("events %q; want one event, then the end", got)
	}
}

func TestHTTPStreamOpenRefusedIsAnsweredAsACall(t *testing.T) {
	_, tk, base := newStreamWeb(t, kiev.WithMaxServerStreams(1))
	held := openStream(t, t.Context(), base, "Drip.Tick", `{}`, "application/x-ndjson")
	if held.StatusCode != 200 {
		t.Fatalf("status %d", held.StatusCode)
	}
	resp := openStream(t, t.Context(), base, "Feed.Watch", `{"To": 1}`, "application/x-ndjson")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || resp.Header.Get(kiev.HeaderCode) != "Overloaded" || !strings.Contains(string(body), "WithMaxServerStreams") {
		t.Errorf("got %d %s %s; want 503 Overloaded", resp.StatusCode, resp.Header.Get(kiev.HeaderCode), body)
	}
	held.Body.Close()
	<-tk.ended
}

func TestHTTPServerStreamArgsThatDoNotDecodeEndIt(t *testing.T) {
	_, _, base := newStreamWeb(t)
	resp := openStream(t, t.Context(), base, "Feed.Watch", `{"From": "one"}`, "text/event-stream")
	got := readEvents(t, resp.Body)
	if resp.StatusCode != 200 || len(got) != 1 || got[0].event != "error" || !strings.Contains(got[0].data, `"code":"BadRequest"`) || !strings.Contains(got[0].data, `field \"From\"`) {
		t.Errorf("status %d, events %q; want 200 and one error event, BadRequest, naming the field", resp.StatusCode, got)
	}
}

func TestHTTPServerStreamTimeout(t *testing.T) {
	_, _, base := newStreamWeb(t)
	req, _ := http.NewRequest("POST", base+"/Drip.Tick", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(kiev.HeaderTimeout, "50ms")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := readEvents(t, resp.Body)
	if len(got) != 1 || got[0].event != "error" || !strings.Contains(got[0].data, `"code":"DeadlineExceeded"`) {
		t.Errorf("events %q; want one error event, DeadlineExceeded", got)
	}
}

// streamPage opens Feed.Watch and then Feed.Fail with EventSource, as
// the docs say to: closing each on its end or error event, which the
// browser would otherwise take for a dropped connection to reopen. It
// writes what it saw into the page.
const streamPage = `<!doctype html><title>streams</title><pre id="log"></pre><script>
const log = document.getElementById("log");
const add = s => { log.textContent += s + "\n"; };
const open = (method, args, then) => {
  const es = new EventSource("/" + method + "?args=" + encodeURIComponent(JSON.stringify(args)));
  es.onmessage = e => add(method + " message " + e.data);
  es.addEventListener("end", e => { add(method + " end " + e.data); es.close(); then(); });
  es.addEventListener("error", e => {
    add(method + (e.data === undefined ? " connection error" : " error " + e.data));
    es.close();
    then();
  });
};
open("Feed.Watch", {From: 1, To: 4}, () => open("Feed.Fail", {From: 1}, () => add("done")));
</script>`

// TestHTTPServerStreamInBrowser reads server streams with EventSource
// in headless Chromium.
func TestHTTPServerStreamInBrowser(t *testing.T) {
	chromium := os.Getenv("KIEV_CHROMIUM")
	if chromium == "" {
		t.Skip("KIEV_CHROMIUM is not set; run scripts/services.sh up and eval \"$(scripts/services.sh env)\" to test EventSource in headless Chromium")
	}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err := srv.Register(&Feed{}); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var streams atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, streamPage)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/Feed.") {
			streams.Add(1)
		}
		srv.HTTPHandler().ServeHTTP(w, r)
	})
	hs := httptest.NewServer(mux)
	defer hs.Close()
	dom := dumpDOM(t, chromium, hs.URL+"/page", "--virtual-time-budget=10000")
	want := `Feed.Watch message {"N":1,"Text":"x"}
Feed.Watch message {"N":2,"Text":"xx"}
Feed.Watch message {"N":3,"Text":"xxx"}
Feed.Watch end {"code":"OK"}
Feed.Fail message {"N":0,"Text":""}
Feed.Fail error {"error":"failed after 1","code":"123"}
done
`
	if !strings.Contains(dom, `<pre id="log">`+want+`</pre>`) {
		t.Errorf("the page shows:\n%s\nwant its log to be:\n%s", dom, want)
	}
	if n := streams.Load(); n != 2 {
		t.Errorf("the page opened %d streams; want 2 (none reopened)", n)
	}
}

// TestHTTPServerStreamBehindNginx reads a stream through nginx over
// FastCGI: each message comes as it is sent, nginx buffering none.
func TestHTTPServerStreamBehindNginx(t *testing.T) {
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	tk := &Drip{next: make(chan struct{}), ended: make(chan error, 1)}
	for _, rcvr := range []any{&Feed{}, tk} {
		if err := srv.Register(rcvr); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { srv.Close() }) // if nginx is missing, fronts skips before it closes srv
	base := fronts(t, srv)["nginx"]
	// An event stream opens at once: its header comes before any event.
	resp := openStream(t, t.Context(), base, "Drip.Tick", `{}`, "text/event-stream")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	lines := bufio.NewReader(resp.Body)
	for i := range 3 {
		tk.next <- struct{}{}
		var line string
		for !strings.HasPrefix(line, "data: ") {
			var err error
			if line, err = lines.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
		}
		if want := `data: {"N":` + string(rune('0'+i)) + `,"Text":""}` + "\n"; line != want {
			t.Fatalf("line %d is %q; want %q", i, line, want)
		}
	}
	// net/http/fcgi does not tell a handler that its client left: a
	// Send that finds the connection closed ends it.
	resp.Body.Close()
	timeout := time.After(10 * time.Second)
	for ended := false; !ended; {
		select {
		case tk.next <- struct{}{}:
		case <-tk.ended:
			ended = true
		case <-timeout:
			t.Fatal("the handler did not end 10s after its client left, sending all along")
		}
	}

	resp = openStream(t, t.Context(), base, "Feed.Fail", `{"From": 1}`, "application/x-ndjson")
	body, err := io.ReadAll(resp.Body)
	if want := `{"N":0,"Text":""}` + "\n" + `{"error":"failed after 1","code":"123"}` + "\n"; err != nil || string(body) != want {
		t.Errorf("body %q (%v); want one message, then the error", body, err)
	}
}

// An open stream is not a call in flight for WithMaxConcurrentCalls,
// which bounds the calls of each HTTP connection (one HTTP/2 connection
// here, carrying both).
func TestHTTPOpenStreamIsNotACallInFlight(t *testing.T) {
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), kiev.WithMaxConcurrentCalls(1))
	tk := &Drip{next: make(chan struct{}), ended: make(chan error, 1)}
	for _, rcvr := range []any{&Arith{}, tk} {
		if err := srv.Register(rcvr); err != nil {
			t.Fatal(err)
		}
	}
	hs := httptest.NewUnstartedServer(srv.HTTPHandler())
	hs.EnableHTTP2 = true
	hs.StartTLS()
	defer func() {
		hs.Close()
		srv.Close()
	}()
	client := hs.Client()
	defer client.CloseIdleConnections()
	post := func(ctx context.Context, method, body, accept string) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL+"/"+method, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", accept)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	ctx, cancel := context.WithCancel(t.Context())
	stream := post(ctx, "Drip.Tick", `{}`, "text/event-stream")
	defer stream.Body.Close()
	if stream.StatusCode != 200 || stream.ProtoMajor != 2 {
		t.Fatalf("the stream: status %d over HTTP/%d; want 200 over HTTP/2", stream.StatusCode, stream.ProtoMajor)
	}
	resp := post(t.Context(), "Arith.Add", `{"A": 1, "B": 2}`, "application/json")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"C":3`) {
		t.Errorf("a call beside an open stream, at most one call in flight: %d %s; want 200", resp.StatusCode, body)
	}
	cancel()
	<-tk.ended
}

func TestHTTPQuietEventStreamGetsKeepalives(t *testing.T) {
	_, tk, base := newStreamWeb(t, kiev.WithSSEKeepalive(20*time.Millisecond))
	resp := openStream(t, t.Context(), base, "Drip.Tick", `{}`, "text/event-stream")
	r := bufio.NewReader(resp.Body)
	// The handler sends nothing: the stream opens, then comes a ping, a
	// comment EventSource skips.
	pings := 0
	for pings < 2 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == ": ping\n" {
			pings++
		}
	}
	// A message still comes through as an event.
	tk.next <- struct{}{}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			var ev Event
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil || ev.N != 0 {
				t.Fatalf("event %q (%v); want event 0", line, err)
			}
			return
		}
	}
}

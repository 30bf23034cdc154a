package kiev_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/admin"
)

// pollStreams polls cond, which reads the server's or client's own counters,
// until it holds or 5 seconds pass: a stream's handler counts its end a
// moment after the client has seen it.
func pollStreams(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s, still not %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling the counters
	}
}

// streamStatus returns a method's stream status and the client's of
// target, as the status JSON has them.
func streamStatus(t *testing.T, url, method, target string) (*admin.StreamStatus, *admin.ClientStreamStatus) {
	t.Helper()
	var st admin.Status
	if err := json.Unmarshal([]byte(get(t, url+"/debug/kiev?format=json")), &st); err != nil {
		t.Fatal(err)
	}
	var ms *admin.StreamStatus
	for _, svc := range st.Services {
		for _, m := range svc.Methods {
			if svc.Name+"."+m.Name == method {
				ms = m.Streams
			}
		}
	}
	for _, c := range st.Clients {
		if c.Target == target {
			return ms, c.Streams
		}
	}
	return ms, nil
}

// TestStreamMetricsAndStatus runs one stream of each kind, with one left
// open, and finds their streams, messages and bytes in the metrics, the
// status JSON and the status page.
func TestStreamMetricsAndStatus(t *testing.T) {
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err := srv.Register(&Feed{}); err != nil {
		t.Fatal(err)
	}
	srv.Register(&Arith{})
	addr := startServer(t, srv)
	c := dial(t, addr)
	hs := httptest.NewServer(srv.AdminHandler())
	defer hs.Close()
	ctx := context.Background()
	if err := c.Call(ctx, "Arith.Add", Args{1, 2}, &Reply{}); err != nil {
		t.Fatal(err)
	}

	w, err := c.Stream(ctx, "Feed.Watch", Query{From: 0, To: 10})
	if err != nil {
		t.Fatal(err)
	}
	for {
		var e Event
		if err := w.Recv(ctx, &e); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	up, err := c.Stream(ctx, "Feed.Upload", nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := up.Send(ctx, Chunk{Data: []byte("abcd")}); err != nil {
			t.Fatal(err)
		}
	}
	up.CloseSend()
	var sum Sum
	if err := up.Recv(ctx, &sum); err != nil || sum.Chunks != 3 {
		t.Fatalf("Upload: %+v, %v", sum, err)
	}
	up.Close()
	chat, err := c.Stream(ctx, "Feed.Chat", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer chat.Close()
	if err := chat.Send(ctx, Event{N: 1, Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	var e Event
	if err := chat.Recv(ctx, &e); err != nil {
		t.Fatal(err)
	}
	pollStreams(t, "Watch and Upload ended on the server", func() bool {
		w, _ := streamStatus(t, hs.URL, "Feed.Watch", addr)
		u, _ := streamStatus(t, hs.URL, "Feed.Upload", addr)
		return w != nil && w.Open == 0 && u != nil && u.Open == 0
	})

	body := get(t, hs.URL+"/metrics")
	for _, want := range []string{
		`kiev_server_streams_open{method="Feed.Chat"} 1`,
		`kiev_server_streams_open{method="Feed.Watch"} 0`,
		`kiev_server_streams_opened_total{method="Feed.Watch"} 1`,
		`kiev_server_stream_messages_total{direction="sent",method="Feed.Watch"} 10`,
		`kiev_server_stream_messages_total{direction="received",method="Feed.Upload"} 3`,
		`kiev_server_stream_messages_total{direction="received",method="Feed.Chat"} 1`,
		`kiev_server_stream_messages_total{direction="sent",method="Feed.Chat"} 1`,
		`kiev_client_streams_open{target="` + addr + `"} 1`,
		`kiev_client_streams_opened_total{target="` + addr + `"} 3`,
		`kiev_client_stream_messages_total{direction="received",target="` + addr + `"} 11`, // 10 events, 1 echo; a reply is not a stream message
		`kiev_client_stream_messages_total{direction="sent",target="` + addr + `"} 4`,
		`kiev_client_streams_leaked_total{target="` + addr + `"} 0`,
		`kiev_server_calls_total{code="OK",method="Arith.Add"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, `kiev_server_streams_open{method="Arith.Add"}`) {
		t.Errorf("a unary method has stream series")
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

	ws, cs := streamStatus(t, hs.URL, "Feed.Watch", addr)
	if ws == nil || ws.Kind != "server stream" || ws.Opened != 1 || ws.MsgsOut != 10 || ws.MsgsIn != 0 || ws.BytesOut <= 0 || ws.MsgOutRate <= 0 || ws.ByteOutRate <= 0 || ws.WindowSec < 1 {
		t.Errorf("Feed.Watch's streams: %+v; want 1 opened, 10 messages out, at a rate", ws)
	} else if n := ws.MsgOutRate * ws.WindowSec; n < 9.99 || n > 10.01 {
		// The history's first reading, as the server started serving,
		// counted none: the rate is the 10 messages over the time since.
		t.Errorf("Feed.Watch sent %v messages/s over %v s; want its 10 messages over that time", ws.MsgOutRate, ws.WindowSec)
	}
	if ch, _ := streamStatus(t, hs.URL, "Feed.Chat", addr); ch == nil || ch.Kind != "bidirectional stream" || ch.Open != 1 || ch.MsgsIn != 1 || ch.MsgsOut != 1 {
		t.Errorf("Feed.Chat's streams: %+v; want 1 open, 1 message each way", ch)
	}
	if cs == nil || cs.Open != 1 || cs.Opened != 3 || cs.MsgsIn != 11 || cs.MsgsOut != 4 || cs.Leaked != 0 {
		t.Errorf("the client's streams: %+v; want 1 open of 3, 11 messages in, 4 out", cs)
	}
	page := get(t, hs.URL+"/debug/kiev")
	for _, want := range []string{
		`<tr data-stream="Feed.Chat"><td>Feed.Chat</td><td class="kind">bidirectional stream</td><td class="open">1</td>`,
		`<tr data-stream="Feed.Watch"><td>Feed.Watch</td><td class="kind">server stream</td><td class="open">0</td><td class="opened">1</td><td class="messages-in">0</td><td class="messages-out">10</td>`,
		`<span class="streams">streams open 1, opened 3, messages in 11, out 4; <span class="leaked">0 leaked</span>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the status page lacks %s", want)
		}
	}
}

// A stream dropped without Close is canceled once the garbage collector
// finds it: its handler ends, and the client counts it as leaked, in its
// metrics and on the status page.
func TestLeakedStreamIsCountedAndEnded(t *testing.T) {
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	f := &Feed{opened: make(chan struct{}, 1)}
	if err := srv.Register(f); err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, srv)
	ends := make(chan error, 1)
	c := dial(t, addr, kiev.WithStreamInterceptor(func(next kiev.StreamOpener) kiev.StreamOpener {
		return func(ctx context.Context, desc *kiev.StreamDesc) (*kiev.Stream, error) {
			desc.OnEnd(func(err error) { ends <- err })
			return next(ctx, desc)
		}
	}))
	hs := httptest.NewServer(srv.AdminHandler())
	defer hs.Close()
	func() {
		// Far more than a window: the handler blocks on credit until
		// the stream is canceled.
		if _, err := c.Stream(context.Background(), "Feed.Watch", Query{From: 0, To: 1 << 30}); err != nil {
			t.Fatal(err)
		}
	}()
	<-f.opened
	pollStreams(t, "the dropped stream counted as leaked", func() bool {
		runtime.GC()
		_, cs := streamStatus(t, hs.URL, "Feed.Watch", addr)
		return cs != nil && cs.Leaked == 1 && cs.Open == 0
	})
	pollStreams(t, "the leaked stream's handler ended", func() bool {
		ws, _ := streamStatus(t, hs.URL, "Feed.Watch", addr)
		return ws != nil && ws.Open == 0
	})
	if err := <-ends; err == nil || !strings.Contains(err.Error(), "dropped without Close") {
		t.Errorf("a stream interceptor saw the leaked stream end with %v; want it dropped", err)
	}
	if body := get(t, hs.URL+"/metrics"); !strings.Contains(body, `kiev_client_streams_leaked_total{target="`+addr+`"} 1`) {
		t.Errorf("/metrics lacks the leaked stream")
	}
	if page := get(t, hs.URL+"/debug/kiev"); !strings.Contains(page, `<span class="bad leaked">1 leaked</span>`) {
		t.Errorf("the status page does not show the leaked stream")
	}
}

// TestStreamsOnTheStatusPageInBrowser loads the status page in headless
// Chromium while a stream is open: its script's refresh shows the
// stream's messages sent after the page loaded, and the chart of its
// messages has the history's samples.
func TestStreamsOnTheStatusPageInBrowser(t *testing.T) {
	chromium := os.Getenv("KIEV_CHROMIUM")
	if chromium == "" {
		t.Skip("KIEV_CHROMIUM is not set; run scripts/services.sh up and eval \"$(scripts/services.sh env)\" to test the status page in headless Chromium")
	}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err := srv.Register(&Feed{}); err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, srv)
	c := dial(t, addr)
	ctx := context.Background()
	chat, err := c.Stream(ctx, "Feed.Chat", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer chat.Close()
	for range 3 { // the history's samples, a message each way in each
		if err := chat.Send(ctx, Event{N: 1}); err != nil {
			t.Fatal(err)
		}
		if err := chat.Recv(ctx, new(Event)); err != nil {
			t.Fatal(err)
		}
		kiev.SampleHistory(srv)
	}
	adminPages := srv.AdminHandler()
	var pages atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/debug/kiev" && pages.Add(1) == 2 { // the first refresh
			for i := range 2 {
				if err := chat.Send(r.Context(), Event{N: i}); err != nil {
					t.Error(err)
				}
				if err := chat.Recv(r.Context(), new(Event)); err != nil {
					t.Error(err)
				}
			}
		}
		adminPages.ServeHTTP(w, r)
	}))
	defer front.Close()
	dom := dumpDOM(t, chromium, front.URL+"/debug/kiev", "--virtual-time-budget=5000")
	if pages.Load() < 2 {
		t.Fatalf("the page was fetched %d times; want a refresh too", pages.Load())
	}
	for _, want := range []string{
		`<tr data-stream="Feed.Chat"><td>Feed.Chat</td><td class="kind">bidirectional stream</td><td class="open">1</td><td class="opened">1</td><td class="messages-in">5</td><td class="messages-out">5</td>`,
		`<span class="streams">streams open 1, opened 1, messages in 5, out 5; <span class="leaked">0 leaked</span>`,
		`data-chart="method-messages" data-method="Feed.Chat"`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the refreshed page lacks %s", want)
		}
	}
	checkChart(t, dom, "method-messages", 2)
}

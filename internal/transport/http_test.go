package transport

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/codes"
)

// The HTTP front, driven by fakeHandler and net/http/httptest: what it
// hands the handler of a call, how it answers, and what it refuses
// before it reads a body.

// httpFront serves an HTTPFront over h from a test server, and returns
// its URL and the flag that says the server is closing.
func httpFront(t *testing.T, h *fakeHandler, maxCalls int) (string, *bool) {
	t.Helper()
	closed := new(bool)
	srv := httptest.NewServer(newTestFront(h, maxCalls, closed).Handler(nil))
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	t.Cleanup(srv.Close)
	return srv.URL, closed
}

// newTestFront returns an HTTPFront over h that knows every method but
// No.Such.
func newTestFront(h *fakeHandler, maxCalls int, closed *bool) *HTTPFront {
	return NewHTTPFront(HTTPConfig{
		Handler: h,
		Check: func(name string, _ *tls.ConnectionState) (codes.Code, string) {
			if name == "No.Such" {
				return codes.NotFound, "no method " + name
			}
			return codes.OK, ""
		},
		Closed:   func() bool { return *closed },
		MaxBody:  1 << 10,
		Timeout:  time.Minute,
		MaxFrame: 1 << 20,
		MaxCalls: maxCalls,
	})
}

// post calls method with body over HTTP, and returns the status, the
// Kiev-Error-Code header and the body.
func post(t *testing.T, url, method, ctype, body string) (int, string, string) {
	t.Helper()
	resp, err := http.Post(url+"/"+method, ctype, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get(HeaderCode), string(b)
}

func TestHTTPFrontAnswersACall(t *testing.T) {
	h := newFakeHandler()
	url, _ := httpFront(t, h, 0)
	done := make(chan struct{})
	var status int
	var body string
	go func() {
		defer close(done)
		status, _, body = post(t, url, "Arith/Add", "application/json", `{"A":1}`)
	}()
	c := <-h.opened
	h.mu.Lock()
	hd := h.heads[0]
	sink := h.sinks[c.st.ID]
	h.mu.Unlock()
	if string(hd.Method) != "Arith.Add" || string(hd.Codec) != codec.JSON.Name() || hd.Owned == nil || string(*hd.Owned) != `{"A":1}` {
		t.Errorf("Open got method %q, codec %q, args %v; want Arith.Add, json, the POST's body", hd.Method, hd.Codec, hd.Owned)
	}
	if err := sink.Reply(c, codec.JSON, map[string]int{"C": 3}); err != nil {
		t.Fatal(err)
	}
	sink.Done(c)
	<-done
	var got map[string]int
	if status != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil || got["C"] != 3 {
		t.Fatalf("answered %d %q; want 200 and the reply as JSON", status, body)
	}
}

func TestHTTPFrontRefusesWhatItCannotServe(t *testing.T) {
	h := newFakeHandler()
	url, closed := httpFront(t, h, 0)
	for _, tc := range []struct {
		name, method, ctype, body string
		status                    int
		code                      string
	}{
		{"unknown method", "No.Such", "application/json", "{}", http.StatusNotFound, "NotFound"},
		{"not JSON", "Arith.Add", "text/plain", "{}", http.StatusUnsupportedMediaType, "UnsupportedMediaType"},
		{"body too large", "Arith.Add", "application/json", strings.Repeat(" ", 2<<10), http.StatusRequestEntityTooLarge, "TooLarge"},
	} {
		status, code, body := post(t, url, tc.method, tc.ctype, tc.body)
		if status != tc.status || code != tc.code {
			t.Errorf("%s: answered %d %s %q; want %d %s", tc.name, status, code, body, tc.status, tc.code)
		}
	}
	*closed = true
	if status, code, _ := post(t, url, "Arith.Add", "application/json", "{}"); status != http.StatusServiceUnavailable || code != "Shutdown" {
		t.Errorf("a call to a closing server: answered %d %s; want 503 Shutdown", status, code)
	}
	if n := len(h.heads); n != 0 {
		t.Errorf("Open called %d times; a refused call must not be opened", n)
	}
}

// countingReader is a request body that counts the bytes read of it.
type countingReader struct{ n int }

func (r *countingReader) Read(p []byte) (int, error) {
	if r.n >= 2 {
		return 0, io.EOF
	}
	p[0] = '{'
	if r.n == 1 {
		p[0] = '}'
	}
	r.n++
	return 1, nil
}

// TestHTTPFrontRefusesPastMaxCallsFirst sends a call past MaxCalls from
// one caller's connection: it is refused before its body is read or the
// call opened.
func TestHTTPFrontRefusesPastMaxCallsFirst(t *testing.T) {
	h := newFakeHandler()
	f := newTestFront(h, 1, new(bool))
	call := func(body io.Reader) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/Arith.Add", body) // from 192.0.2.1:1234
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		f.Handler(context.Background()).ServeHTTP(w, req)
		return w
	}
	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- call(strings.NewReader("{}")) }()
	c := <-h.opened
	var body countingReader
	if w := call(&body); w.Code != http.StatusServiceUnavailable || w.Header().Get(HeaderCode) != "Overloaded" || !strings.Contains(w.Body.String(), "on this connection") {
		t.Errorf("a second call from the same caller: answered %d %s %q; want 503 Overloaded, refused on this connection", w.Code, w.Header().Get(HeaderCode), w.Body)
	}
	if body.n != 0 {
		t.Errorf("%d bytes of the refused call's body were read; want none", body.n)
	}
	h.mu.Lock()
	opened, refused := len(h.heads), h.refused
	h.mu.Unlock()
	if opened != 1 || refused != 1 {
		t.Errorf("Open called %d times and Refuse %d; want 1 and 1", opened, refused)
	}
	h.answer(t, c, 1)
	if w := <-first; w.Code != http.StatusOK {
		t.Errorf("the first call: %d %q, want 200", w.Code, w.Body)
	}
	// Its end made room: the next call is taken.
	go func() { first <- call(strings.NewReader("{}")) }()
	h.answer(t, <-h.opened, 2)
	if w := <-first; w.Code != http.StatusOK {
		t.Errorf("a call after the first ended: %d %q, want 200", w.Code, w.Body)
	}
}

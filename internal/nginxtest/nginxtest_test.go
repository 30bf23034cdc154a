package nginxtest

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/fcgi"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoed is what the echo responder saw of a request.
type echoed struct {
	Method        string
	Path          string
	RawPath       string
	RawQuery      string
	RequestURI    string
	Host          string
	ContentLength int64
	BodyLen       int64
	BodySHA       string
	Header        http.Header
	Env           map[string]string // fcgi.ProcessEnv
}

// echoHandler answers with an echoed of the request as JSON. Paths under
// /status/ answer otherwise, to check that statuses and headers come back.
func echoHandler(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/status/503":
		w.Header().Set("Retry-After", "7")
		w.Header().Set("Kiev-Status", "overloaded")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "try later\n")
		return
	case "/status/413":
		io.Copy(io.Discard, r.Body)
		w.Header().Add("Kiev-Multi", "a")
		w.Header().Add("Kiev-Multi", "b")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		io.WriteString(w, `{"error":"too large"}`)
		return
	case "/status/204":
		w.Header().Set("Kiev-Status", "empty")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	h := sha256.New()
	n, err := io.Copy(h, r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	e := echoed{
		Method:        r.Method,
		Path:          r.URL.Path,
		RawPath:       r.URL.RawPath,
		RawQuery:      r.URL.RawQuery,
		RequestURI:    r.RequestURI,
		Host:          r.Host,
		ContentLength: r.ContentLength,
		BodyLen:       n,
		BodySHA:       hex.EncodeToString(h.Sum(nil)),
		Header:        r.Header,
		Env:           fcgi.ProcessEnv(r),
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(e)
}

// responder serves echoHandler over FastCGI on a loopback listener until
// the test ends, and returns its address.
func responder(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fcgi.Serve(l, http.HandlerFunc(echoHandler))
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
	})
	return l.Addr().String()
}

// setup starts the echo responder and an nginx in front of it, and returns
// the nginx and an HTTP client whose connections close when the test ends.
// (nginx stops before the responder: cleanups run last first.)
func setup(t *testing.T, opts ...Option) (*Server, *http.Client) {
	t.Helper()
	addr := responder(t)
	s := Start(t, addr, opts...)
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	t.Cleanup(tr.CloseIdleConnections)
	return s, &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// do sends req and returns the response with its body read.
func do(t *testing.T, c *http.Client, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// echo sends req and decodes the echo responder's answer.
func echo(t *testing.T, s *Server, c *http.Client, req *http.Request) echoed {
	t.Helper()
	resp, b := do(t, c, req)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %s: %s\nnginx's error log:\n%s", req.Method, req.URL, resp.Status, b, s.ErrorLog())
	}
	var e echoed
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("%s %s: %v: %s", req.Method, req.URL, err, b)
	}
	return e
}

func newRequest(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestPathAndHeaders(t *testing.T) {
	s, c := setup(t)
	req := newRequest(t, "GET", s.URL()+"/kiev.Echo/Say?x=1&y=%20", nil)
	req.Header.Set("Kiev-Priority", "7")
	req.Header.Set("Kiev-Meta-Trace-Id", "x")
	req.Header["kiev-meta-lower"] = []string{"lower"} // sent as is
	req.Header.Set("Kiev_Underscore", "dropped")
	e := echo(t, s, c, req)

	if e.Method != "GET" || e.Path != "/kiev.Echo/Say" || e.RawQuery != "x=1&y=%20" {
		t.Errorf("method %q, path %q, query %q; want GET /kiev.Echo/Say x=1&y=%%20", e.Method, e.Path, e.RawQuery)
	}
	if e.RequestURI != "" {
		t.Errorf("r.RequestURI = %q; net/http/fcgi leaves it empty", e.RequestURI)
	}
	if e.Host != "127.0.0.1" {
		t.Errorf("r.Host = %q; want nginx's $host, 127.0.0.1 without the port", e.Host)
	}
	for k, want := range map[string]string{
		"Kiev-Priority":      "7",
		"Kiev-Meta-Trace-Id": "x",
		"Kiev-Meta-Lower":    "lower",
		"User-Agent":         "Go-http-client/1.1",
	} {
		if got := e.Header[k]; len(got) != 1 || got[0] != want {
			t.Errorf("header %s = %q; want [%q] (all: %v)", k, got, want, e.Header)
		}
	}
	for k := range e.Header {
		if strings.Contains(strings.ToLower(k), "underscore") {
			t.Errorf("header %s arrived; nginx drops names with underscores", k)
		}
	}
	// net/http/fcgi builds r.URL from REQUEST_URI and hides PATH_INFO and
	// SCRIPT_NAME; DOCUMENT_URI is nginx's $uri.
	if got := e.Env["DOCUMENT_URI"]; got != "/kiev.Echo/Say" {
		t.Errorf("DOCUMENT_URI = %q; want /kiev.Echo/Say (env %v)", got, e.Env)
	}
	for _, k := range []string{"PATH_INFO", "SCRIPT_NAME", "REQUEST_URI"} {
		if v, ok := e.Env[k]; ok {
			t.Errorf("fcgi.ProcessEnv has %s=%q; net/http/fcgi used to hide it", k, v)
		}
	}
}

// TestRawPath shows that r.URL comes from REQUEST_URI, the request target
// as sent, while DOCUMENT_URI is nginx's decoded and normalized $uri.
func TestRawPath(t *testing.T) {
	s, c := setup(t)
	for _, tc := range []struct {
		target, path, rawPath, uri string
	}{
		{"/a%20b/c", "/a b/c", "", "/a b/c"},
		{"/a%2Fb", "/a/b", "/a%2Fb", "/a/b"},
		{"/x/../kiev.Echo/Say", "/x/../kiev.Echo/Say", "", "/kiev.Echo/Say"},
		{"/x/./y/%2e%2e/kiev.Echo/Say", "/x/./y/../kiev.Echo/Say", "/x/./y/%2e%2e/kiev.Echo/Say", "/x/kiev.Echo/Say"},
		{"//double//slash", "//double//slash", "", "/double/slash"},
	} {
		// The client sends the path as it is, without cleaning it.
		e := echo(t, s, c, newRequest(t, "GET", s.URL()+tc.target, nil))
		if e.Path != tc.path || e.RawPath != tc.rawPath || e.Env["DOCUMENT_URI"] != tc.uri {
			t.Errorf("%s: path %q, raw %q, DOCUMENT_URI %q; want %q, %q, %q",
				tc.target, e.Path, e.RawPath, e.Env["DOCUMENT_URI"], tc.path, tc.rawPath, tc.uri)
		}
	}
}

// TestRepeatedHeader shows what arrives of a header sent twice.
func TestRepeatedHeader(t *testing.T) {
	s, c := setup(t)
	req := newRequest(t, "GET", s.URL()+"/", nil)
	req.Header.Add("Kiev-Meta-Tag", "a")
	req.Header.Add("Kiev-Meta-Tag", "b")
	e := echo(t, s, c, req)
	got := e.Header["Kiev-Meta-Tag"]
	t.Logf("Kiev-Meta-Tag sent as [a b] arrives as %q", got)
	// nginx before 1.23 sends two HTTP_KIEV_META_TAG parameters, of which
	// net/http/fcgi keeps the last; 1.23 and later join them with ", ".
	if len(got) != 1 || (got[0] != "b" && got[0] != "a, b") {
		t.Errorf("Kiev-Meta-Tag = %q; want [b] or [a, b]", got)
	}
}

func TestPostBody(t *testing.T) {
	s, c := setup(t)
	body := make([]byte, 1<<20)
	rand.Read(body)
	sum := sha256.Sum256(body)
	want := hex.EncodeToString(sum[:])

	t.Run("length", func(t *testing.T) {
		req := newRequest(t, "POST", s.URL()+"/kiev.Blob/Put", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/octet-stream")
		e := echo(t, s, c, req)
		if e.Method != "POST" || e.Path != "/kiev.Blob/Put" {
			t.Errorf("%s %s; want POST /kiev.Blob/Put", e.Method, e.Path)
		}
		if e.ContentLength != int64(len(body)) || e.BodyLen != int64(len(body)) || e.BodySHA != want {
			t.Errorf("Content-Length %d, %d bytes read; want %d, and the same bytes", e.ContentLength, e.BodyLen, len(body))
		}
		if got := e.Header.Get("Content-Type"); got != "application/octet-stream" {
			t.Errorf("Content-Type = %q", got)
		}
	})
	t.Run("chunked", func(t *testing.T) {
		// A reader of unknown length makes the client send the body chunked.
		req := newRequest(t, "POST", s.URL()+"/kiev.Blob/Put", io.MultiReader(bytes.NewReader(body)))
		e := echo(t, s, c, req)
		if e.BodyLen != int64(len(body)) || e.BodySHA != want {
			t.Errorf("%d bytes read; want %d, and the same bytes", e.BodyLen, len(body))
		}
		t.Logf("a chunked body arrives with r.ContentLength %d", e.ContentLength)
		if e.ContentLength != int64(len(body)) {
			t.Errorf("r.ContentLength = %d; want nginx to have counted the chunked body, %d", e.ContentLength, len(body))
		}
	})
	t.Run("empty", func(t *testing.T) {
		e := echo(t, s, c, newRequest(t, "POST", s.URL()+"/kiev.Blob/Put", http.NoBody))
		if e.BodyLen != 0 {
			t.Errorf("%d bytes read from an empty body", e.BodyLen)
		}
	})
}

func TestStatusAndHeaders(t *testing.T) {
	s, c := setup(t)

	resp, b := do(t, c, newRequest(t, "GET", s.URL()+"/status/503", nil))
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "7" ||
		resp.Header.Get("Kiev-Status") != "overloaded" || string(b) != "try later\n" ||
		resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("503: got %s %v %q", resp.Status, resp.Header, b)
	}

	resp, b = do(t, c, newRequest(t, "POST", s.URL()+"/status/413", strings.NewReader("some body")))
	if resp.StatusCode != 413 || string(b) != `{"error":"too large"}` ||
		resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("413: got %s %v %q", resp.Status, resp.Header, b)
	}
	if got := resp.Header.Values("Kiev-Multi"); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("Kiev-Multi = %q; want [a b]", got)
	}

	resp, b = do(t, c, newRequest(t, "GET", s.URL()+"/status/204", nil))
	if resp.StatusCode != 204 || resp.Header.Get("Kiev-Status") != "empty" || len(b) != 0 {
		t.Errorf("204: got %s %v %q", resp.Status, resp.Header, b)
	}
}

// TestMaxBody checks that nginx answers 413 itself to a body over its
// client_max_body_size, without passing the request on.
func TestMaxBody(t *testing.T) {
	s, c := setup(t, MaxBody("1k"))
	if !strings.Contains(s.Config(), "client_max_body_size 1k;") {
		t.Fatalf("the config lacks client_max_body_size 1k:\n%s", s.Config())
	}
	resp, b := do(t, c, newRequest(t, "POST", s.URL()+"/", bytes.NewReader(make([]byte, 1024))))
	if resp.StatusCode != 200 {
		t.Errorf("1 KiB: %s %q", resp.Status, b)
	}
	resp, b = do(t, c, newRequest(t, "POST", s.URL()+"/", bytes.NewReader(make([]byte, 1025))))
	if resp.StatusCode != 413 || !strings.Contains(string(b), "nginx") {
		t.Errorf("1 KiB + 1: %s %q; want nginx's own 413", resp.Status, b)
	}
}

func TestConcurrent(t *testing.T) {
	s, c := setup(t)
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := fmt.Sprintf("/kiev.Echo/Say%d", i)
			body := strings.Repeat("x", i*100)
			resp, err := c.Post(s.URL()+path, "text/plain", strings.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			var e echoed
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				errs <- fmt.Errorf("%s: %s: %v", path, resp.Status, err)
				return
			}
			if resp.StatusCode != 200 || e.Path != path || e.BodyLen != int64(len(body)) {
				errs <- fmt.Errorf("%s: %s, path %q, %d bytes; want 200, %d bytes", path, resp.Status, e.Path, e.BodyLen, len(body))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d concurrent requests in %v", n, time.Since(start))
}

// TestNoKeepConn checks the NoKeepConn option: requests still pass.
func TestNoKeepConn(t *testing.T) {
	s, c := setup(t, NoKeepConn(), ReadTimeout(5*time.Second))
	conf := s.Config()
	if strings.Contains(conf, "keepalive") || strings.Contains(conf, "fastcgi_keep_conn") ||
		!strings.Contains(conf, "fastcgi_read_timeout 5000ms;") {
		t.Fatalf("config:\n%s", conf)
	}
	for i := range 3 {
		e := echo(t, s, c, newRequest(t, "GET", fmt.Sprintf("%s/%d", s.URL(), i), nil))
		if e.Path != fmt.Sprintf("/%d", i) {
			t.Errorf("path %q", e.Path)
		}
	}
}

// TestLocation checks the Location and NoBuffering options, and shows what
// a chunked body looks like when nginx does not buffer it.
func TestLocation(t *testing.T) {
	s, c := setup(t, NoBuffering(), Location("fastcgi_request_buffering off;"),
		Location("fastcgi_param HTTP_KIEV_FROM_NGINX yes; fastcgi_param SERVER_NAME kiev;"))
	if !strings.Contains(s.Config(), "fastcgi_buffering off;") {
		t.Fatalf("config:\n%s", s.Config())
	}
	body := strings.Repeat("chunked body", 100000)
	req := newRequest(t, "POST", s.URL()+"/kiev.Blob/Put", io.MultiReader(strings.NewReader(body)))
	req.Header.Set("Kiev-From-Nginx", "no") // nginx drops it for the fastcgi_param
	e := echo(t, s, c, req)
	if got := e.Header.Values("Kiev-From-Nginx"); len(got) != 1 || got[0] != "yes" {
		t.Errorf("Kiev-From-Nginx = %q; want [yes]", got)
	}
	if got := e.Env["SERVER_NAME"]; got != "kiev" {
		t.Errorf("SERVER_NAME = %q; want kiev", got)
	}
	if e.BodyLen != int64(len(body)) {
		t.Errorf("%d bytes read; want %d", e.BodyLen, len(body))
	}
	// Unbuffered, nginx knows the length of a chunked body only if it has
	// read all of it with the headers; otherwise CONTENT_LENGTH is empty,
	// and net/http/fcgi makes that 0, not -1, though the body is there.
	t.Logf("an unbuffered chunked body arrives with r.ContentLength %d", e.ContentLength)
	if e.ContentLength != 0 && e.ContentLength != int64(len(body)) {
		t.Errorf("r.ContentLength = %d; want 0 or %d", e.ContentLength, len(body))
	}
}

// TestNoResponder checks nginx's 502 while nothing serves FastCGI.
func TestNoResponder(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := Start(t, addr)
	resp, err := http.Get(s.URL() + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("%s; want 502", resp.Status)
	}
	if !strings.Contains(s.ErrorLog(), "connect() failed") {
		t.Errorf("the error log does not tell of the failed connect:\n%s", s.ErrorLog())
	}
}

func TestStop(t *testing.T) {
	t0 := time.Now()
	s := Start(t, "127.0.0.1:9")
	t1 := time.Now()
	s.Stop()
	t.Logf("started in %v, stopped in %v", t1.Sub(t0), time.Since(t1))
	if c, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("nginx accepts connections after Stop")
	}
	if _, err := os.Stat(s.Dir() + "/nginx.pid"); err == nil {
		t.Error("nginx.pid is left after Stop")
	}
	s.Stop() // stopping a stopped server does nothing
}

func TestStartSkipsWithoutBinary(t *testing.T) {
	if os.Getenv(EnvBinary) == "" {
		t.Skip("nothing to check: the variable is unset already")
	}
	t.Setenv(EnvBinary, "")
	t.Run("skip", func(t *testing.T) {
		Start(t, "127.0.0.1:9")
		t.Fatal("Start did not skip")
	})
}

package transport

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/codes"
	"github.com/kievrpc/kiev/shed"
)

// HTTP headers of the HTTP front (kiev.HeaderPriority and the others; a
// test in package kiev pins them).
const (
	HeaderPriority   = "Kiev-Priority"
	HeaderTimeout    = "Kiev-Timeout"
	HeaderMetaPrefix = "Kiev-Meta-"
	HeaderCode       = "Kiev-Error-Code"
)

// Codes that stand for HTTP statuses in HTTPFront.error; they never
// travel.
const (
	codeForbidden            codes.Code = 403
	codeMethodNotAllowed     codes.Code = 405
	codeNotAcceptable        codes.Code = 406
	codeUnsupportedMediaType codes.Code = 415
	codeBodyTooLarge         codes.Code = 413
	codeNotImplemented       codes.Code = 501
)

// jsonCodec names the codec of every HTTP call; Open only reads it.
var jsonCodec = []byte(codec.JSON.Name())

// HTTPConfig is what a server's HTTP front needs of it. It must not
// change once the front serves.
type HTTPConfig struct {
	Handler ServerHandler
	// Check says whether a call of the method name may be made over
	// HTTP by a caller with TLS state st, or the code and message to
	// answer: an unknown method, one of kiev's own services, a client
	// certificate the server requires and did not get.
	Check func(name string, st *tls.ConnectionState) (codes.Code, string)
	// Closed reports whether the server is shutting down.
	Closed   func() bool
	MaxBody  int64         // WithHTTPMaxBody
	Timeout  time.Duration // a call's deadline without Kiev-Timeout (WithHTTPTimeout)
	MaxFrame int           // bounds a reply (WithMaxFrameSize)
	MaxCalls int           // per caller's connection (WithMaxConcurrentCalls); 0: no bound
	// Streams reports whether the method name takes messages from the
	// client (kiev.In) and whether it sends messages (kiev.Out); nil
	// for none that streams. The front serves server streams, and
	// refuses those that take messages.
	Streams func(name string) (in, out bool)
	// Keepalive is how long an event stream may go without a byte before
	// the front writes a comment to it (0: DefaultSSEKeepalive).
	Keepalive time.Duration
}

// DefaultSSEKeepalive is how long an event stream goes without a byte
// before the HTTP front writes a comment (": ping"), which EventSource
// skips: proxies' read timeouts (nginx's is 60 s) do not cut a stream
// that is only quiet, and a client that left is found.
const DefaultSSEKeepalive = 15 * time.Second

// HTTPFront serves a server's calls as JSON over HTTP: POST
// /Service.Method (or /Service/Method) with the args as a JSON body. Its
// calls are made and run as every front's (ServerHandler), and answered with
// the reply as JSON, or with an error as JSON whose code is also in the
// Kiev-Error-Code header and the status. Each request's goroutine waits
// for its call's answer and writes it; for a server stream, its messages
// too, as Server-Sent Events or NDJSON (http_stream.go).
type HTTPFront struct {
	cfg   HTTPConfig
	calls peerCalls // calls in flight of each caller's connection (MaxCalls)
}

// NewHTTPFront returns the HTTP front of cfg.
func NewHTTPFront(cfg HTTPConfig) *HTTPFront { return &HTTPFront{cfg: cfg} }

// Handler returns an http.Handler serving f's calls, whose contexts take
// their values from base; or, if base is nil, from the request's
// context, which carries the values of the http.Server's BaseContext and
// ConnContext.
func (f *HTTPFront) Handler(base context.Context) http.Handler {
	return httpHandler{f: f, base: base}
}

type httpHandler struct {
	f    *HTTPFront
	base context.Context
}

func (hh httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f := hh.f
	name := methodName(r.URL.Path)
	if code, msg := f.cfg.Check(name, r.TLS); code != codes.OK {
		f.error(w, code, msg)
		return
	}
	var in, out bool
	if f.cfg.Streams != nil {
		in, out = f.cfg.Streams(name)
	}
	var format streamFormat
	switch {
	case in:
		f.error(w, codeNotImplemented, fmt.Sprintf("kiev: %s takes a stream of messages from the client, which the HTTP front does not carry (it serves server streams only); call it with a kiev client (Client.Stream)", name))
		return
	case out:
		if format = f.checkStream(w, r, name); format == 0 {
			return
		}
	default:
		if !f.checkUnary(w, r, name) {
			return
		}
	}
	hd, timeout, ok := f.head(w, r, name)
	if !ok {
		return
	}
	// Admission first: a call refused is refused before its body is
	// read. An HTTP connection is the caller's connection (FastCGI
	// passes on the caller's address and port): MaxCalls holds for it as
	// for a TCP connection.
	if f.cfg.Closed() {
		f.error(w, codes.Shutdown, "kiev: the server is shutting down; retry on another server")
		return
	}
	if !f.calls.take(r.RemoteAddr, f.cfg.MaxCalls) {
		code, msg := f.cfg.Handler.Refuse(hd.Method, "on this connection")
		f.error(w, code, msg)
		return
	}
	buf := f.readArgs(w, r)
	if buf == nil {
		f.calls.put(r.RemoteAddr)
		return
	}

	hd.Owned = buf
	hs := &httpSink{f: f, peer: r.RemoteAddr, end: make(chan struct{})}
	hs.counted.Store(true)
	switch {
	case format != 0:
		// A stream has a deadline only if the caller asks for one: it
		// lasts as long as it has messages to send.
		hs.stream = newHTTPStream(format, f.cfg.MaxFrame)
		hd.IsStream, hd.Stream = true, hs.stream
		if timeout > 0 {
			hd.Deadline = time.Now().Add(timeout)
		}
	default:
		timeout = cmp.Or(timeout, f.cfg.Timeout)
		hd.Deadline = time.Now().Add(timeout)
	}
	base := hh.base
	if base == nil {
		base = r.Context()
	}
	c, code, msg := f.cfg.Handler.Open(&hd, base, hs)
	if c == nil {
		f.calls.put(r.RemoteAddr)
		f.error(w, code, msg)
		return
	}
	stop := context.AfterFunc(r.Context(), func() {
		c.State().CallerGone.Store(true)
		c.Cancel(context.Canceled)
	})
	defer stop()
	if base != r.Context() && base.Done() != nil {
		stopBase := context.AfterFunc(base, func() { c.Cancel(base.Err()) })
		defer stopBase()
	}
	c.Submit(base)
	if hs.stream != nil {
		f.serveStream(w, r, c, hs, timeout)
		return
	}
	select {
	case <-hs.end:
	case <-r.Context().Done():
		// The client left. (Canceled here too: the deferred stop may
		// stop the AfterFunc above before it runs.)
		c.State().CallerGone.Store(true)
		c.Cancel(context.Canceled)
		return
	}
	f.answer(w, c, hs, timeout)
}

// methodName is the method a request's path names: /Service.Method, or
// /Service/Method.
func methodName(path string) string {
	name := strings.TrimPrefix(path, "/")
	if !strings.Contains(name, ".") {
		if i := strings.LastIndexByte(name, '/'); i > 0 {
			name = name[:i] + "." + name[i+1:]
		}
	}
	return name
}

// checkUnary checks the method and Content-Type of a call, or answers
// why not and returns false.
func (f *HTTPFront) checkUnary(w http.ResponseWriter, r *http.Request, name string) bool {
	if r.Method != http.MethodPost {
		f.error(w, codeMethodNotAllowed, fmt.Sprintf("kiev: %s takes POST with a JSON body, not %s", name, r.Method))
		return false
	}
	if ct := r.Header.Get("Content-Type"); !jsonContentType(ct) {
		f.error(w, codeUnsupportedMediaType, fmt.Sprintf("kiev: %s takes a JSON body sent as Content-Type: application/json, not %q (with curl: -H 'Content-Type: application/json')", name, ct))
		return false
	}
	return true
}

// head reads the Kiev-* and trace headers of a call into a Head, with
// the Kiev-Timeout asked for (0 if none), or answers why not and returns
// false.
func (f *HTTPFront) head(w http.ResponseWriter, r *http.Request, name string) (hd Head, timeout time.Duration, ok bool) {
	hd = Head{Method: []byte(name), Codec: jsonCodec, Origin: Origin{Addr: httpAddr(r.RemoteAddr), TLS: r.TLS}}
	if v := r.Header.Get(HeaderPriority); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil || p < 0 || p > 9 {
			f.error(w, codes.BadRequest, fmt.Sprintf("kiev: %s: %q is not a priority; send 0 (shed first) to 9 (shed last)", HeaderPriority, v))
			return hd, 0, false
		}
		hd.Priority, hd.HasPriority = uint8(p), true
	}
	if v := r.Header.Get(HeaderTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			f.error(w, codes.BadRequest, fmt.Sprintf("kiev: %s: %q is not a positive duration such as 250ms or 2s", HeaderTimeout, v))
			return hd, 0, false
		}
		timeout = d
	}
	for k, vs := range r.Header {
		if len(k) > len(HeaderMetaPrefix) && strings.EqualFold(k[:len(HeaderMetaPrefix)], HeaderMetaPrefix) && len(vs) > 0 {
			if hd.Meta == nil {
				hd.Meta = make(map[string]string)
			}
			hd.Meta[strings.ToLower(k[len(HeaderMetaPrefix):])] = vs[0]
		}
	}
	for _, k := range [...]string{"traceparent", "tracestate"} { // W3C Trace Context
		if v := r.Header.Get(k); v != "" {
			if hd.Meta == nil {
				hd.Meta = make(map[string]string)
			}
			hd.Meta[k] = v
		}
	}
	return hd, timeout, true
}

// readArgs reads a call's JSON args, from the body of a POST or the args
// parameter of a GET (a server stream's), into a buffer from GetBuf; or
// answers why not and returns nil.
func (f *HTTPFront) readArgs(w http.ResponseWriter, r *http.Request) *[]byte {
	buf := GetBuf(0)
	if r.Method == http.MethodGet {
		args := r.URL.Query().Get("args")
		if int64(len(args)) > f.cfg.MaxBody {
			PutBuf(buf)
			f.error(w, codeBodyTooLarge, fmt.Sprintf("kiev: the args parameter is over the %d-byte limit; send less, or raise WithHTTPMaxBody", f.cfg.MaxBody))
			return nil
		}
		*buf = append((*buf)[:0], args...)
	} else {
		body := bytesBuffer{b: (*buf)[:0]}
		_, err := io.Copy(&body, http.MaxBytesReader(w, r.Body, f.cfg.MaxBody))
		*buf = body.b
		if err != nil {
			PutBuf(buf)
			if errors.As(err, new(*http.MaxBytesError)) {
				f.error(w, codeBodyTooLarge, fmt.Sprintf("kiev: the request body is over the %d-byte limit; send less, or raise WithHTTPMaxBody", f.cfg.MaxBody))
				return nil
			}
			f.error(w, codes.BadRequest, "kiev: reading the request body: "+err.Error())
			return nil
		}
	}
	if len(*buf) == 0 {
		*buf = append(*buf, "null"...)
	}
	return buf
}

// answer writes the answer of call c, once it is done.
func (f *HTTPFront) answer(w http.ResponseWriter, c Call, hs *httpSink, timeout time.Duration) {
	if !hs.sent {
		// The handler ran past the deadline, so no reply was made.
		f.error(w, codes.DeadlineExceeded, fmt.Sprintf("kiev: %s ran past its deadline (%v)", c.Name(), timeout))
		return
	}
	if hs.code != codes.OK {
		f.error(w, hs.code, hs.msg)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(append(hs.body, '\n'))
}

// error answers an HTTP call that failed with code.
func (f *HTTPFront) error(w http.ResponseWriter, code codes.Code, msg string) {
	status := httpStatus(code)
	name := codeName(code)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set(HeaderCode, name)
	switch status {
	case http.StatusServiceUnavailable:
		h.Set("Retry-After", "1")
	case http.StatusMethodNotAllowed:
		if h.Get("Allow") == "" {
			h.Set("Allow", http.MethodPost)
		}
	}
	w.WriteHeader(status)
	w.Write(append(errorJSON(name, msg), '\n'))
}

// errorJSON is the JSON of an error: {"error": msg, "code": name}.
func errorJSON(name, msg string) []byte {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}{msg, name})
	return b
}

// codeName is the name of code in an answer's Kiev-Error-Code.
func codeName(code codes.Code) string {
	switch code {
	case codeForbidden:
		return "Forbidden"
	case codeMethodNotAllowed:
		return "MethodNotAllowed"
	case codeNotAcceptable:
		return "NotAcceptable"
	case codeUnsupportedMediaType:
		return "UnsupportedMediaType"
	case codeNotImplemented:
		return "NotImplemented"
	case codeBodyTooLarge:
		return codes.TooLarge.String()
	}
	return code.String()
}

// jsonContentType reports whether ct is application/json, or a type with
// the +json suffix, parameters such as charset aside. A body of any other
// type is refused: a browser posts text/plain, form and multipart bodies
// to any site without asking it first (no CORS preflight), so accepting
// them would let any web page a user of the network opens call the
// services.
func jsonContentType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.NotFound:
		return http.StatusNotFound
	case codes.BadRequest:
		return http.StatusBadRequest
	case codes.Overloaded, codes.Shutdown:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.Canceled:
		return 499 // client closed request, as nginx names it
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	}
	if c >= 400 && c <= 599 {
		return int(c)
	}
	return http.StatusInternalServerError
}

// bytesBuffer is an io.Writer appending to a byte slice.
type bytesBuffer struct{ b []byte }

func (bb *bytesBuffer) Write(p []byte) (int, error) {
	bb.b = append(bb.b, p...)
	return len(p), nil
}

// httpSink takes the answer of an HTTP call for its request goroutine,
// which writes it.
type httpSink struct {
	f    *HTTPFront
	peer string // the request's RemoteAddr, its count in HTTPFront.calls
	// counted says the call counts in HTTPFront.calls: until it is done,
	// or, a stream, until it opens.
	counted atomic.Bool
	// stream carries the messages of a server stream; nil for a call.
	stream *httpStream
	mu     sync.Mutex // guards the fields below
	code   codes.Code
	msg    string
	body   []byte
	sent   bool          // an answer was made
	end    chan struct{} // closed by Done
}

// Reply, Fail, Done and Backlogged make an httpSink the Sink of its call.
func (hs *httpSink) Reply(_ Call, cd codec.Codec, v any) error {
	body, err := cd.Marshal(nil, v)
	if err != nil {
		return &EncodeError{Err: err}
	}
	if max := hs.f.cfg.MaxFrame; len(body) > max {
		return fmt.Errorf("%d bytes, over the %d-byte limit; return less or raise WithMaxFrameSize", len(body), max)
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.sent, hs.code, hs.body = true, codes.OK, body
	return nil
}

func (hs *httpSink) Fail(_ Call, code codes.Code, msg string, limited bool) error {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.sent, hs.code, hs.msg = true, code, msg
	return nil
}

func (hs *httpSink) Done(Call) {
	hs.uncount()
	close(hs.end)
}

// uncount takes the call out of its caller's count in HTTPFront.calls,
// once: an open stream, as over a connection, is not a call in flight
// for WithMaxConcurrentCalls.
func (hs *httpSink) uncount() {
	if hs.counted.Swap(false) {
		hs.f.calls.put(hs.peer)
	}
}

// Stream is the call's stream, if it is a server stream's.
func (hs *httpSink) Stream(Call) HandlerStream {
	if hs.stream == nil {
		return nil
	}
	return hs.stream
}

// Backlogged: an HTTP reply is written by its own request goroutine.
func (hs *httpSink) Backlogged() (int, bool) { return 0, false }

// Flow: HTTP calls are not shared fairly by connection.
func (hs *httpSink) Flow() *shed.Flow { return nil }

// peerCalls counts the calls in flight of each HTTP caller's connection,
// for MaxCalls.
type peerCalls struct {
	mu    sync.Mutex // guards the fields below
	calls map[string]int
}

// take counts a call of peer, unless it has max in flight already (max
// 0: no limit).
func (pc *peerCalls) take(peer string, max int) bool {
	if max <= 0 {
		return true
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.calls[peer] >= max {
		return false
	}
	if pc.calls == nil {
		pc.calls = make(map[string]int)
	}
	pc.calls[peer]++
	return true
}

// put counts the end of a call of peer.
func (pc *peerCalls) put(peer string) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if n, ok := pc.calls[peer]; ok {
		if n <= 1 {
			delete(pc.calls, peer)
		} else {
			pc.calls[peer] = n - 1
		}
	}
}

// httpAddr is an HTTP caller's address, as its request gives it.
type httpAddr string

func (a httpAddr) Network() string { return "tcp" }
func (a httpAddr) String() string  { return string(a) }

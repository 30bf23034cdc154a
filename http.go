package kiev

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/fcgi"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/transport"
)

// HTTP headers of kiev's HTTP front.
const (
	HeaderPriority   = "Kiev-Priority"   // 0 to 9; DefaultPriority if absent
	HeaderTimeout    = "Kiev-Timeout"    // a Go duration, e.g. 250ms; WithHTTPTimeout's default if absent
	HeaderMetaPrefix = "Kiev-Meta-"      // Kiev-Meta-Trace-Id: x becomes metadata trace-id: x
	HeaderCode       = "Kiev-Error-Code" // on errors: the Code as Code.String gives it, "NotFound" or "404"
)

// Defaults of the HTTP front.
const (
	DefaultHTTPMaxBody = 4 << 20
	DefaultHTTPTimeout = 10 * time.Second
)

// HTTPHandler returns an http.Handler that serves the server's services
// as JSON over HTTP: POST /Service.Method (or /Service/Method) with the
// args as a JSON body (empty means null), answered with the reply as
// JSON. Each call takes the same path as a call over TCP: the overload
// scheduler, priorities, deadlines, interceptors, metrics and logs. The
// Kiev-Priority header sets the priority, Kiev-Timeout the deadline, and
// every Kiev-Meta-* header becomes call metadata (the rest of its name,
// lower-cased, is the key). The W3C Trace Context headers, traceparent
// and tracestate, become metadata under their own names (over a
// Kiev-Meta-Traceparent, say), so that a tracing interceptor such as
// otelkiev's continues the caller's trace.
//
// Errors are answered with a JSON body {"error": "...", "code": "..."},
// the code (Code.String: a name such as "NotFound", or the number of a
// handler's own code, such as "404") also in the Kiev-Error-Code header,
// and the status:
//
//	unknown service or method                  404
//	a method other than POST                   405 (Allow: POST)
//	a Content-Type other than application/json 415 (or a +json type; so
//	                                           that no web page can post
//	                                           to the services unasked)
//	a body that is not JSON for the args type  400, naming the field
//	a body over WithHTTPMaxBody                413
//	a bad Kiev-Priority or Kiev-Timeout        400
//	overloaded, or shutting down               503, Retry-After: 1
//	deadline passed                            504
//	refused by TokenAuth (Unauthenticated)     401
//	no verified client certificate, on a       401
//	server whose WithTLS requires one (serve
//	it from an http.Server with the same
//	ClientAuth; PeerCertificates then works)
//	the handler's error                        500, or the error's code if
//	                                           it is 400–599 (kiev.Errorf(404, ...))
func (s *Server) HTTPHandler() http.Handler {
	if s.requiresClientCerts() && s.opts.certsOptional {
		s.opts.logger.Warn("kiev: serving callers without client certificates though WithTLS requires them (WithoutClientCertsOutsideTLS)", "entry", "HTTPHandler")
	}
	return httpFront{s: s}
}

// ServeFastCGI serves HTTPHandler as a FastCGI responder on l, so that a
// web server such as nginx reaches the services through fastcgi_pass. It
// returns ErrServerClosed after Shutdown or Close, which close l. Like
// Serve it retries temporary Accept errors (too many open files) with
// backoff. Connections the web server keeps open end when it closes them,
// or once they carry no byte either way for FastCGIIdleTimeout.
func (s *Server) ServeFastCGI(l net.Listener) error {
	if err := s.checkCertEntry("ServeFastCGI"); err != nil {
		l.Close()
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	s.startAdmin()
	s.logServing(" FastCGI", l.Addr())
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		l.Close()
	}()
	err := fcgi.Serve(fcgiListener{l, s}, httpFront{s: s, base: s.baseContext(l)})
	if s.isClosed() {
		return ErrServerClosed
	}
	return err
}

// FastCGIIdleTimeout is how long a FastCGI connection may carry no byte
// either way before ServeFastCGI closes it. It is longer than nginx's
// fastcgi_read_timeout (60s), which gives up on a slow answer first.
const FastCGIIdleTimeout = 5 * time.Minute

// fcgiListener is the listener ServeFastCGI hands to net/http/fcgi, which
// stops at the first Accept error and sets no deadline of its own.
type fcgiListener struct {
	net.Listener
	s *Server
}

func (l fcgiListener) Accept() (net.Conn, error) {
	nc, err := l.s.accept(l.Listener)
	if err != nil {
		return nil, err
	}
	c := &idleConn{Conn: nc, idle: l.s.opts.fastCGIIdle}
	_ = nc.SetReadDeadline(time.Now().Add(c.idle))
	return c, nil
}

// idleConn fails a Read once no byte has moved either way for idle:
// every Read and Write pushes the read deadline on.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	}
	return n, err
}

func (c *idleConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	}
	return n, err
}

// httpFront serves calls over HTTP. Their contexts' values come from
// base, WithBaseContext's for ServeFastCGI's listener, or, if nil (for
// HTTPHandler), from the request's context, which carries the values of
// the http.Server's BaseContext and ConnContext.
type httpFront struct {
	s    *Server
	base context.Context
}

// httpError answers an HTTP call that failed with code.
func httpError(w http.ResponseWriter, code Code, msg string) {
	status := httpStatus(code)
	name := code.String()
	switch code {
	case codeMethodNotAllowed:
		name = "MethodNotAllowed"
	case codeUnsupportedMediaType:
		name = "UnsupportedMediaType"
	case codeBodyTooLarge:
		name = CodeTooLarge.String()
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set(HeaderCode, name)
	switch status {
	case http.StatusServiceUnavailable:
		h.Set("Retry-After", "1")
	case http.StatusMethodNotAllowed:
		h.Set("Allow", http.MethodPost)
	}
	w.WriteHeader(status)
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}{msg, name})
	w.Write(append(b, '\n'))
}

// verifiedClient reports whether st, an HTTP request's TLS state, holds
// the client certificate that a server with ClientAuth ca requires.
func verifiedClient(st *tls.ConnectionState, ca tls.ClientAuthType) bool {
	if st == nil || len(st.PeerCertificates) == 0 {
		return false
	}
	return ca != tls.RequireAndVerifyClientCert || len(st.VerifiedChains) > 0
}

// codeMethodNotAllowed stands for 405 in httpError; it never travels.
const codeMethodNotAllowed Code = 405

// codeUnsupportedMediaType stands for 415 in httpError.
const codeUnsupportedMediaType Code = 415

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

// codeBodyTooLarge stands for 413 in httpError.
const codeBodyTooLarge Code = 413

func httpStatus(c Code) int {
	switch c {
	case CodeOK:
		return http.StatusOK
	case CodeNotFound:
		return http.StatusNotFound
	case CodeBadRequest:
		return http.StatusBadRequest
	case CodeOverloaded, CodeShutdown:
		return http.StatusServiceUnavailable
	case CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case CodeCanceled:
		return 499 // client closed request, as nginx names it
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	}
	if c >= 400 && c <= 599 {
		return int(c)
	}
	return http.StatusInternalServerError
}

func (f httpFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := f.s
	name := strings.TrimPrefix(r.URL.Path, "/")
	if !strings.Contains(name, ".") {
		if i := strings.LastIndexByte(name, '/'); i > 0 {
			name = name[:i] + "." + name[i+1:]
		}
	}
	m, err := s.lookupCall([]byte(name))
	switch {
	case isBuiltin(name[:max(strings.LastIndexByte(name, '.'), 0)]) && !strings.HasPrefix(name, HealthService+"."):
		httpError(w, CodeNotFound, fmt.Sprintf("kiev: %s is not served over HTTP", name))
		return
	case err != nil:
		httpError(w, CodeNotFound, err.Error())
		return
	}
	if s.requiresClientCerts() && !s.opts.certsOptional && !verifiedClient(r.TLS, s.opts.tls.ClientAuth) {
		httpError(w, CodeUnauthenticated, "kiev: this server requires a client certificate (WithTLS); serve HTTPHandler from an http.Server whose TLSConfig has the same ClientAuth and ClientCAs, and call it over HTTPS with the client's certificate")
		return
	}
	if r.Method != http.MethodPost {
		httpError(w, codeMethodNotAllowed, fmt.Sprintf("kiev: %s takes POST with a JSON body, not %s", name, r.Method))
		return
	}
	if ct := r.Header.Get("Content-Type"); !jsonContentType(ct) {
		httpError(w, codeUnsupportedMediaType, fmt.Sprintf("kiev: %s takes a JSON body sent as Content-Type: application/json, not %q (with curl: -H 'Content-Type: application/json')", name, ct))
		return
	}
	priority := DefaultPriority
	if v := r.Header.Get(HeaderPriority); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil || p < 0 || p > int(MaxPriority) {
			httpError(w, CodeBadRequest, fmt.Sprintf("kiev: %s: %q is not a priority; send 0 (shed first) to 9 (shed last)", HeaderPriority, v))
			return
		}
		priority = Priority(p)
	}
	timeout := s.opts.httpTimeout
	if v := r.Header.Get(HeaderTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			httpError(w, CodeBadRequest, fmt.Sprintf("kiev: %s: %q is not a positive duration such as 250ms or 2s", HeaderTimeout, v))
			return
		}
		timeout = d
	}
	var md Metadata
	for k, vs := range r.Header {
		if len(k) > len(HeaderMetaPrefix) && strings.EqualFold(k[:len(HeaderMetaPrefix)], HeaderMetaPrefix) && len(vs) > 0 {
			if md == nil {
				md = make(Metadata)
			}
			md[strings.ToLower(k[len(HeaderMetaPrefix):])] = vs[0]
		}
	}
	for _, k := range [...]string{"traceparent", "tracestate"} { // W3C Trace Context
		if v := r.Header.Get(k); v != "" {
			if md == nil {
				md = make(Metadata)
			}
			md[k] = v
		}
	}
	buf := transport.GetBuf(0)
	body := bytesBuffer{b: (*buf)[:0]}
	_, err = io.Copy(&body, http.MaxBytesReader(w, r.Body, s.opts.httpMaxBody))
	*buf = body.b
	if err != nil {
		transport.PutBuf(buf)
		if errors.As(err, new(*http.MaxBytesError)) {
			httpError(w, codeBodyTooLarge, fmt.Sprintf("kiev: the request body is over the %d-byte limit; send less, or raise WithHTTPMaxBody", s.opts.httpMaxBody))
			return
		}
		httpError(w, CodeBadRequest, "kiev: reading the request body: "+err.Error())
		return
	}
	if len(*buf) == 0 {
		*buf = append(*buf, "null"...)
	}

	if s.isClosed() {
		transport.PutBuf(buf)
		httpError(w, CodeShutdown, "kiev: the server is shutting down; retry on another server")
		return
	}
	// An HTTP connection is the caller's connection (FastCGI passes on
	// the caller's address and port): WithMaxConcurrentCalls holds for
	// it as for a TCP connection.
	if !s.httpCalls.take(r.RemoteAddr, s.opts.maxCalls) {
		transport.PutBuf(buf)
		code, msg := s.refuseAtLimit(m, "on this connection")
		httpError(w, code, msg)
		return
	}
	in := callHead{m: m, codec: codec.JSON, peer: httpAddr(r.RemoteAddr), tls: r.TLS, md: md, claimed: priority, deadline: time.Now().Add(timeout), body: buf}
	if m == s.unknown {
		in.asked = name
	}
	base := f.base
	if base == nil {
		base = r.Context()
	}
	hs := &httpSink{front: f, peer: r.RemoteAddr, end: make(chan struct{})}
	sc := s.makeCall(&in, base, hs)
	cancel := func() {
		sc.st.CallerGone.Store(true)
		sc.ctx.cancel(context.Canceled)
	}
	stop := context.AfterFunc(r.Context(), cancel)
	defer stop()
	if base != r.Context() && base.Done() != nil {
		stopBase := context.AfterFunc(base, func() { sc.ctx.cancel(base.Err()) })
		defer stopBase()
	}
	s.submit(sc, base)
	select {
	case <-hs.end:
	case <-r.Context().Done():
		return // the client left; the call ends on its own
	}
	if !hs.sent {
		// The handler ran past the deadline, so no reply was made.
		httpError(w, CodeDeadlineExceeded, fmt.Sprintf("kiev: %s ran past its deadline (%v)", m.name, timeout))
		return
	}
	if hs.code != CodeOK {
		httpError(w, hs.code, hs.msg)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(append(hs.body, '\n'))
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
	front httpFront
	peer  string     // the request's RemoteAddr, its count in Server.httpCalls
	mu    sync.Mutex // guards the fields below
	code  Code
	msg   string
	body  []byte
	sent  bool          // an answer was made
	end   chan struct{} // closed by done
}

// Reply, Fail, Done and Backlogged make an httpSink the transport.Sink of
// its call.
func (hs *httpSink) Reply(_ transport.Call, cd codec.Codec, v any) error {
	body, err := cd.Marshal(nil, v)
	if err != nil {
		return &transport.EncodeError{Err: err}
	}
	if max := hs.front.s.opts.maxFrame; len(body) > max {
		return fmt.Errorf("%d bytes, over the %d-byte limit; return less or raise WithMaxFrameSize", len(body), max)
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.sent, hs.code, hs.body = true, CodeOK, body
	return nil
}

func (hs *httpSink) Fail(_ transport.Call, code uint32, msg string, limited bool) error {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.sent, hs.code, hs.msg = true, Code(code), msg
	return nil
}

func (hs *httpSink) Done(transport.Call) {
	hs.front.s.httpCalls.put(hs.peer)
	close(hs.end)
}

// backlogged: an HTTP reply is written by its own request goroutine.
func (hs *httpSink) Backlogged() (int, bool) { return 0, false }

// peerCalls counts the calls in flight of each HTTP caller's connection,
// for WithMaxConcurrentCalls.
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

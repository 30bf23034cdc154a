package kiev

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/fcgi"
	"strings"
	"time"

	"github.com/kievrpc/kiev/health"
	"github.com/kievrpc/kiev/internal/connlimit"
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
// A server stream (a method that takes kiev.Out) is served as
// Server-Sent Events or as NDJSON, as the request's Accept asks
// (text/event-stream or application/x-ndjson), each message written and
// flushed as it is sent; it also takes GET with its args as JSON in the
// args parameter, as EventSource sends it, from a page of the server's
// own origin. See docs/streams.md for the events and lines. Client and
// bidirectional streams are refused with 501: call them with a kiev
// client.
//
// Errors are answered with a JSON body {"error": "...", "code": "..."},
// the code (Code.String: a name such as "NotFound", or the number of a
// handler's own code, such as "404") also in the Kiev-Error-Code header,
// and the status:
//
//	unknown service or method                  404
//	a method other than POST                   405 (Allow: POST; a server
//	                                           stream takes GET too)
//	a server stream asked for without Accept:  406
//	text/event-stream or application/x-ndjson
//	a server stream's GET from a page of       403
//	another origin
//	a client or bidirectional stream           501
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
	return s.http.Handler(nil)
}

// ServeFastCGI serves HTTPHandler as a FastCGI responder on l, so that a
// web server such as nginx reaches the services through fastcgi_pass. It
// returns ErrServerClosed after Shutdown or Close, which close l. Like
// Serve it retries temporary Accept errors (too many open files) with
// backoff.
//
// Its connections are bounded as FastCGILimits describes (see
// WithFastCGILimits): at most DefaultFastCGIMaxConns (256) are open at
// once, and the next wait in the kernel's backlog to be accepted; a
// connection whose records do not arrive within
// DefaultFastCGIHeaderTimeout (10s) is closed; and one that carries no
// byte either way for DefaultFastCGIIdleTimeout (5 min), once its
// requests' input is in, is closed too. So connections that send
// nothing, or dribble, cannot take the process's file descriptors from
// its RPC listeners, nor hold the FastCGI ones for long.
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
	// Close closes the limit listener, which ends an Accept waiting for a
	// slot, and l with it.
	ll := connlimit.NewListener(l, s.opts.fastCGI.MaxConns)
	s.listeners[ll] = struct{}{}
	s.mu.Unlock()
	s.startAdmin()
	defer s.doneServing()
	s.logServing(" FastCGI", l.Addr())
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ll)
		s.mu.Unlock()
		ll.Close()
	}()
	err := fcgi.Serve(fcgiListener{ll, s}, s.http.Handler(s.baseContext(l)))
	if s.isClosed() {
		return ErrServerClosed
	}
	return err
}

// FastCGILimits bounds the connections of Server.ServeFastCGI (see
// WithFastCGILimits). Every zero field means its default.
type FastCGILimits struct {
	// MaxConns bounds the FastCGI connections open at once (default
	// DefaultFastCGIMaxConns, 256). Connections past it wait in the
	// kernel's backlog, where they hold no file descriptor of the
	// process, and are accepted as others close: nginx opens a connection
	// per request unless fastcgi_keep_conn is on, so a burst past the cap
	// is served a moment later rather than refused with 502 Bad Gateway.
	// A connection that sends nothing holds its slot for HeaderTimeout at
	// most. Keep MaxConns above the requests nginx has in flight at once,
	// each open event stream among them, and, with fastcgi_keep_conn,
	// above the idle connections it keeps (its upstream's keepalive times
	// its worker_processes): ServeFastCGI does not close those to make
	// room, as nginx may be sending a request on one as it closes, and
	// does not send a POST again; so past the cap, a connection would
	// wait for nginx to close one, after its keepalive_timeout (60s).
	MaxConns int

	// HeaderTimeout is how long a FastCGI connection may take to send a
	// whole record (default DefaultFastCGIHeaderTimeout, 10s): its first
	// record from when it is accepted, each record from its first byte,
	// however slowly the rest dribble in, and, while a request's input is
	// coming, its next record from the last. A connection that misses it
	// is closed. A web server sends a request's records at once, but with
	// nginx's fastcgi_request_buffering off a request's body comes as its
	// client sends it: raise HeaderTimeout there above the pauses a
	// client's upload may make.
	HeaderTimeout time.Duration

	// IdleTimeout is how long a FastCGI connection may carry no byte
	// either way once its requests' input is in, while they run and after
	// they are answered, before it is closed (default
	// DefaultFastCGIIdleTimeout, 5 min). It is longer than nginx's
	// fastcgi_read_timeout and keepalive_timeout (60s each), so that
	// nginx gives up on a slow answer, or closes a connection it keeps
	// alive, first.
	IdleTimeout time.Duration
}

// Defaults for FastCGILimits.
const (
	DefaultFastCGIMaxConns      = 256
	DefaultFastCGIHeaderTimeout = 10 * time.Second
	DefaultFastCGIIdleTimeout   = 5 * time.Minute
)

func (f *FastCGILimits) fill() {
	if f.MaxConns <= 0 {
		f.MaxConns = DefaultFastCGIMaxConns
	}
	if f.HeaderTimeout <= 0 {
		f.HeaderTimeout = DefaultFastCGIHeaderTimeout
	}
	if f.IdleTimeout <= 0 {
		f.IdleTimeout = DefaultFastCGIIdleTimeout
	}
}

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
	f := l.s.opts.fastCGI
	return transport.NewFastCGIConn(nc, f.HeaderTimeout, f.IdleTimeout), nil
}

// httpCheck says whether a call of the method name may be made over HTTP
// by a caller with TLS state st: kiev's own services are not served over
// HTTP, but for Health; and a server whose WithTLS requires client
// certificates requires them of HTTP callers too.
func (s *Server) httpCheck(name string, st *tls.ConnectionState) (Code, string) {
	_, err := s.lookupCall([]byte(name))
	switch {
	case isBuiltin(name[:max(strings.LastIndexByte(name, '.'), 0)]) && !strings.HasPrefix(name, health.ServiceName+"."):
		return CodeNotFound, fmt.Sprintf("kiev: %s is not served over HTTP", name)
	case err != nil:
		return CodeNotFound, err.Error()
	}
	if s.requiresClientCerts() && !s.opts.certsOptional && !verifiedClient(st, s.opts.tls.ClientAuth) {
		return CodeUnauthenticated, "kiev: this server requires a client certificate (WithTLS); serve HTTPHandler from an http.Server whose TLSConfig has the same ClientAuth and ClientCAs, and call it over HTTPS with the client's certificate"
	}
	return 0, ""
}

// httpStreams reports whether the method name takes messages from the
// client and whether it sends them, for the HTTP front, which serves
// server streams only.
func (s *Server) httpStreams(name string) (in, out bool) {
	m, err := s.lookup([]byte(name))
	if err != nil {
		return false, false
	}
	return m.kind == ClientStream || m.kind == BidiStream, m.kind == ServerStream || m.kind == BidiStream
}

// verifiedClient reports whether st, an HTTP request's TLS state, holds
// the client certificate that a server with ClientAuth ca requires.
func verifiedClient(st *tls.ConnectionState, ca tls.ClientAuthType) bool {
	if st == nil || len(st.PeerCertificates) == 0 {
		return false
	}
	return ca != tls.RequireAndVerifyClientCert || len(st.VerifiedChains) > 0
}

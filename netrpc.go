package kiev

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/kievrpc/kiev/registry"
)

// This file holds what net/rpc programs use beyond Register, Dial and Call:
// serving one connection (ServeConn), net/rpc's codec seam (ServeCodec,
// ServeRequest, NewClientWithCodec, in netrpc_codec.go), clients over a connection made
// elsewhere (NewClient), and net/rpc's HTTP transport (HandleHTTP,
// DialHTTP). Each runs calls through the same scheduler, interceptors and
// metrics as a call over a listener.

// Defaults of HandleHTTP, as in net/rpc.
const (
	DefaultRPCPath   = "/_goRPC_"
	DefaultDebugPath = "/debug/rpc"
)

// connected is the status line net/rpc's HTTP transport answers a CONNECT
// with; kiev's is the same, so that tools that look for it find it.
const connected = "200 Connected to Go RPC"

// Accept serves l, as Serve does, and logs the error that ends it. It is
// net/rpc's Accept, which a program stops by closing l: that, like
// closing the server, is logged at Debug level only. Serve returns the
// error instead.
func (s *Server) Accept(l net.Listener) {
	err := s.Serve(l)
	switch {
	case err == nil:
	case errors.Is(err, ErrServerClosed), errors.Is(err, net.ErrClosed):
		s.opts.logger.Debug("kiev: Accept: serving ended", "addr", l.Addr().String(), "err", err)
	default:
		s.opts.logger.Error("kiev: Accept: serving ended", "addr", l.Addr().String(), "err", err)
	}
}

// ServeConn serves the kiev protocol on one connection, made elsewhere,
// and returns when the client hangs up, as net/rpc's ServeConn does. A
// client that half-closes the connection (CloseWrite) still gets the
// replies of its calls in flight. Client with NewClient on the other end.
//
// conn is best a net.Conn: kiev then cuts a peer that stops reading or
// falls silent, by its deadlines (see WithHeartbeat). A plain
// io.ReadWriteCloser has no deadlines, so such a peer holds the
// connection until it or the server closes it; its Close must end a Read
// in progress.
func (s *Server) ServeConn(conn io.ReadWriteCloser) {
	c, ok := s.adopt(asNetConn(conn), context.Background())
	if c == nil {
		if !ok {
			conn.Close()
		}
		return
	}
	s.run(c)
}

// asNetConn returns conn as a net.Conn, wrapping it if it is not one.
func asNetConn(conn io.ReadWriteCloser) net.Conn {
	if nc, ok := conn.(net.Conn); ok {
		return nc
	}
	return rwcConn{conn}
}

// rwcConn is a net.Conn over an io.ReadWriteCloser without deadlines.
type rwcConn struct{ io.ReadWriteCloser }

func (rwcConn) LocalAddr() net.Addr                { return connAddr("conn") }
func (rwcConn) RemoteAddr() net.Addr               { return connAddr("conn") }
func (rwcConn) SetDeadline(t time.Time) error      { return nil }
func (rwcConn) SetReadDeadline(t time.Time) error  { return nil }
func (rwcConn) SetWriteDeadline(t time.Time) error { return nil }

// connAddr names the peer of a connection kiev did not dial or accept.
type connAddr string

func (a connAddr) Network() string { return "conn" }
func (a connAddr) String() string  { return string(a) }

// NewClient returns a Client that calls the kiev server on the other end of
// conn, a connection made elsewhere (a pipe, a tunnel, a socket accepted
// rather than dialed), as net/rpc's NewClient does. It returns at once:
// calls made before the server has answered the handshake wait for it,
// and fail with its error if it fails. The client does not redial: once
// conn fails, its calls fail with ErrShutdown, and Close closes conn. As
// for ServeConn, conn is best a net.Conn; a plain io.ReadWriteCloser's
// Close must end a Read in progress, or Close waits for that Read to end.
func NewClient(conn io.ReadWriteCloser, opts ...DialOption) *Client {
	nc := asNetConn(conn)
	c := &Client{target: "conn " + nc.RemoteAddr().String()}
	for _, o := range opts {
		o.applyDial(&c.opts)
	}
	c.opts.fill()
	c.budget = newRetryBudget(c.opts.retry)
	c.invoke = chainClient(c.attempts, c.opts.interceptors)
	ep := newEndpoint(c, registry.Instance{Network: nc.RemoteAddr().Network(), Address: nc.RemoteAddr().String()})
	c.single = ep
	c.direct = len(c.opts.interceptors) == 0 && c.budget.p.MaxAttempts == 1 && ep.throttle == nil
	c.noRedial = true
	t := startConn(ep, nc)
	ep.mu.Lock()
	ep.setTransport(t)
	ep.mu.Unlock()
	trackClient(c)
	return c
}

// HandleHTTP serves the kiev protocol over HTTP CONNECT at rpcPath, for
// DialHTTP, and the server's status page at debugPath, on
// http.DefaultServeMux, as net/rpc's HandleHTTP does. The status page,
// metrics and the rest of AdminHandler are under debugPath + "/".
func (s *Server) HandleHTTP(rpcPath, debugPath string) {
	http.Handle(rpcPath, connectHandler{s})
	admin := s.AdminHandler()
	http.Handle(debugPath+"/", http.StripPrefix(debugPath, admin))
	http.Handle(debugPath, http.RedirectHandler(debugPath+"/", http.StatusMovedPermanently))
}

// ConnectHandler returns the http.Handler HandleHTTP serves at its
// rpcPath, for a mux of your own: it takes an HTTP CONNECT from DialHTTP
// and serves the kiev protocol on the connection.
func (s *Server) ConnectHandler() http.Handler { return connectHandler{s} }

type connectHandler struct{ s *Server }

func (h connectHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Allow", http.MethodConnect)
		w.WriteHeader(http.StatusMethodNotAllowed)
		io.WriteString(w, "405 kiev: this path takes CONNECT, from kiev.DialHTTP (net/rpc's HTTP transport); for JSON calls over HTTP, mount Server.HTTPHandler\n")
		return
	}
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "kiev: this HTTP server cannot hand over its connection: "+err.Error(), http.StatusInternalServerError)
		return
	}
	_ = conn.SetDeadline(time.Time{}) // the HTTP server's timeouts are not the protocol's
	if _, err := io.WriteString(conn, "HTTP/1.0 "+connected+"\n\n"); err != nil {
		conn.Close()
		return
	}
	if rw.Reader.Buffered() > 0 { // the client sent its preface without waiting
		h.s.ServeConn(bufferedConn{conn, rw.Reader})
		return
	}
	h.s.ServeConn(conn)
}

// bufferedConn is a net.Conn whose first bytes are buffered in r.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// DialHTTP connects to a kiev server at address that serves HandleHTTP's
// default path, over an HTTP CONNECT, as net/rpc's DialHTTP does. network
// is "tcp" (or "tcp4", "tcp6") or "unix". The client redials through the
// same CONNECT when the connection breaks, as Dial's does.
func DialHTTP(network, address string, opts ...DialOption) (*Client, error) {
	return DialHTTPPath(network, address, DefaultRPCPath, opts...)
}

// DialHTTPPath is DialHTTP for a server that serves the protocol at path.
func DialHTTPPath(network, address, path string, opts ...DialOption) (*Client, error) {
	var target string
	switch network {
	case "tcp", "tcp4", "tcp6":
		target = "tcp://" + address
	case "unix":
		target = "unix://" + address
	default:
		return nil, fmt.Errorf("kiev: DialHTTP: network %q is not supported; use tcp or unix", network)
	}
	connect := dialOption(func(o *dialOptions) {
		base := o.dialer
		if base == nil {
			d := &net.Dialer{KeepAlive: -1}
			base = d.DialContext
		}
		o.dialer = func(ctx context.Context, netw, addr string) (net.Conn, error) {
			nc, err := base(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if err := httpConnect(ctx, nc, path); err != nil {
				nc.Close()
				return nil, fmt.Errorf("kiev: DialHTTP %s%s: %w", address, path, err)
			}
			return nc, nil
		}
	})
	return Dial(target, append(opts[:len(opts):len(opts)], connect)...)
}

// httpConnect asks the HTTP server on nc for the protocol at path.
func httpConnect(ctx context.Context, nc net.Conn, path string) error {
	deadline, _ := ctx.Deadline()
	_ = nc.SetDeadline(deadline)
	defer nc.SetDeadline(time.Time{})
	if _, err := io.WriteString(nc, "CONNECT "+path+" HTTP/1.0\n\n"); err != nil {
		return err
	}
	// The server sends nothing after its answer until it has the
	// client's preface, so the reader can take no byte of the protocol.
	resp, err := http.ReadResponse(bufio.NewReader(nc), &http.Request{Method: http.MethodConnect})
	if err != nil {
		return fmt.Errorf("reading the answer to CONNECT: %w", err)
	}
	resp.Body.Close()
	if resp.Status != connected {
		return fmt.Errorf("the server answered CONNECT with %q, not %q: it serves no kiev protocol there (Server.HandleHTTP)", resp.Status, connected)
	}
	return nil
}

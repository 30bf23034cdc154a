package kiev

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/rpc"
	"reflect"
	"sync"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/wire"
	"github.com/kievrpc/kiev/registry"
)

// This file holds what net/rpc programs use beyond Register, Dial and Call:
// serving one connection (ServeConn), net/rpc's codec seam (ServeCodec,
// ServeRequest, NewClientWithCodec), clients over a connection made
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
	cc := startClientConn(ep, nc)
	ep.mu.Lock()
	ep.cc = cc
	ep.live.Store(cc)
	ep.mu.Unlock()
	trackClient(c)
	return c
}

// startClientConn starts a connection on nc without waiting for the
// handshake: the preface is the first thing the writer sends, then the
// client's Settings if it has compression, calls queue behind them, and
// the reader checks the server's preface before any reply.
func startClientConn(ep *endpoint, nc net.Conn) *clientConn {
	cc := newConnOn(ep, nc)
	_ = cc.link.send(wire.AppendPreface(nil, wire.Version))
	if s := ep.c.opts.compress.settings; s != nil {
		_ = cc.link.send(s)
	}
	cc.run(func() {
		r := cc.reader()
		if err := prefaceError(wire.ReadPreface(r.Buffered())); err != nil {
			cc.fail(fmt.Errorf("kiev: handshake: %w", err))
			return
		}
		cc.readLoop(r)
	})
	return cc
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

// ServeCodec serves calls that c reads, as net/rpc's ServeCodec does, until
// c fails to read a request header; then it waits for the calls in flight
// to reply, and closes c. With net/rpc/jsonrpc's codec, JSON-RPC 1.0
// clients call the server:
//
//	go srv.ServeCodec(jsonrpc.NewServerCodec(conn))
//
// Calls read from c pass the server's scheduler, interceptors and metrics
// as any other, at DefaultPriority and without a deadline, which net/rpc's
// codecs do not carry. Close and Shutdown close c.
func (s *Server) ServeCodec(c rpc.ServerCodec) {
	cc := newCodecConn(s, c)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return
	}
	s.codecConns[cc] = struct{}{}
	s.connWG.Add(1)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.codecConns, cc)
		s.mu.Unlock()
		s.connWG.Done()
	}()
	for {
		_, err := cc.serveOne(nil)
		if errors.Is(err, errCodecRead) {
			break
		}
	}
	cc.drain()
	<-cc.closed
}

// ServeRequest serves one call that c reads, as net/rpc's ServeRequest
// does, and returns once it has replied. It returns the error of reading
// the call, if any; a call that cannot be read whole is answered with
// that error too. It does not close c.
func (s *Server) ServeRequest(c rpc.ServerCodec) error {
	cc := newCodecConn(s, c)
	end := make(chan struct{})
	ran, err := cc.serveOne(end)
	if ran {
		<-end
	}
	if errors.Is(err, errCodecRead) {
		return errors.Unwrap(err)
	}
	return err
}

// errCodecRead marks a failure to read a request header: the codec's
// stream is over.
var errCodecRead = errors.New("kiev: reading a request header")

// codecConn serves the calls of one net/rpc ServerCodec.
type codecConn struct {
	srv     *Server
	codec   rpc.ServerCodec
	sending sync.Mutex // WriteResponse is not safe for concurrent use

	mu       sync.Mutex
	calls    int  // in flight
	draining bool // close the codec once no call is in flight
	once     sync.Once
	closed   chan struct{} // closed with the codec
}

func newCodecConn(s *Server, c rpc.ServerCodec) *codecConn {
	return &codecConn{srv: s, codec: c, closed: make(chan struct{})}
}

// close closes the codec at once.
func (cc *codecConn) close() {
	cc.once.Do(func() {
		cc.codec.Close()
		close(cc.closed)
	})
}

// drain closes the codec once the calls in flight have replied.
func (cc *codecConn) drain() {
	cc.mu.Lock()
	cc.draining = true
	idle := cc.calls == 0
	cc.mu.Unlock()
	if idle {
		cc.close()
	}
}

// finish counts a call's end.
func (cc *codecConn) finish() {
	cc.mu.Lock()
	cc.calls--
	idle := cc.draining && cc.calls == 0
	cc.mu.Unlock()
	if idle {
		cc.close()
	}
}

// serveOne reads one call and starts it; end, if not nil, is closed when
// it has replied. It reports whether the call was started, and the error
// of reading it: errCodecRead wrapping the codec's error when the header
// could not be read, or the error the call was answered with.
func (cc *codecConn) serveOne(end chan struct{}) (bool, error) {
	s := cc.srv
	var h rpc.Request
	if err := cc.codec.ReadRequestHeader(&h); err != nil {
		if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, net.ErrClosed) {
			s.warn("kiev: ServeCodec: reading a request failed; ending", "err", err)
		}
		return false, fmt.Errorf("%w: %w", errCodecRead, err)
	}
	m, err := s.lookup([]byte(h.ServiceMethod))
	if err != nil {
		_ = cc.codec.ReadRequestBody(nil) // discard it
		cc.respond(h.ServiceMethod, h.Seq, nil, err.Error())
		return false, err
	}
	argp := m.newArg()
	if err := cc.codec.ReadRequestBody(argp.Interface()); err != nil {
		err = fmt.Errorf("kiev: reading the args of %s (%T): %w", m.name, argp.Interface(), err)
		cc.respond(h.ServiceMethod, h.Seq, nil, err.Error())
		return false, err
	}
	if s.isClosed() {
		cc.respond(h.ServiceMethod, h.Seq, nil, "kiev: server is shutting down; retry on another server")
		return false, nil
	}
	sink := &codecCall{conn: cc, method: h.ServiceMethod, seq: h.Seq, arg: argp, end: end}
	in := callHead{m: m, codec: sink, id: h.Seq, peer: connAddr("net/rpc codec"), claimed: DefaultPriority, body: getBuf(0)}
	sc := s.makeCall(&in, context.Background(), sink)
	cc.mu.Lock()
	cc.calls++
	cc.mu.Unlock()
	s.submit(sc, sc.ctx.parent)
	return true, nil
}

// respond writes one response; errMsg non-empty makes it an error.
func (cc *codecConn) respond(method string, seq uint64, reply any, errMsg string) {
	if errMsg != "" {
		reply = struct{}{} // as net/rpc sends with an error
	}
	cc.sending.Lock()
	err := cc.codec.WriteResponse(&rpc.Response{ServiceMethod: method, Seq: seq, Error: errMsg}, reply)
	cc.sending.Unlock()
	if err != nil {
		cc.srv.warn("kiev: ServeCodec: writing a response failed", "method", method, "err", err)
	}
}

// for WriteResponse.
type codecCall struct {
	conn   *codecConn
	method string
	seq    uint64
	arg    reflect.Value // a pointer to the decoded args
	end    chan struct{} // closed when the call is done; nil for ServeCodec
}

func (*codecCall) Name() string { return "net/rpc" }

// Marshal is not used: the sink hands the reply to the ServerCodec.
func (c *codecCall) Marshal(b []byte, v any) ([]byte, error) { return b, nil }

func (c *codecCall) Unmarshal(_ []byte, v any) error {
	reflect.ValueOf(v).Elem().Set(c.arg.Elem())
	return nil
}

// reply, fail, done and backlogged make a codecCall the callSink of its
// call: the ServerCodec encodes the reply value itself.
func (c *codecCall) reply(_ *serverCall, _ codec.Codec, v any) error {
	c.conn.respond(c.method, c.seq, v, "")
	return nil
}

func (c *codecCall) fail(_ *serverCall, _ Code, msg string, _ bool) error {
	c.conn.respond(c.method, c.seq, nil, msg)
	return nil
}

func (c *codecCall) done(*serverCall) {
	c.conn.finish()
	if c.end != nil {
		close(c.end)
	}
}

func (c *codecCall) backlogged() (int, bool) { return 0, false }

// NewClientWithCodec returns a Client whose calls c writes and reads, as
// net/rpc's NewClientWithCodec does: with net/rpc/jsonrpc's codec, a kiev
// client calls a JSON-RPC 1.0 server, or a net/rpc server on jsonrpc.
//
//	c := kiev.NewClientWithCodec(jsonrpc.NewClientCodec(conn))
//
// The calls pass the client's interceptors; a call's context ends its
// wait, but net/rpc's codecs carry no deadline, priority, metadata or
// cancellation to the server. The client does not redial or retry. Close
// closes c and does not wait for a read the codec does not end.
func NewClientWithCodec(c rpc.ClientCodec, opts ...DialOption) *Client {
	cl := &Client{target: "net/rpc codec"}
	for _, o := range opts {
		o.applyDial(&cl.opts)
	}
	cl.opts.fill()
	cl.budget = newRetryBudget(cl.opts.retry)
	cl.rpcc = &codecClient{c: cl, codec: c, pending: make(map[uint64]*Call)}
	cl.invoke = chainClient(cl.rpcc.invoke, cl.opts.interceptors)
	go cl.rpcc.readLoop()
	trackClient(cl)
	return cl
}

// codecClient sends a Client's calls through a net/rpc ClientCodec.
type codecClient struct {
	c       *Client
	codec   rpc.ClientCodec
	sending sync.Mutex // WriteRequest is not safe for concurrent use

	mu      sync.Mutex
	seq     uint64
	pending map[uint64]*Call
	err     error // why no call can be made any more
	once    sync.Once
}

// invoke is the Invoker beneath the client's interceptors.
func (cc *codecClient) invoke(ctx context.Context, call *Call) error {
	start := time.Now()
	err := cc.roundTrip(ctx, call)
	end := time.Now()
	cc.c.stats.record(end, end.Sub(start), errCode(err))
	return err
}

func (cc *codecClient) roundTrip(ctx context.Context, call *Call) error {
	if err := ctx.Err(); err != nil {
		return &callError{call.ServiceMethod, err}
	}
	signal := call.signal
	cc.mu.Lock()
	if cc.err != nil {
		err := cc.err
		cc.mu.Unlock()
		return &callError{call.ServiceMethod, err}
	}
	cc.seq++
	seq := cc.seq
	cc.pending[seq] = call
	cc.mu.Unlock()

	cc.sending.Lock()
	err := cc.codec.WriteRequest(&rpc.Request{ServiceMethod: call.ServiceMethod, Seq: seq}, call.Args)
	cc.sending.Unlock()
	if err != nil {
		if cc.take(seq) != nil {
			return &callError{call.ServiceMethod, err}
		}
		<-signal // the reader has it already
		return call.Error
	}
	select {
	case <-signal:
		return call.Error
	case <-ctx.Done():
		if cc.take(seq) != nil {
			return &callError{call.ServiceMethod, ctx.Err()}
		}
		<-signal
		return call.Error
	}
}

func (cc *codecClient) take(seq uint64) *Call {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	call := cc.pending[seq]
	delete(cc.pending, seq)
	return call
}

// readLoop reads replies until the codec fails, then fails every pending
// call.
func (cc *codecClient) readLoop() {
	var err error
	for {
		var resp rpc.Response
		if err = cc.codec.ReadResponseHeader(&resp); err != nil {
			break
		}
		call := cc.take(resp.Seq)
		switch {
		case call == nil:
			err = cc.codec.ReadResponseBody(nil)
		case resp.Error != "":
			call.Error = &ServerError{Code: CodeApplication, Message: resp.Error}
			err = cc.codec.ReadResponseBody(nil)
		default:
			if err = cc.codec.ReadResponseBody(call.Reply); err != nil {
				call.Error = &callError{call.ServiceMethod, fmt.Errorf("decoding reply into %T: %w", call.Reply, err)}
			}
		}
		if call != nil {
			call.signal <- call
		}
		if err != nil {
			break
		}
	}
	cc.fail(fmt.Errorf("%w: reading a reply: %w", ErrShutdown, err))
}

// fail makes every pending and later call fail with err.
func (cc *codecClient) fail(err error) {
	cc.mu.Lock()
	if cc.err == nil {
		cc.err = err
	}
	pending := cc.pending
	cc.pending = map[uint64]*Call{}
	err = cc.err
	cc.mu.Unlock()
	for _, call := range pending {
		call.Error = &callError{call.ServiceMethod, err}
		call.signal <- call
	}
}

// close closes the codec; calls fail with ErrShutdown.
func (cc *codecClient) close() {
	cc.fail(errClientClosed)
	cc.once.Do(func() { cc.codec.Close() })
}

// The package-level forms serve DefaultServer, as net/rpc's serve its
// DefaultServer.

// Accept serves DefaultServer on l; see Server.Accept.
func Accept(l net.Listener) { DefaultServer.Accept(l) }

// ServeConn serves DefaultServer on conn; see Server.ServeConn.
func ServeConn(conn io.ReadWriteCloser) { DefaultServer.ServeConn(conn) }

// ServeCodec serves DefaultServer's calls read by c; see Server.ServeCodec.
func ServeCodec(c rpc.ServerCodec) { DefaultServer.ServeCodec(c) }

// ServeRequest serves one call read by c on DefaultServer; see
// Server.ServeRequest.
func ServeRequest(c rpc.ServerCodec) error { return DefaultServer.ServeRequest(c) }

// HandleHTTP serves DefaultServer at DefaultRPCPath and its status page at
// DefaultDebugPath on http.DefaultServeMux; see Server.HandleHTTP.
func HandleHTTP() { DefaultServer.HandleHTTP(DefaultRPCPath, DefaultDebugPath) }

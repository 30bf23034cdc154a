package kiev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/rpc"
	"reflect"
	"sync"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/transport"
	"github.com/kievrpc/kiev/shed"
)

// The codec seam of net/rpc: a Server serves calls that a net/rpc
// ServerCodec reads, and a Client makes calls through a ClientCodec (see
// netrpc.go for the rest of what net/rpc programs use).

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

	mu       sync.Mutex // guards the fields below
	calls    int        // in flight
	draining bool       // close the codec once no call is in flight
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
	in := callHead{m: m, codec: sink, id: h.Seq, peer: connAddr("net/rpc codec"), claimed: DefaultPriority, body: transport.GetBuf(0)}
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

// Reply, Fail, Done and Backlogged make a codecCall the transport.Sink of
// its call: the ServerCodec encodes the reply value itself.
func (c *codecCall) Reply(_ transport.Call, _ codec.Codec, v any) error {
	c.conn.respond(c.method, c.seq, v, "")
	return nil
}

func (c *codecCall) Fail(_ transport.Call, _ Code, msg string, _ bool) error {
	c.conn.respond(c.method, c.seq, nil, msg)
	return nil
}

func (c *codecCall) Done(transport.Call) {
	c.conn.finish()
	if c.end != nil {
		close(c.end)
	}
}

func (c *codecCall) Backlogged() (int, bool) { return 0, false }
func (c *codecCall) Flow() *shed.Flow        { return nil }

// Stream: a net/rpc codec carries no streams.
func (c *codecCall) Stream(transport.Call) transport.HandlerStream { return nil }

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
	cl.rpcc = &codecClient{c: cl, codec: c}
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

	mu      sync.Mutex               // guards the fields below
	seq     uint64                   // the last call's
	pending transport.Pending[*Call] // calls awaiting their reply; why no call can be made any more
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
	seq := cc.seq + 1
	if err := cc.pending.Add(seq, call); err != nil {
		cc.mu.Unlock()
		return &callError{call.ServiceMethod, err}
	}
	cc.seq = seq
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
	call, _, _ := cc.pending.Take(seq) // the client never retires: no retired error
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
	pending, _ := cc.pending.Fail(err) // none, if it had failed already
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

package kiev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"

	"github.com/kievrpc/kiev/internal/transport"
)

// connTransport is a Client's connection to one server, over TCP, TLS or
// a Unix socket: a transport.ClientConn, which moves its calls' frames and
// matches Responses to calls, and this package's side of it, which
// encodes their Requests, decodes their Responses, and says what the
// connection's failure means to them. It keeps what the client and the
// server negotiate on the connection: the compression the server's
// Settings allow.
//
// Its handler methods (Reply, Settings, GoAway, Failure, Lost) are called
// by the connection's goroutines, which start before conn is set: they
// do not use conn.
type connTransport struct {
	ep   *endpoint
	conn *transport.ClientConn[*Call]
	// From the server's Settings: the algorithms it accepts (an algSet),
	// and the first of the client's among them (a Compression).
	peerAccepts atomic.Uint32
	requestAlg  atomic.Uint32
}

// connConfig is how ep's connections behave.
func (ep *endpoint) connConfig() transport.ConnConfig {
	o := &ep.c.opts
	return transport.ConnConfig{
		HeartbeatInterval: o.heartbeatInterval, HeartbeatTimeout: o.heartbeatTimeout, MaxFrame: o.maxFrame,
		Settings:     o.compress.settings,
		Goroutines:   &ep.c.wg,
		StreamBudget: o.streamBudget,
	}
}

// dialConn handshakes on nc, bounded by ctx, and starts the connection.
func dialConn(ctx context.Context, ep *endpoint, nc net.Conn) (*connTransport, error) {
	t := &connTransport{ep: ep}
	cc, err := transport.DialConn[*Call](ctx, nc, ep.connConfig(), t)
	if err != nil {
		return nil, err
	}
	t.conn = cc
	return t, nil
}

// startConn starts a connection on nc without waiting for the handshake
// (see transport.StartConn), for NewClient.
func startConn(ep *endpoint, nc net.Conn) *connTransport {
	t := &connTransport{ep: ep}
	t.conn = transport.StartConn[*Call](nc, ep.connConfig(), t)
	return t
}

func (t *connTransport) usable() bool    { return !t.conn.Dead() }
func (t *connTransport) connected() bool { return !t.conn.Dead() && !t.conn.Draining() }
func (t *connTransport) failure() error  { return t.conn.Err() }

func (t *connTransport) close(err error, graceful bool) {
	if graceful {
		t.conn.CloseWhenIdle(err)
	} else {
		t.conn.Close(err)
	}
}

// send encodes call as a Request and queues it. For an async call it
// first installs the watch that abandons the call when ctx ends.
func (t *connTransport) send(ctx context.Context, call *Call, async bool) error {
	o := &t.ep.c.opts
	id := t.conn.NextID()
	buf := transport.GetBuf(0)
	defer transport.PutBuf(buf)
	deadline, _ := ctx.Deadline()
	var rq transport.Request
	request(&rq, ctx, deadline, call)
	alg, least, ask := t.compression(ctx)
	rq.Compress, rq.Least, rq.ReplyAsk = uint8(alg), least, ask
	b, err := transport.AppendRequest((*buf)[:0], id, &rq, o.maxFrame)
	*buf = b
	if err != nil {
		return err
	}
	call.id = id
	// The watch is installed before the call is pending, so that it is
	// there when the call completes. It may run before the call is in,
	// find nothing to abandon, and leave the call pending: the check
	// after the write sees that ctx ended.
	watch := async && ctx.Done() != nil
	if watch {
		call.stop = context.AfterFunc(ctx, func() { t.abandoned(ctx, call) })
	}
	alone, err := t.conn.Add(id, call)
	if err != nil {
		if errors.Is(err, transport.ErrDraining) {
			err = fmt.Errorf("%w: the server at %s is draining; retry on a new connection", ErrShutdown, t.ep.inst.Address)
		}
		return notSent{err}
	}
	if err := t.conn.Write(id, b, alone); err != nil {
		return &connError{t.ep.inst.Address, err}
	}
	if watch && ctx.Err() != nil {
		t.abandoned(ctx, call)
	}
	return nil
}

// abandoned ends call, sent async, as its ctx ended, unless it has ended
// already.
func (t *connTransport) abandoned(ctx context.Context, call *Call) {
	if t.conn.Abandon(call.id, ctx.Err()) {
		call.Error = &callError{call.ServiceMethod, ctx.Err()}
		call.stop = nil
		call.complete()
	}
}

// wait waits for the end of call, or of ctx, which abandons it.
func (t *connTransport) wait(ctx context.Context, call *Call) error {
	done := ctx.Done()
	if done == nil { // a context that never ends: skip the select's cost
		<-call.signal
		return t.received(call)
	}
	select {
	case <-call.signal:
		return t.received(call)
	case <-done:
		if t.conn.Abandon(call.id, ctx.Err()) {
			return &callError{call.ServiceMethod, ctx.Err()}
		}
		<-call.signal // the reply is being handed over right now
		return t.received(call)
	}
}

// compression says how to compress a Request made with ctx: with alg
// (NoCompression: not at all) from least bytes of body up, and the value
// of its ReplyCompression field, if it asks for one. Without
// WithCallCompression, that is what the server's Settings allow of the
// client's WithCompression; with it, what it says, if the server knows
// compression, and its algorithm if the server accepts it.
func (t *connTransport) compression(ctx context.Context) (alg Compression, least int, ask []byte) {
	peer := transport.AlgSet(t.peerAccepts.Load())
	if peer == 0 { // the server compresses nothing; most likely, neither do we
		return NoCompression, 0, nil
	}
	alg, least = Compression(t.requestAlg.Load()), t.ep.c.opts.compress.threshold
	if c, ok := callCompression(ctx); ok && (c == NoCompression || peer.Has(uint8(c))) {
		return c, 0, replyAsks[c : c+1]
	}
	return alg, least, nil
}

// Reply decodes a Response into its call, and completes it; or, for a
// large or compressed reply, hands a copy of the body over to be decoded
// off the reader: to the goroutine that waits for the call (wait), or,
// for a call sent by Client.Go with no goroutine of its own (a client
// without retries, throttle or interceptors), to a new one.
func (t *connTransport) Reply(call *Call, r *transport.Response) {
	switch {
	case !handOver(call, r):
		call.Error = decodeReply(call, r, &t.ep.c.opts.connOptions)
	case call.signal == nil:
		go func() {
			_ = t.received(call)
			call.complete()
		}()
		return
	}
	call.complete()
}

// received returns the error of a call its caller has received: it
// decodes the reply first if Reply handed it over.
func (t *connTransport) received(call *Call) error {
	return decodeHandedOver(call, &t.ep.c.opts.connOptions)
}

// Settings takes in the server's Settings.
func (t *connTransport) Settings(peer transport.AlgSet) {
	t.requestAlg.Store(uint32(t.ep.c.opts.compress.c.First(peer)))
	t.peerAccepts.Store(uint32(peer))
}

// GoAway takes the endpoint out of balancing while its server drains.
func (t *connTransport) GoAway() { t.ep.goAway() }

// Failure is the error the calls of a connection that died of cause fail
// with: one that matches ErrShutdown and carries the cause.
func (t *connTransport) Failure(cause error, draining bool) error {
	switch {
	case errors.Is(cause, ErrShutdown):
		return cause
	case draining && errors.Is(cause, io.EOF):
		return fmt.Errorf("%w: the server at %s shut down gracefully and closed the connection", ErrShutdown, t.ep.inst.Address)
	}
	return &connError{t.ep.inst.Address, cause}
}

// Lost logs the connection's end, tells the endpoint, and fails the calls
// that were pending: as not sent those the server said it never read,
// which the client then retries as its RetryPolicy allows; the others
// were sent, and their outcome is lost. The log line and the client's
// counts tell the two apart.
func (t *connTransport) Lost(l transport.Loss[*Call]) {
	ep := t.ep
	var unsent int
	for id := range l.Calls {
		if l.Unread(id) {
			unsent++
		}
	}
	failed := len(l.Calls) - unsent
	switch {
	case errors.Is(l.Cause, ErrShutdown): // the client closed it
	case l.Draining && errors.Is(l.Cause, io.EOF):
		ep.c.connEnded.add(unsent, failed)
		ep.c.opts.logger.Info("kiev: server closed the connection after draining", "addr", ep.inst.Address, "unsent_calls", unsent, "failed_calls", failed)
	default:
		ep.c.connEnded.add(unsent, failed)
		ep.c.opts.logger.Warn("kiev: connection lost", "addr", ep.inst.Address, "err", l.Cause, "unsent_calls", unsent, "failed_calls", failed)
	}
	ep.lost(l.Cause, l.Draining)
	for id, call := range l.Calls {
		if l.Unread(id) {
			call.Error = notSent{&callError{call.ServiceMethod, l.Err}}
		} else {
			call.Error = &callError{call.ServiceMethod, l.Err}
		}
		call.complete()
	}
}

// connEndCounts counts the calls pending on a Client's connections as
// they ended, closed by their server after draining or lost: unsent, those
// the server said it never read, which fail as not sent and are retried
// as the RetryPolicy allows, and failed, those sent whose outcome was
// lost, which fail unless the policy retries their method as idempotent.
type connEndCounts struct{ unsent, failed atomic.Int64 }

func (n *connEndCounts) add(unsent, failed int) {
	n.unsent.Add(int64(unsent))
	n.failed.Add(int64(failed))
}

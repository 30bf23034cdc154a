package kiev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/internal/transport"
	"github.com/kievrpc/kiev/internal/wire"
)

// clientConn is one connection of a Client. It owns two goroutines: the
// reader, which matches replies to calls by id and decodes them, and the
// link's writer.
type clientConn struct {
	c      *Client
	ep     *endpoint
	nc     net.Conn
	link   *transport.Link
	nextID atomic.Uint64
	dead   atomic.Bool
	// From the server's Settings: the algorithms it accepts (an algSet),
	// and the first of the client's among them (a Compression).
	peerAccepts atomic.Uint32
	requestAlg  atomic.Uint32

	draining atomic.Bool   // the server sent GoAway
	ended    atomic.Bool   // a last GoAway said which Requests the server read
	lastRead atomic.Uint64 // the highest Request id it read, every one answered

	mu      sync.Mutex               // guards the field below
	pending transport.Pending[*Call] // calls awaiting their Response; why the connection died or retires
}

// newClientConn handshakes on nc and starts the connection's goroutines.
func newClientConn(ctx context.Context, ep *endpoint, nc net.Conn) (*clientConn, error) {
	deadline, _ := ctx.Deadline()
	_ = nc.SetDeadline(deadline)
	if _, err := nc.Write(wire.AppendPreface(nil, wire.Version)); err != nil {
		return nil, err
	}
	cc := newConnOn(ep, nc)
	r := cc.reader()
	if err := prefaceError(wire.ReadPreface(r.Buffered())); err != nil {
		return nil, fmt.Errorf("%s: %w", ep.inst.Address, err)
	}
	if s := ep.c.opts.compress.settings; s != nil {
		if _, err := nc.Write(s); err != nil {
			return nil, err
		}
	}
	_ = nc.SetDeadline(time.Time{})
	cc.run(func() { cc.readLoop(r) })
	return cc, nil
}

// newConnOn makes the connection of ep on nc, not yet running.
func newConnOn(ep *endpoint, nc net.Conn) *clientConn {
	cc := &clientConn{c: ep.c, ep: ep, nc: nc}
	o := &ep.c.opts.connOptions
	cc.link = transport.NewLink(nc, transport.Config{
		HeartbeatInterval: o.heartbeatInterval, HeartbeatTimeout: o.heartbeatTimeout, MaxFrame: o.maxFrame,
		Blocking: true, // a caller waits for room
		Closed:   ErrShutdown,
		OnDead:   cc.fail,
	})
	return cc
}

// reader returns the frame reader of cc's socket.
func (cc *clientConn) reader() *wire.Reader {
	return wire.NewReader(cc.link.Reader(cc.nc), transport.ReadBufSize, cc.c.opts.maxFrame)
}

// run starts cc's writer, and its reader, read.
func (cc *clientConn) run(read func()) {
	cc.c.wg.Add(2)
	go func() {
		defer cc.c.wg.Done()
		cc.link.Run()
	}()
	go func() {
		defer cc.c.wg.Done()
		read()
	}()
}

// prefaceError says what is wrong with the server's answer to the
// preface, the version v and the error of reading it, or returns nil.
func prefaceError(v uint8, err error) error {
	switch {
	case errors.Is(err, wire.ErrBadMagic):
		return fmt.Errorf("the peer does not speak the kiev protocol: %w", err)
	case err != nil:
		return err
	case v > wire.Version:
		return fmt.Errorf("the peer answered with protocol version %d, newer than this client's %d; it must answer with the lower version", v, wire.Version)
	}
	return nil
}

// send encodes call as a Request and queues it. For an async call it
// installs the watch that abandons the call when ctx ends, before the call
// becomes visible to the reader.
func (cc *clientConn) send(ctx context.Context, call *Call, async bool) error {
	id := cc.nextID.Add(1)
	buf := transport.GetBuf(0)
	defer transport.PutBuf(buf)
	deadline, _ := ctx.Deadline()
	alg, least, ask := cc.compression(ctx)
	b, err := encodeRequest((*buf)[:0], 0, ctx, deadline, id, call, cc.c.opts.maxFrame, 0, 0, nil, nil, ask)
	if err == nil && alg != NoCompression {
		b = compressFrame(b, 0, alg, least)
		_ = wire.EndFrame(b, 0, cc.c.opts.maxFrame) // smaller than the frame encodeRequest checked
	}
	*buf = b
	if err != nil {
		return err
	}
	cc.mu.Lock()
	switch err := cc.pending.Closed(); {
	case err != nil:
		cc.mu.Unlock()
		return notSent{err}
	case cc.draining.Load():
		cc.mu.Unlock()
		return notSent{fmt.Errorf("%w: the server at %s is draining; retry on a new connection", ErrShutdown, cc.ep.inst.Address)}
	}
	call.id = id
	if async && ctx.Done() != nil {
		call.stop = context.AfterFunc(ctx, func() {
			if cc.abandon(call, ctx.Err()) {
				call.Error = &callError{call.ServiceMethod, ctx.Err()}
				call.stop = nil
				call.complete()
			}
		})
	}
	_ = cc.pending.Add(id, call) // open: checked under the same lock
	alone := cc.pending.Len() == 1
	cc.mu.Unlock()
	if err := cc.link.SendAlone(b, alone); err != nil && cc.take(id) != nil {
		return &connError{cc.ep.inst.Address, err}
	}
	return nil
}

// compression says how to compress a Request made with ctx: with alg
// (NoCompression: not at all) from least bytes of body up, and the value
// of its ReplyCompression field, if it asks for one. Without
// WithCallCompression, that is what the server's Settings allow of the
// client's WithCompression; with it, what it says, if the server knows
// compression, and its algorithm if the server accepts it.
func (cc *clientConn) compression(ctx context.Context) (alg Compression, least int, ask []byte) {
	peer := algSet(cc.peerAccepts.Load())
	if peer == 0 { // the server compresses nothing; most likely, neither do we
		return NoCompression, 0, nil
	}
	alg, least = Compression(cc.requestAlg.Load()), cc.c.opts.compress.threshold
	if c, ok := callCompression(ctx); ok && (c == NoCompression || peer.has(c)) {
		return c, 0, replyAsks[c : c+1]
	}
	return alg, least, nil
}

// settings takes in the server's Settings.
func (cc *clientConn) settings(h *wire.Header) {
	peer := setOf(h.Accept)
	cc.requestAlg.Store(uint32(cc.c.opts.compress.first(peer)))
	cc.peerAccepts.Store(uint32(peer))
}

// encodeRequest appends call's Request frame, which starts at offset
// start of b. The frame carries the time left until deadline, unless it
// is zero, ctx's priority and metadata, a ReplyCompression field if ask
// is not nil, and in a datagram, the client's session and ack floor.
func encodeRequest(b []byte, start int, ctx context.Context, deadline time.Time, id uint64, call *Call, maxFrame int, session, floor uint64, ticket []byte, auth *packetKey, ask []byte) ([]byte, error) {
	b = wire.BeginFrame(b, wire.TypeRequest, id)
	b = wire.AppendString(b, wire.KeyMethod, call.ServiceMethod)
	b = wire.AppendString(b, wire.KeyCodec, call.codec.Name())
	if !deadline.IsZero() {
		left := time.Until(deadline)
		if left <= 0 {
			return b, context.DeadlineExceeded
		}
		b = wire.AppendUvarint(b, wire.KeyTimeout, uint64((left+time.Microsecond-1)/time.Microsecond))
	}
	b = wire.AppendField(b, wire.KeyPriority, []byte{byte(PriorityFrom(ctx))})
	if session != 0 {
		b = wire.AppendUvarint(b, wire.KeySession, session)
		b = wire.AppendUvarint(b, wire.KeyAckFloor, floor)
	}
	if ticket != nil {
		b = wire.AppendField(b, wire.KeyTicket, ticket)
	}
	for k, v := range OutgoingMetadata(ctx) {
		b = wire.AppendMeta(b, k, v)
	}
	if ask != nil {
		b = wire.AppendField(b, wire.KeyReplyCompression, ask)
	}
	if auth != nil {
		b = auth.appendAuth(b, time.Now()) // the last fields: see signPacket
	}
	if err := wire.EndHeader(b, start); err != nil {
		return b, fmt.Errorf("%w: metadata over 64 KiB", ErrTooLarge)
	}
	b, err := call.codec.Marshal(b, call.Args)
	if err != nil {
		return b, fmt.Errorf("encoding args (codec %s): %w", call.codec.Name(), err)
	}
	if err := wire.EndFrame(b, start, maxFrame); err != nil {
		return b, fmt.Errorf("%w: request is %d bytes, over the %d-byte frame limit; send less or raise WithMaxFrameSize on both sides", ErrTooLarge, len(b)-start-4, maxFrame)
	}
	return b, nil
}

// take removes and returns the pending call with id, or nil if it is
// gone (completed, abandoned, or failed with the connection).
func (cc *clientConn) take(id uint64) *Call {
	cc.mu.Lock()
	call, _, retired := cc.pending.Take(id)
	cc.mu.Unlock()
	if retired != nil {
		cc.fail(retired)
	}
	return call
}

// closeWhenIdle closes the connection with err once the calls in flight
// have ended; new calls fail at once with err.
func (cc *clientConn) closeWhenIdle(err error) {
	cc.mu.Lock()
	idle := cc.pending.Retire(err)
	cc.mu.Unlock()
	if idle {
		cc.fail(err)
	}
}

// abandon gives up on a call whose context ended with err. It reports
// false if the call has already been taken by the reader or by a failure,
// in which case it completes shortly. A canceled call tells the server to
// cancel the handler; a call past its deadline does not need to, as the
// handler's ctx carries the same deadline.
func (cc *clientConn) abandon(call *Call, err error) bool {
	if cc.take(call.id) == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var tmp [wire.HeaderSize]byte
	b := wire.BeginFrame(tmp[:0], wire.TypeCancel, call.id)
	_ = wire.EndFrame(b, 0, cc.c.opts.maxFrame)
	_ = cc.link.Send(b)
	return true
}

// cancelPending tells the server, as the client closes, that nobody waits
// for these calls any more, so that their handlers are canceled: a server
// lets a connection's calls finish when the client ends its stream, as
// net/rpc's does for a client that half-closes. The frames are given a
// moment to leave, no more: a peer that does not read gets none.
func (cc *clientConn) cancelPending(pending map[uint64]*Call) {
	if cc.link.Backlog() > transport.MaxQueued/2 {
		return // the peer is not reading; it would not read these either
	}
	b := make([]byte, 0, len(pending)*wire.HeaderSize)
	for id := range pending {
		start := len(b)
		b = wire.BeginFrame(b, wire.TypeCancel, id)
		_ = wire.EndFrame(b, start, cc.c.opts.maxFrame)
	}
	if cc.link.Send(b) != nil {
		return
	}
	cc.link.FlushAndStop()
	t := time.NewTimer(cancelFlushWait)
	defer t.Stop()
	select {
	case <-cc.link.Done():
	case <-t.C:
	}
}

// cancelFlushWait bounds how long a closing client waits for its Cancel
// frames to be written.
const cancelFlushWait = 100 * time.Millisecond

func (cc *clientConn) readLoop(r *wire.Reader) {
	var h wire.Header
	for {
		f, err := r.Next()
		if err == nil && (f.Type == wire.TypeResponse || f.Type == wire.TypeGoAway || f.Type == wire.TypeSettings) {
			err = wire.ParseHeader(f.Header, &h)
		}
		if err != nil {
			cc.fail(err)
			return
		}
		cc.link.FrameRead()
		switch f.Type {
		case wire.TypeResponse:
			if call := cc.take(f.ID); call != nil {
				call.Error = decodeReply(call, &f, &h, &cc.c.opts.connOptions)
				call.complete()
			}
		case wire.TypeSettings:
			cc.settings(&h)
		case wire.TypeGoAway:
			if h.HasLastID {
				cc.lastRead.Store(h.LastID)
				cc.ended.Store(true)
			}
			cc.draining.Store(true)
			cc.ep.goAway()
		case wire.TypePing:
			var tmp [wire.HeaderSize]byte
			b := wire.BeginFrame(tmp[:0], wire.TypePong, f.ID)
			_ = wire.EndFrame(b, 0, cc.c.opts.maxFrame)
			_ = cc.link.Send(b)
		}
	}
}

// decodeReply decodes a Response frame into call. Its body may be
// compressed on a connection, whose options o are; o is nil for a
// datagram, which never is.
func decodeReply(call *Call, f *wire.Frame, h *wire.Header, o *connOptions) error {
	if h.ErrCode != 0 {
		se := &ServerError{Code: Code(h.ErrCode), Message: string(h.ErrMsg)}
		if h.Limited && se.Code == CodeOverloaded {
			return &limitedError{se}
		}
		return se
	}
	if call.Reply == nil {
		return nil
	}
	if string(h.Codec) != call.codec.Name() {
		return &callError{call.ServiceMethod, fmt.Errorf("%w: reply came in codec %q, not %q", ErrBadRequest, h.Codec, call.codec.Name())}
	}
	body := f.Body
	if h.Compression != 0 {
		if o == nil {
			return &callError{call.ServiceMethod, errCompressedDatagram}
		}
		buf, err := o.compress.decompress(Compression(h.Compression), h.Decoded, f.Body, o.maxFrame)
		if err != nil {
			return &callError{call.ServiceMethod, fmt.Errorf("reply: %w", err)}
		}
		defer transport.PutBuf(buf)
		body = *buf
	}
	if err := call.codec.Unmarshal(body, call.Reply); err != nil {
		return &callError{call.ServiceMethod, fmt.Errorf("decoding reply (codec %s) into %T: %w", call.codec.Name(), call.Reply, err)}
	}
	return nil
}

// failure returns the error that killed the connection, or nil.
func (cc *clientConn) failure() error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.pending.Err()
}

// fail kills the connection once and fails every pending call with an
// error that matches ErrShutdown and carries the cause.
func (cc *clientConn) fail(cause error) {
	var err error
	switch {
	case errors.Is(cause, ErrShutdown):
		err = cause
	case cc.draining.Load() && errors.Is(cause, io.EOF):
		err = fmt.Errorf("%w: the server at %s shut down gracefully and closed the connection", ErrShutdown, cc.ep.inst.Address)
	default:
		err = &connError{cc.ep.inst.Address, cause}
	}
	cc.mu.Lock()
	pending, first := cc.pending.Fail(err)
	if first {
		cc.dead.Store(true)
	}
	cc.mu.Unlock()
	if !first {
		return
	}
	switch {
	case errors.Is(cause, ErrShutdown):
	case cc.draining.Load() && errors.Is(cause, io.EOF):
		cc.c.opts.logger.Info("kiev: server closed the connection after draining", "addr", cc.ep.inst.Address, "failed_calls", len(pending))
	default:
		cc.c.opts.logger.Warn("kiev: connection lost", "addr", cc.ep.inst.Address, "err", cause, "failed_calls", len(pending))
	}
	if errors.Is(cause, errClientClosed) && len(pending) > 0 {
		cc.cancelPending(pending)
	}
	cc.link.Stop(err)
	cc.nc.Close()
	cc.ep.lost(cause, cc.draining.Load())
	// A server that drained sends, as it ends the stream, a last GoAway
	// with the highest Request id it read, having answered every one: a
	// call still pending past that id was never read, so it did not run,
	// and may be retried elsewhere. (Without that GoAway, as from a
	// server whose Shutdown ran out of time, the outcome is unknown.)
	drained := cc.ended.Load() && errors.Is(cause, io.EOF)
	last := cc.lastRead.Load()
	for id, call := range pending {
		if drained && id > last {
			call.Error = notSent{&callError{call.ServiceMethod, err}}
		} else {
			call.Error = &callError{call.ServiceMethod, err}
		}
		call.complete()
	}
}

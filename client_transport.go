package kiev

import (
	"context"
	"fmt"
	"time"

	"github.com/kievrpc/kiev/internal/transport"
	"github.com/kievrpc/kiev/internal/wire"
)

// clientTransport carries an endpoint's calls: a TCP, TLS or Unix
// connection (connTransport, client_conn.go) or a UDP socket
// (packetTransport, client_packet.go), siblings behind it. Each is this
// package's side of a state machine of internal/transport (ClientConn,
// PacketClient): it encodes Requests from calls, decodes Responses into
// them, and says what the transport's failures mean to them. A call is
// started by send, then waited for by wait, from any goroutine; the rest
// is the endpoint's.
type clientTransport interface {
	// send starts call, made with ctx. A connection queues its Request
	// and returns; with async it watches ctx, and completes the call
	// itself when ctx ends first. A socket only makes the call pending:
	// its datagrams leave from wait, whose goroutine retransmits them;
	// async is for connections only (Client.direct). send fails, the
	// call not sent, with a notSent error when the transport takes no
	// call.
	send(ctx context.Context, call *Call, async bool) error
	// wait waits for the end of call, which send started without async,
	// or for ctx's, and returns the call's error.
	wait(ctx context.Context, call *Call) error
	// usable reports whether the transport takes new calls; once false,
	// the endpoint makes a new one.
	usable() bool
	// failure is why the transport failed, or nil.
	failure() error
	// connected reports whether the transport is a connection open for
	// new calls (a socket is no connection to keep, see group.update).
	connected() bool
	// close closes the transport: at once, its calls failing with err, or
	// with graceful, once the calls in flight have ended.
	close(err error, graceful bool)
}

// isPacket reports whether network carries calls in datagrams.
func isPacket(network string) bool {
	switch network {
	case "udp", "udp4", "udp6":
		return true
	}
	return false
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
			return &callError{call.ServiceMethod, transport.ErrCompressedDatagram}
		}
		buf, err := o.compress.c.Decompress(h.Compression, h.Decoded, f.Body, o.maxFrame)
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

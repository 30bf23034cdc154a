package kiev

import (
	"context"
	"fmt"
	"time"

	"github.com/kievrpc/kiev/internal/transport"
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

// request sets rq to what call, made with ctx, asks of the server, for
// the transport to frame: its deadline, unless zero, ctx's priority and
// metadata. rq's other fields are left as they are.
func request(rq *transport.Request, ctx context.Context, deadline time.Time, call *Call) {
	rq.Method, rq.Codec, rq.Args = call.ServiceMethod, call.codec, call.Args
	rq.Deadline, rq.Priority, rq.Meta = deadline, uint8(PriorityFrom(ctx)), OutgoingMetadata(ctx)
}

// decodeReply decodes a Response into call. Its body may be compressed
// on a connection, whose options o are; o is nil for a datagram, which
// never is.
func decodeReply(call *Call, r *transport.Response, o *connOptions) error {
	if r.Code != CodeOK {
		se := &ServerError{Code: r.Code, Message: string(r.Msg)}
		if r.Limited && se.Code == CodeOverloaded {
			return &limitedError{se}
		}
		return se
	}
	if call.Reply == nil {
		return nil
	}
	if string(r.Codec) != call.codec.Name() {
		return &callError{call.ServiceMethod, fmt.Errorf("%w: reply came in codec %q, not %q", ErrBadRequest, r.Codec, call.codec.Name())}
	}
	return decodeBody(call, r.Body, r.Compression, r.Decoded, o)
}

// decodeOnCaller is the size of reply body from which the caller, not
// the reader of its connection or socket, decodes a reply (as it does a
// compressed one): one large reply then holds up no other reply. A
// smaller reply is decoded on the reader, which costs less than the copy
// that handing it over takes.
const decodeOnCaller = 4 << 10

// handOver copies r's body into call, to be decoded off the reader by
// decodeHandedOver, if it is a large or compressed reply to decode; it
// reports whether it did.
func handOver(call *Call, r *transport.Response) bool {
	if r.Code != CodeOK || call.Reply == nil || len(r.Body) < decodeOnCaller && r.Compression == 0 ||
		string(r.Codec) != call.codec.Name() {
		return false
	}
	body := transport.GetBuf(len(r.Body))
	*body = append(*body, r.Body...)
	call.body, call.bodyAlg, call.bodySize = body, r.Compression, r.Decoded
	return true
}

// decodeHandedOver returns call's error, once it decoded the body
// handOver gave it, if any; o is as decodeReply's.
func decodeHandedOver(call *Call, o *connOptions) error {
	if body := call.body; body != nil {
		call.body = nil
		call.Error = decodeBody(call, *body, call.bodyAlg, call.bodySize, o)
		transport.PutBuf(body)
	}
	return call.Error
}

// decodeBody decodes a reply's body, compressed with alg (0: none) from
// decoded bytes, into call.Reply.
func decodeBody(call *Call, body []byte, alg uint8, decoded uint64, o *connOptions) error {
	if alg != 0 {
		if o == nil {
			return &callError{call.ServiceMethod, transport.ErrCompressedDatagram}
		}
		buf, err := o.compress.c.Decompress(alg, decoded, body, o.maxFrame)
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

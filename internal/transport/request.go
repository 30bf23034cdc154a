package transport

import (
	"context"
	"fmt"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/codes"
	"github.com/kievrpc/kiev/internal/wire"
)

// Version is the protocol version this build speaks, which a server
// advertises in its registry instances.
const Version = wire.Version

// Request is what a client's call asks of the server, for a transport to
// frame: the protocol above fills it in, and AppendRequest and
// AppendDatagram frame it.
type Request struct {
	Method   string
	Codec    codec.Codec
	Args     any
	Deadline time.Time // zero: none
	Priority uint8
	Meta     map[string]string
	// ReplyAsk, if not nil, is the ReplyCompression field's value: the
	// compression the caller asks for its reply.
	ReplyAsk []byte
	// Compress is the algorithm to compress the args with, from Least
	// bytes up (connections only; NoCompression: none).
	Compress uint8
	Least    int
	// Stream opens a stream, whose messages the server may send up to
	// StreamCredit bytes from the start; its Args may be nil, for none.
	Stream       bool
	StreamCredit uint64

	stamp *Stamp     // a datagram's; nil on a connection
	key   *PacketKey // signs a datagram, if not nil
}

// AppendRequest appends the Request frame of rq, call id, to b; it fails
// if the deadline has passed, or the frame is over maxFrame.
func AppendRequest(b []byte, id uint64, rq *Request, maxFrame int) ([]byte, error) {
	return appendRequest(b, 0, id, rq, maxFrame)
}

// AppendDatagram appends the request datagram of rq to b, stamped with
// s and signed with key, if not nil; it fails if the deadline has
// passed, or the datagram is over maxDatagram (or its frame over
// maxFrame).
func AppendDatagram(b []byte, rq *Request, s *Stamp, key *PacketKey, maxFrame, maxDatagram int) ([]byte, error) {
	start := len(b)
	b = wire.AppendPreface(b, wire.Version)
	rq.stamp, rq.key, rq.Compress = s, key, NoCompression // a datagram is never compressed
	b, err := appendRequest(b, start+wire.PrefaceLen, s.ID, rq, maxFrame)
	if err == nil && key != nil {
		err = key.sign(b[start:])
	}
	if err == nil && len(b)-start > maxDatagram {
		err = fmt.Errorf("%w: the request is %d bytes, over the %d-byte datagram limit; send less, raise Packet.MaxDatagram on both sides (on loopback or in a datacenter), or call over TCP", ErrTooLarge, len(b)-start, maxDatagram)
	}
	return b, err
}

// appendRequest appends rq's Request frame, which starts at offset start
// of b. The frame carries the time left until the deadline, unless it is
// zero, and in a datagram (rq.stamp not nil), the client's session and
// ack floor, its ticket, and the fields of the signature of rq.key.
func appendRequest(b []byte, start int, id uint64, rq *Request, maxFrame int) ([]byte, error) {
	b = wire.BeginFrame(b, wire.TypeRequest, id)
	b = wire.AppendString(b, wire.KeyMethod, rq.Method)
	b = wire.AppendString(b, wire.KeyCodec, rq.Codec.Name())
	if !rq.Deadline.IsZero() {
		left := time.Until(rq.Deadline)
		if left <= 0 {
			return b, context.DeadlineExceeded
		}
		b = wire.AppendUvarint(b, wire.KeyTimeout, uint64((left+time.Microsecond-1)/time.Microsecond))
	}
	b = wire.AppendField(b, wire.KeyPriority, []byte{rq.Priority})
	if s := rq.stamp; s != nil {
		if s.Session != 0 {
			b = wire.AppendUvarint(b, wire.KeySession, s.Session)
			b = wire.AppendUvarint(b, wire.KeyAckFloor, s.Floor)
		}
		if s.Ticket != nil {
			b = wire.AppendField(b, wire.KeyTicket, s.Ticket)
		}
	}
	for k, v := range rq.Meta {
		b = wire.AppendMeta(b, k, v)
	}
	if rq.ReplyAsk != nil {
		b = wire.AppendField(b, wire.KeyReplyCompression, rq.ReplyAsk)
	}
	if rq.Stream {
		b = wire.AppendUvarint(b, wire.KeyStream, rq.StreamCredit)
	}
	if rq.key != nil {
		b = rq.key.appendAuth(b, time.Now()) // the last fields: see sign
	}
	if err := wire.EndHeader(b, start); err != nil {
		return b, fmt.Errorf("%w: metadata over 64 KiB", ErrTooLarge)
	}
	if rq.Args != nil || !rq.Stream {
		var err error
		if b, err = rq.Codec.Marshal(b, rq.Args); err != nil {
			return b, fmt.Errorf("encoding args (codec %s): %w", rq.Codec.Name(), err)
		}
	}
	if err := wire.EndFrame(b, start, maxFrame); err != nil {
		return b, fmt.Errorf("%w: request is %d bytes, over the %d-byte frame limit; send less or raise WithMaxFrameSize on both sides", ErrTooLarge, len(b)-start-4, maxFrame)
	}
	if rq.Compress != NoCompression {
		b = CompressFrame(b, start, rq.Compress, rq.Least)
		_ = wire.EndFrame(b, start, maxFrame) // smaller than the frame checked
	}
	return b, nil
}

// Response is a call's Response as a client transport read it, for the
// protocol above to decode. Its byte slices are valid only until
// ClientHandler.Reply returns.
type Response struct {
	// Code is the error code, and Msg its message; codes.OK for a reply.
	Code codes.Code
	Msg  []byte
	// Limited marks a codes.Overloaded as the method's, refused at its
	// adaptive limit.
	Limited bool
	Codec   []byte // the codec of a reply's Body
	Body    []byte
	// Compression is the algorithm Body is compressed with (0: none),
	// into Decoded bytes.
	Compression uint8
	Decoded     uint64
}

// read sets r to the Response frame f, whose header is h.
func (r *Response) read(f *wire.Frame, h *wire.Header) {
	*r = Response{
		Code: codes.Code(h.ErrCode), Msg: h.ErrMsg, Limited: h.Limited,
		Codec: h.Codec, Body: f.Body,
		Compression: h.Compression, Decoded: h.Decoded,
	}
}

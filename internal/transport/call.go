package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/codes"
	"github.com/kievrpc/kiev/internal/wire"
	"github.com/kievrpc/kiev/shed"
)

// A server's fronts (its TCP connections, its packet sockets) read calls
// and write their answers; what happens between, the scheduler,
// interceptors, the method, metrics and logs, is package kiev's, the
// same for every front. The two meet here:
//
//   - a front admits a call (Refuse answers one it does not), then hands
//     what it read of it to its ServerHandler, which makes the call
//     (Open); the front then runs the call on its reader
//     (Call.RunInline) or hands it to the scheduler (Call.Submit). The
//     call is package kiev's own value, so nothing is cast back;
//   - the call's answer comes back to the front through its Sink, as a
//     value to encode or as an error code and message.

// CallState is what a front keeps of each call in the call itself, so
// that keeping it costs no allocation.
type CallState struct {
	ID         uint64      // the caller's id of the call
	CallerGone atomic.Bool // the caller canceled, or the connection died: no answer is sent
	Answered   atomic.Bool // its Response is queued: the client may reuse its id
	// ReplyAsk is the compression the caller asked for its reply, if
	// ReplyAsked (over a connection only).
	ReplyAsk   uint8
	ReplyAsked bool
	// Stream is the call's stream, if it is one (over a connection).
	Stream *Stream

	// The room its connection holds for it until it is answered, and
	// its method's reply sizes (room.go).
	reserved int64
	sizes    *ReplySize
}

// Call is a server call as a front sees it. Its methods are safe for
// concurrent use.
type Call interface {
	State() *CallState
	// Name is the method's name, for errors.
	Name() string
	// Estimate is the method's usual run time, or 0 while unknown.
	Estimate() time.Duration
	// ReplySize is the size of the method's recent replies, which a
	// connection reserves room for while the call is in flight.
	ReplySize() *ReplySize
	// Cancel cancels the handler's context with err.
	Cancel(err error)
	// Release returns a call that will neither run nor be answered.
	Release()
	// Submit hands the call to the scheduler, which runs or drops it,
	// and answers it either way. A base already done cancels it first.
	Submit(base context.Context)
	// RunInline runs the call on the calling goroutine if the scheduler
	// would start it at once, and reports whether it did.
	RunInline() bool
}

// Origin is where a call came from.
type Origin struct {
	Addr net.Addr
	TLS  *tls.ConnectionState // nil without TLS
	// KeyID is the name of the key that signed the call's datagram, if
	// any.
	KeyID string
	// Conn says the call came over a connection, where bodies may be
	// compressed, and streams open; a datagram's never are.
	Conn bool
}

// Head is what a front read of a call: what its ServerHandler makes the call
// of. A front reuses its Head for the next call once Open returns.
type Head struct {
	ID     uint64
	Method []byte // "Service.Method"
	Codec  []byte // the codec's name
	// Meta is the call's metadata, for a front that reads it as a map
	// (HTTP); nil for none, or for a frame's, which Metadata reads.
	Meta        map[string]string
	Priority    uint8 // the priority the caller claims, if HasPriority
	HasPriority bool
	Deadline    time.Time // zero: none
	// The encoded args: Body, which Open copies, or Owned, a buffer from
	// GetBuf that the call takes over (args the front decompressed, or
	// read whole from an HTTP request).
	Body  []byte
	Owned *[]byte
	// Compression is the algorithm Body is compressed with (0: none),
	// into Decoded bytes: the front's to decompress, before Open.
	Compression uint8
	Decoded     uint64
	// ReplyAsk is the compression the caller asks for its reply, if
	// ReplyAsked.
	ReplyAsk   uint8
	ReplyAsked bool
	// IsStream says the Request opens a stream, whose messages the client
	// lets the server send up to StreamCredit bytes from the start; a
	// front that serves streams sets Stream, which its Sink gives back as
	// the call's (Sink.Stream).
	IsStream     bool
	StreamCredit uint64
	Stream       HandlerStream
	Origin

	frame     []byte // the Request frame's header, whose metadata Metadata reads
	metaCount int
}

// Read sets hd to what the Request frame f, whose header is h, asks for;
// all but its Origin, which the front sets. hd refers to f's bytes, until
// f is reused. (Field by field, not a whole Head: a connection's Origin
// stays as it is from call to call.)
func (hd *Head) Read(f *wire.Frame, h *wire.Header) {
	hd.ID, hd.Method, hd.Codec = f.ID, h.Method, h.Codec
	hd.Meta, hd.frame, hd.metaCount = nil, f.Header, h.MetaCount
	hd.Priority, hd.HasPriority = h.Priority, h.HasPriority
	hd.Deadline = time.Time{}
	if h.HasTimeout {
		hd.Deadline = time.Now().Add(time.Duration(min(h.Timeout, wire.MaxTimeoutMicros)) * time.Microsecond)
	}
	hd.Body, hd.Owned = f.Body, nil
	hd.Compression, hd.Decoded = h.Compression, h.Decoded
	hd.ReplyAsk, hd.ReplyAsked = h.ReplyCompression, h.HasReplyCompression
	hd.IsStream, hd.StreamCredit, hd.Stream = h.HasStream, h.Stream, nil
}

// maxMetaPresize bounds the room made for a call's metadata before it is
// read: the count of pairs is the peer's to choose, and pairs that repeat
// one key (21,666 empty pairs fit in a 64 KiB header) would otherwise
// size a map for all of them, 1.28 MiB per call.
const maxMetaPresize = 8

// Metadata returns the call's metadata, and with a KeyID, key set to it
// (the server's word, not the caller's); nil for none. A frame's is read
// only now, so that a call refused earlier costs no map.
func (hd *Head) Metadata(key string) map[string]string {
	if hd.metaCount == 0 && hd.KeyID == "" {
		return hd.Meta // most calls': inlined
	}
	return hd.readMetadata(key)
}

func (hd *Head) readMetadata(key string) map[string]string {
	md := hd.Meta
	n := hd.metaCount
	if hd.KeyID != "" {
		n++
	}
	if md == nil && n > 0 {
		md = make(map[string]string, min(n, maxMetaPresize))
		wire.EachMeta(hd.frame, func(k, v []byte) { md[string(k)] = string(v) })
	}
	if hd.KeyID != "" {
		if md == nil {
			md = make(map[string]string, 1)
		}
		md[key] = hd.KeyID
	}
	return md
}

// ServerHandler is package kiev's end of the server's fronts. Its methods are safe for
// concurrent use and do not block, but for what the call they run does.
type ServerHandler interface {
	// Open makes the call hd asks for, answered through sink; its
	// context's values come from base. Or it returns nil with the error
	// code and message to answer: no such method, an unknown codec. It
	// copies what it keeps of hd, but Owned, which it takes over whatever
	// it returns. The front has admitted the call, and decompressed its
	// args, first.
	Open(hd *Head, base context.Context, sink Sink) (Call, codes.Code, string)
	// Refuse counts a call of the method named refused at
	// WithMaxConcurrentCalls, coming from where ("on this connection"),
	// and returns its answer. A front refuses a call before it opens it:
	// its args are neither copied nor decompressed.
	Refuse(method []byte, where string) (codes.Code, string)
}

// Sink is where a call's answer goes: a connection, or a packet socket
// and the caller's address, or an HTTP response. It frames the answer as
// its transport does. Its methods are safe for concurrent use.
type Sink interface {
	// Reply sends c's reply, v, encoded by cd. It fails with an
	// *EncodeError if cd cannot encode v, a *BacklogError if the caller
	// has left too many replies unread, or an error saying why the reply
	// is too large for the transport.
	Reply(c Call, cd codec.Codec, v any) error
	// Fail sends an error answer; limited marks codes.Overloaded as the
	// method's, refused at its adaptive limit. It fails if the message is
	// too long for the transport.
	Fail(c Call, code codes.Code, msg string, limited bool) error
	// Done forgets the call; it is the last thing a call does.
	Done(c Call)
	// Backlogged reports the bytes of replies waiting for the caller to
	// read them, and whether they are too many to run more of its calls.
	Backlogged() (int, bool)
	// Flow is the flow the scheduler shares its limits fairly between
	// the calls of (a connection's), or nil for none.
	Flow() *shed.Flow
	// Stream is the stream c opened (Head.Stream), or nil if c is no
	// stream.
	Stream(c Call) HandlerStream
}

// HandlerStream is a stream as its server's handler sends and receives
// on it: a connection's *Stream, or an HTTP response carrying a server
// stream's messages. Send and Recv are each called from one goroutine at
// a time; the rest are safe for concurrent use.
type HandlerStream interface {
	// Send queues msg, an encoded message, whole or not at all; ctx
	// bounds only the wait for room.
	Send(ctx context.Context, msg []byte) error
	// SendBuf is Send of the message in *buf, taking buf on success: the
	// stream gives it back to the pool (PutBuf) once done with it.
	SendBuf(ctx context.Context, buf *[]byte) error
	// Recv returns the client's next message, io.EOF once it sends no
	// more, or the error the stream ended with; it waits within ctx.
	Recv(ctx context.Context) (*[]byte, *Final, error)
	// CloseSend ends the server's sending (a half-close).
	CloseSend() error
	// Grant accepts the stream, granting the client's messages window
	// bytes of credit (0 for a stream that receives none).
	Grant(window int)
	// Abort ends the stream on this side with err, sending nothing more.
	Abort(err error)
}

var _ HandlerStream = (*Stream)(nil)

// EncodeError says the call's codec could not encode its reply.
type EncodeError struct{ Err error }

func (e *EncodeError) Error() string { return e.Err.Error() }

// BacklogError says a reply was not queued because the client has left
// too many unread.
type BacklogError struct{ Queued int }

func (e *BacklogError) Error() string {
	return fmt.Sprintf("%d KiB of replies wait for this client to read them, more than its share of the server's memory (WithMaxQueuedBytes); read replies as they come, or have fewer calls in flight", e.Queued>>10)
}

// AppendResponse appends a Response frame carrying v encoded by cd,
// without its length, which wire.EndFrame fills in; the frame starts at
// len(b). It is how TCP and UDP sinks frame a reply.
func AppendResponse(b []byte, id uint64, cd codec.Codec, v any) ([]byte, error) {
	start := len(b)
	b = wire.BeginFrame(b, wire.TypeResponse, id)
	if v == nil { // a stream that ends with success and no reply: no Codec, no body
		_ = wire.EndHeader(b, start)
		return b, nil
	}
	b = wire.AppendString(b, wire.KeyCodec, cd.Name())
	_ = wire.EndHeader(b, start)
	b, err := cd.Marshal(b, v)
	if err != nil {
		return b, &EncodeError{err}
	}
	return b, nil
}

// AppendError appends an error Response frame, without its length, which
// wire.EndFrame fills in; the frame starts at len(b).
func AppendError(b []byte, id uint64, code codes.Code, msg string, limited bool) []byte {
	start := len(b)
	b = wire.BeginFrame(b, wire.TypeResponse, id)
	b = wire.AppendUvarint(b, wire.KeyErrCode, uint64(code))
	b = wire.AppendString(b, wire.KeyErrMsg, msg)
	if limited {
		b = wire.AppendString(b, wire.KeyLimited, "")
	}
	_ = wire.EndHeader(b, start)
	return b
}

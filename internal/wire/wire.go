// Package wire reads and writes kiev's frames. PROTOCOL.md at the root of
// the repository is the specification; this package is its only
// implementation, and wire_test.go pins every constant it names.
//
// A connection starts with a 5-byte preface from each side (Magic and a
// version byte). After it, both directions carry frames:
//
//	length  uint32, big endian: bytes after this field (12 or more)
//	type    uint8:  Request, Response, Cancel, Ping, Pong, GoAway or Settings
//	flags   uint8:  reserved, sent as 0, ignored on receipt
//	id      uint64, big endian: the call id (ping id for Ping/Pong)
//	hlen    uint16, big endian: length of the header fields
//	header  hlen bytes: fields of {key uint8, len uvarint, value}
//	body    the rest: the codec-encoded args or reply
//
// Receivers skip header fields and frame types they do not know, which is
// how a newer peer adds to the protocol without breaking an older one.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Magic opens every kiev connection, followed by one version byte.
const Magic = "KIEV"

// Version is the newest protocol version this package speaks. Peers agree
// on the smaller of their two versions.
const Version = 1

// PrefaceLen is the length of the connection preface: Magic and version.
const PrefaceLen = len(Magic) + 1

// Type is a frame type.
type Type uint8

// Frame types. Values are part of the protocol and never change.
const (
	TypeRequest  Type = 1 // a call: header has the method and codec, body the args
	TypeResponse Type = 2 // the answer to the Request with the same id
	TypeCancel   Type = 3 // the caller gave up on call id; the server cancels it
	TypePing     Type = 4 // liveness probe; the peer answers Pong with the same id
	TypePong     Type = 5 // answer to Ping
	TypeGoAway   Type = 6 // the server drains: send no new calls on this connection
	TypeSettings Type = 7 // what the sender accepts (KeyAccept), after its preface; peers that do not know it skip it
	// Streams (negotiated: sent only to a peer whose Settings carry
	// KeyStreams).
	TypeMessage Type = 8  // a chunk of one message of stream id; the first chunk of a message carries KeySize
	TypeCredit  Type = 9  // the receiver of stream id lets its peer send message bytes up to KeyCredit
	TypeEnd     Type = 10 // the sender of stream id sends no more messages (a half-close)
)

// Key is a header field key.
type Key uint8

// Header field keys. Values are part of the protocol and never change.
const (
	KeyMethod   Key = 1  // Request: "Service.Method"
	KeyCodec    Key = 2  // Request, Response: codec name of the body
	KeyTimeout  Key = 3  // Request: uvarint microseconds left until the caller's deadline
	KeyMeta     Key = 4  // Request: one metadata pair, uvarint key length, key, value
	KeyPriority Key = 5  // Request: one byte, 0 (shed first) to 9 (shed last)
	KeyErrCode  Key = 6  // Response: uvarint error code; absent means success
	KeyErrMsg   Key = 7  // Response: error text
	KeySession  Key = 8  // Request, Cancel in a datagram: uvarint, the client socket's random session id
	KeyAckFloor Key = 9  // Request in a datagram: uvarint, every call of the session below this id is done
	KeyLimited  Key = 10 // Response: present on an Overloaded error refused at the method's limit, not the server's
	KeyLastID   Key = 11 // GoAway: uvarint, the highest Request id the server read; sent as it ends the stream, every one answered
	KeyTicket   Key = 12 // datagrams: the server's proof that the client receives at its address; a Response with it asks for the Request again with it
	KeyAuthID   Key = 13 // Request, Cancel in a datagram: the id of the key that signs it
	KeyAuthTime Key = 14 // Request, Cancel in a datagram: uvarint, when it was signed, Unix milliseconds
	KeyAuthMAC  Key = 15 // Request, Cancel in a datagram: HMAC-SHA256 of the datagram with these bytes zeroed; the last field
	// KeyCompression marks a compressed body: one byte, the algorithm,
	// then a uvarint, the body's length before compression.
	KeyCompression Key = 16 // Request, Response: the body is compressed
	KeyAccept      Key = 17 // Settings: the compression algorithms the sender decodes, one byte each, preferred first
	// KeyReplyCompression asks for the reply's compression: one byte, 0
	// for none, else the algorithm, used whatever the reply's size.
	KeyReplyCompression Key = 18 // Request: how to compress this call's reply
	// Streams.
	KeyStream   Key = 19 // Request: opens a stream; uvarint, the credit the client grants the server's messages from the start
	KeyStreams  Key = 20 // Settings: uvarint, the streams the sender accepts open at once on the connection; present: it speaks streams
	KeySize     Key = 21 // Message: uvarint, the size of the message this first chunk begins
	KeyCredit   Key = 22 // Credit: uvarint, the absolute offset in the stream's message bytes up to which the peer may send
	KeyConsumed Key = 23 // Credit: uvarint, the messages the receiving application has taken so far
)

// AuthMACLen is the length of a KeyAuthMAC value.
const AuthMACLen = 32

const (
	// lenSize is the size of the length prefix.
	lenSize = 4
	// fixedSize is the size of type, flags, id and hlen.
	fixedSize = 1 + 1 + 8 + 2
	// HeaderSize is the size of the length prefix and the fixed fields.
	HeaderSize = lenSize + fixedSize
	// MaxHeaderLen is the largest header-fields section.
	MaxHeaderLen = 1<<16 - 1
)

// Errors a Reader returns for bytes that break the protocol. Each one
// means the connection cannot be trusted any further and must be closed.
var (
	ErrBadMagic      = errors.New("kiev/wire: connection preface has wrong magic; the peer does not speak kiev")
	ErrBadVersion    = errors.New("kiev/wire: connection preface has version 0; the peer is not a kiev peer")
	ErrFrameTooLarge = errors.New("kiev/wire: frame larger than the maximum frame size")
	ErrMalformed     = errors.New("kiev/wire: malformed frame")
	ErrHeaderTooLong = errors.New("kiev/wire: header fields exceed 65535 bytes")
)

// Header field errors, made once: parsing hostile headers (a flood of bad
// datagrams, say) must not allocate.
var (
	errBadTimeout   = fmt.Errorf("%w: bad timeout field", ErrMalformed)
	errBadPriority  = fmt.Errorf("%w: bad priority field", ErrMalformed)
	errBadErrCode   = fmt.Errorf("%w: bad error code field", ErrMalformed)
	errBadMeta      = fmt.Errorf("%w: bad metadata field", ErrMalformed)
	errFieldOverrun = fmt.Errorf("%w: a header field runs past the header", ErrMalformed)
	errBadUvarint   = fmt.Errorf("%w: a field that must be a uvarint is not one", ErrMalformed)
	errBadCompress  = fmt.Errorf("%w: bad compression field", ErrMalformed)
)

// AppendPreface appends a connection preface announcing version v.
func AppendPreface(b []byte, v uint8) []byte {
	return append(append(b, Magic...), v)
}

// ParsePreface checks a preface and returns the version it announces.
func ParsePreface(p []byte) (uint8, error) {
	if len(p) != PrefaceLen || string(p[:len(Magic)]) != Magic {
		return 0, ErrBadMagic
	}
	if p[len(Magic)] == 0 {
		return 0, ErrBadVersion
	}
	return p[len(Magic)], nil
}

// BeginFrame appends the fixed part of a frame with placeholders for the
// lengths. The frame starts at len(b) on entry; pass that offset to
// EndHeader and EndFrame.
func BeginFrame(b []byte, t Type, id uint64) []byte {
	b = append(b, 0, 0, 0, 0, byte(t), 0)
	b = binary.BigEndian.AppendUint64(b, id)
	return append(b, 0, 0)
}

// AppendField appends a header field with a byte-string value.
func AppendField(b []byte, k Key, v []byte) []byte {
	b = append(b, byte(k))
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// AppendString appends a header field with a string value.
func AppendString(b []byte, k Key, v string) []byte {
	b = append(b, byte(k))
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// AppendUvarint appends a header field holding one uvarint.
func AppendUvarint(b []byte, k Key, v uint64) []byte {
	var tmp [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(tmp[:], v)
	return AppendField(b, k, tmp[:n])
}

// AppendMeta appends one metadata pair as a KeyMeta field.
func AppendMeta(b []byte, key, value string) []byte {
	b = append(b, byte(KeyMeta))
	var tmp [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(tmp[:], uint64(len(key)))
	b = binary.AppendUvarint(b, uint64(n+len(key)+len(value)))
	b = append(b, tmp[:n]...)
	b = append(b, key...)
	return append(b, value...)
}

// AppendCompression appends a KeyCompression field: the body that
// follows is compressed with algorithm alg, and was n bytes before.
func AppendCompression(b []byte, alg uint8, n int) []byte {
	var tmp [1 + binary.MaxVarintLen64]byte
	tmp[0] = alg
	k := binary.PutUvarint(tmp[1:], uint64(n))
	return AppendField(b, KeyCompression, tmp[:1+k])
}

// EndHeader records the length of the header fields of the frame that
// starts at offset start. Call it after the last field, before the body.
func EndHeader(b []byte, start int) error {
	hlen := len(b) - start - HeaderSize
	if hlen > MaxHeaderLen {
		return ErrHeaderTooLong
	}
	binary.BigEndian.PutUint16(b[start+HeaderSize-2:], uint16(hlen))
	return nil
}

// EndFrame records the length of the frame that starts at offset start.
// It fails if the frame is larger than max bytes after the length prefix.
func EndFrame(b []byte, start, max int) error {
	n := len(b) - start - lenSize
	if n > max {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, max)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	return nil
}

// EndFrameBefore records the length of the frame that starts at offset
// start and ends with body more bytes, which its writer writes from
// elsewhere, after b. It fails as EndFrame does.
func EndFrameBefore(b []byte, start, body, max int) error {
	n := len(b) - start - lenSize + body
	if n > max {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, max)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	return nil
}

// Frame is one decoded frame. Its slices alias the reader's buffer and
// are valid only until the next call to Reader.Next.
type Frame struct {
	Type   Type
	Flags  uint8
	ID     uint64
	Header []byte // raw header fields; see ParseHeader
	Body   []byte
}

// Parse decodes a frame from p, the bytes after the length prefix.
func Parse(p []byte) (Frame, error) {
	if len(p) < fixedSize {
		return Frame{}, fmt.Errorf("%w: %d bytes is shorter than the %d-byte fixed header", ErrMalformed, len(p), fixedSize)
	}
	hlen := int(binary.BigEndian.Uint16(p[10:12]))
	if fixedSize+hlen > len(p) {
		return Frame{}, fmt.Errorf("%w: header length %d runs past the %d-byte frame", ErrMalformed, hlen, len(p))
	}
	return Frame{
		Type:   Type(p[0]),
		Flags:  p[1],
		ID:     binary.BigEndian.Uint64(p[2:10]),
		Header: p[fixedSize : fixedSize+hlen],
		Body:   p[fixedSize+hlen:],
	}, nil
}

// MaxTimeoutMicros caps a Timeout read, so that it cannot overflow a
// time.Duration (about 292 years).
const MaxTimeoutMicros = math.MaxInt64 / 1000

// Header holds the header fields kiev knows. Byte slices alias the frame.
type Header struct {
	Method      []byte
	Codec       []byte
	Timeout     uint64 // microseconds; valid if HasTimeout; see MaxTimeoutMicros
	HasTimeout  bool
	Priority    uint8 // valid if HasPriority
	HasPriority bool
	ErrCode     uint64 // 0 means success
	ErrMsg      []byte
	MetaCount   int    // number of KeyMeta fields; read them with EachMeta
	Session     uint64 // 0 if absent
	AckFloor    uint64 // 0 if absent
	Limited     bool   // KeyLimited is present
	LastID      uint64 // valid if HasLastID
	HasLastID   bool
	Ticket      []byte // nil if absent
	AuthID      []byte // nil if absent
	AuthTime    uint64 // valid if AuthID is set
	AuthMAC     []byte // aliases the frame, so that a verifier can zero it in place
	// Compression is the algorithm the body is compressed with, 0 if it
	// is not; Decoded is then its length before compression.
	Compression uint8
	Decoded     uint64
	Accept      []byte // Settings: the algorithms the sender decodes; nil if absent
	// ReplyCompression is what a Request asks of its reply's compression
	// (0: none), valid if HasReplyCompression.
	ReplyCompression    uint8
	HasReplyCompression bool
	// Streams. Stream is a Request's initial credit, if HasStream;
	// Streams the Settings' stream limit, if HasStreams; Size a Message's,
	// if HasSize; Credit and Consumed a Credit's, if HasCredit.
	Stream     uint64
	HasStream  bool
	Streams    uint64
	HasStreams bool
	Size       uint64
	HasSize    bool
	Credit     uint64
	HasCredit  bool
	Consumed   uint64
}

// ParseHeader decodes raw header fields into h, skipping unknown keys.
func ParseHeader(raw []byte, h *Header) error {
	*h = Header{}
	return eachField(raw, func(k Key, v []byte) error {
		switch k {
		case KeyMethod:
			h.Method = v
		case KeyCodec:
			h.Codec = v
		case KeyTimeout:
			t, n := binary.Uvarint(v)
			if n <= 0 {
				return errBadTimeout
			}
			h.Timeout, h.HasTimeout = t, true
		case KeyMeta:
			if _, _, err := splitMeta(v); err != nil {
				return err
			}
			h.MetaCount++
		case KeyPriority:
			if len(v) != 1 || v[0] > 9 {
				return errBadPriority
			}
			h.Priority, h.HasPriority = v[0], true
		case KeyErrCode:
			c, n := binary.Uvarint(v)
			if n <= 0 {
				return errBadErrCode
			}
			h.ErrCode = c
		case KeyErrMsg:
			h.ErrMsg = v
		case KeyLimited:
			h.Limited = true
		case KeyTicket:
			h.Ticket = v
		case KeyAuthID:
			h.AuthID = v
		case KeyAuthMAC:
			h.AuthMAC = v
		case KeyCompression:
			n, k := binary.Uvarint(v[min(1, len(v)):])
			if len(v) < 2 || v[0] == 0 || k <= 0 || 1+k != len(v) {
				return errBadCompress
			}
			h.Compression, h.Decoded = v[0], n
		case KeyAccept:
			h.Accept = v
		case KeyReplyCompression:
			if len(v) != 1 {
				return errBadCompress
			}
			h.ReplyCompression, h.HasReplyCompression = v[0], true
		case KeyStream, KeyStreams, KeySize, KeyCredit, KeyConsumed:
			x, n := binary.Uvarint(v)
			if n <= 0 || n != len(v) {
				return errBadUvarint
			}
			switch k {
			case KeyStream:
				h.Stream, h.HasStream = x, true
			case KeyStreams:
				h.Streams, h.HasStreams = x, true
			case KeySize:
				h.Size, h.HasSize = x, true
			case KeyCredit:
				h.Credit, h.HasCredit = x, true
			default:
				h.Consumed = x
			}
		case KeySession, KeyAckFloor, KeyLastID, KeyAuthTime:
			x, n := binary.Uvarint(v)
			if n <= 0 {
				return errBadUvarint
			}
			switch k {
			case KeySession:
				h.Session = x
			case KeyAckFloor:
				h.AckFloor = x
			case KeyAuthTime:
				h.AuthTime = x
			default:
				h.LastID, h.HasLastID = x, true
			}
		}
		return nil
	})
}

// EachMeta calls fn for every metadata pair in raw header fields that
// ParseHeader already accepted.
func EachMeta(raw []byte, fn func(key, value []byte)) {
	_ = eachField(raw, func(k Key, v []byte) error {
		if k == KeyMeta {
			key, value, _ := splitMeta(v)
			fn(key, value)
		}
		return nil
	})
}

func splitMeta(v []byte) (key, value []byte, err error) {
	kl, n := binary.Uvarint(v)
	if n <= 0 || kl > uint64(len(v)-n) {
		return nil, nil, errBadMeta
	}
	return v[n : n+int(kl)], v[n+int(kl):], nil
}

func eachField(raw []byte, fn func(Key, []byte) error) error {
	for len(raw) > 0 {
		k := Key(raw[0])
		l, n := binary.Uvarint(raw[1:])
		if n <= 0 || l > uint64(len(raw)-1-n) {
			return errFieldOverrun
		}
		start := 1 + n
		if err := fn(k, raw[start:start+int(l)]); err != nil {
			return err
		}
		raw = raw[start+int(l):]
	}
	return nil
}

// ReadPreface reads and checks the peer's preface.
func ReadPreface(r io.Reader) (uint8, error) {
	var p [PrefaceLen]byte
	if _, err := io.ReadFull(r, p[:]); err != nil {
		return 0, err
	}
	return ParsePreface(p[:])
}

package kiev

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"

	"github.com/kievrpc/kiev/internal/transport"
	"github.com/kievrpc/kiev/internal/wire"
)

// Compression of call bodies on TCP and Unix connections.
//
// Each side lists the algorithms it accepts and uses (WithCompression).
// Right after the preface, a side with a list sends it in a Settings
// frame; peers that do not know Settings skip it, and send none. A side
// compresses a body (a Request's args or a Response's reply, as its codec
// encoded them) only with an algorithm the other side announced, its own
// first choice among them, and only from WithCompressionThreshold bytes
// up; each compressed frame says so in its Compression field. So a peer
// that announced nothing, an older one among them, never sees a
// compressed body. WithCallCompression overrides the choice for a call.
// See PROTOCOL.md, "Compression".

// Compression is an algorithm that compresses the bodies of calls: their
// args and replies as their codec encoded them. Its value is the
// algorithm's number on the wire. See WithCompression.
type Compression uint8

// The compression algorithms, both from github.com/klauspost/compress.
const (
	// NoCompression sends bodies as they are: with WithCallCompression,
	// it turns compression off for the calls of a context.
	NoCompression Compression = 0
	// Zstd is Zstandard at its fastest level: the smaller output (a
	// sixth to a twentieth of repetitive JSON), at about 3 to 4 times the
	// CPU time of S2.
	Zstd Compression = 1
	// S2 is S2, an extension of Snappy: about a third of Zstd's CPU
	// time, for an output 2 to 4 times larger than Zstd's.
	S2 Compression = 2
)

// String returns the algorithm's name: "none", "zstd" or "s2".
func (c Compression) String() string {
	switch c {
	case NoCompression:
		return "none"
	case Zstd:
		return "zstd"
	case S2:
		return "s2"
	}
	return "Compression(" + strconv.Itoa(int(c)) + ")"
}

func (c Compression) known() bool { return c == Zstd || c == S2 }

// DefaultCompressionThreshold is the default of WithCompressionThreshold.
const DefaultCompressionThreshold = 1 << 10

type callCompressionKey struct{}

// WithCallCompression returns a context whose calls are compressed with
// c both ways, whatever their size and the client's WithCompression: the
// Request's args if the server accepts c, and the reply if the server
// uses c (lists it in its WithCompression). With NoCompression, neither
// is compressed. Over UDP, and with a server that does not accept c, the
// calls go as they would without it. A handler's ctx does not pass it on
// to the calls the handler makes. It panics on an algorithm kiev does not
// know.
func WithCallCompression(ctx context.Context, c Compression) context.Context {
	if c != NoCompression && !c.known() {
		panic(fmt.Sprintf("kiev: WithCallCompression: unknown algorithm %v; use kiev.NoCompression, kiev.Zstd or kiev.S2", c))
	}
	return context.WithValue(ctx, callCompressionKey{}, c)
}

// callCompression returns the compression WithCallCompression set on
// ctx, if any.
func callCompression(ctx context.Context) (Compression, bool) {
	c, ok := ctx.Value(callCompressionKey{}).(Compression)
	return c, ok
}

// algSet is a set of known algorithms: bit c for Compression c.
type algSet uint8

func (s algSet) has(c Compression) bool { return c.known() && s&(1<<c) != 0 }

// setOf returns the known algorithms of an Accept list.
func setOf(accept []byte) algSet {
	var s algSet
	for _, a := range accept {
		if c := Compression(a); c.known() {
			s |= 1 << c
		}
	}
	return s
}

// compressOptions are a side's compression settings.
type compressOptions struct {
	algs      []Compression // preferred first; empty: compression off
	threshold int
	set       algSet
	settings  []byte     // the Settings frame this side sends; nil: none
	zstd      *sync.Pool // of *zstdReader, for this side's frame limit
}

func (o *compressOptions) fill(maxFrame int) {
	if o.threshold <= 0 {
		o.threshold = DefaultCompressionThreshold
	}
	o.set = 0
	accept := make([]byte, len(o.algs))
	for i, c := range o.algs {
		o.set |= 1 << c
		accept[i] = byte(c)
	}
	o.settings = nil
	if len(o.algs) > 0 {
		b := wire.BeginFrame(nil, wire.TypeSettings, 0)
		b = wire.AppendField(b, wire.KeyAccept, accept)
		_ = wire.EndHeader(b, 0)
		_ = wire.EndFrame(b, 0, maxFrame)
		o.settings = b
	}
	o.zstd = zstdReaders(maxFrame)
}

// first returns the first of the side's algorithms that peer accepts.
func (o *compressOptions) first(peer algSet) Compression {
	for _, c := range o.algs {
		if peer.has(c) {
			return c
		}
	}
	return NoCompression
}

// replyAsks holds the values of a ReplyCompression field, so that a
// Request carries one without an allocation.
var replyAsks = []byte{byte(NoCompression), byte(Zstd), byte(S2)}

// names lists the side's algorithms, for errors.
func (o *compressOptions) names() string {
	if len(o.algs) == 0 {
		return "none"
	}
	s := make([]string, len(o.algs))
	for i, c := range o.algs {
		s[i] = c.String()
	}
	return strings.Join(s, ", ")
}

// compressFrame compresses the body of the frame that starts at b[start:]
// and ends b, whose header is ended, with alg, and adds the Compression
// field to its header, unless the body is shorter than least bytes or
// compressing would not make the frame smaller. The frame's length is
// left for wire.EndFrame.
func compressFrame(b []byte, start int, alg Compression, least int) []byte {
	hlen := int(binary.BigEndian.Uint16(b[start+wire.HeaderSize-2:]))
	hdrEnd := start + wire.HeaderSize + hlen
	end := len(b)
	n := end - hdrEnd
	var tmp [3 + binary.MaxVarintLen64]byte
	field := wire.AppendCompression(tmp[:0], uint8(alg), n)
	if n < least || n == 0 || hlen+len(field) > wire.MaxHeaderLen {
		return b
	}
	// The compressed body goes after the frame, then moves into place.
	switch alg {
	case Zstd:
		b = zstdEncoder().EncodeAll(b[hdrEnd:end], b)
	case S2:
		m := s2.MaxEncodedLen(n)
		if m < 0 {
			return b
		}
		b = slices.Grow(b, m)
		z := s2.Encode(b[end:end+m], b[hdrEnd:end])
		b = b[:end+len(z)]
	default:
		return b
	}
	z := b[end:]
	if len(field)+len(z) >= n {
		return b[:end] // incompressible: send it as it is
	}
	copy(b[hdrEnd:], field)
	copy(b[hdrEnd+len(field):], z)
	b = b[:hdrEnd+len(field)+len(z)]
	_ = wire.EndHeader(b[:hdrEnd+len(field)], start)
	return b
}

// errCompressedDatagram refuses a compressed body in a datagram. Like
// every error of a compressed body, it fails its call, not the connection
// or socket: the frame was read whole, so the stream can still be trusted.
var errCompressedDatagram = fmt.Errorf("%w: a datagram carried a compressed body; kiev does not compress datagrams", ErrBadRequest)

// decompressError says why a compressed body could not be decoded.
type decompressError struct {
	alg Compression
	err error
}

func (e *decompressError) Error() string {
	return "kiev: corrupt " + e.alg.String() + " body: " + e.err.Error()
}

func (e *decompressError) Unwrap() []error { return []error{ErrBadRequest, e.err} }

// tooLargeError says a body would decompress past the frame limit.
type tooLargeError struct {
	alg    Compression
	n, max uint64
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("kiev: the %v body says it decompresses to %d bytes, over this side's %d-byte frame limit (WithMaxFrameSize); send less, or raise WithMaxFrameSize on both sides", e.alg, e.n, e.max)
}

func (e *tooLargeError) Unwrap() error { return ErrTooLarge }

// decompress decodes src, a body compressed with alg whose Compression
// field says it was n bytes, into a buffer from the pool (putBuf it). It
// refuses at once a body of more than limit bytes, and allocates nothing
// beyond the n bytes of the result, whatever src holds, but for a zstd
// decoder's own buffers (its window, at most zstdWindow, and its blocks':
// some 600 KB, once per decoder, pooled): a body that decodes to more
// than n bytes is stopped at n+1.
func (o *compressOptions) decompress(alg Compression, n uint64, src []byte, limit int) (*[]byte, error) {
	if n > uint64(limit) {
		return nil, &tooLargeError{alg: alg, n: n, max: uint64(limit)}
	}
	// Checked before any allocation: the length an s2 block says, and the
	// algorithm.
	switch alg {
	case S2:
		m, err := s2.DecodedLen(src)
		if err == nil && uint64(m) != n {
			err = fmt.Errorf("it decodes to %d bytes, not the %d its header says", m, n)
		}
		if err != nil {
			return nil, &decompressError{alg, err}
		}
	case Zstd:
	default:
		return nil, &decompressError{alg, errors.New("unknown algorithm")}
	}
	buf := transport.GetBuf(int(n))
	dst := (*buf)[:n]
	var err error
	if alg == S2 {
		var out []byte
		out, err = s2.Decode(dst, src)
		if err == nil && len(out) > 0 && &out[0] != &dst[0] {
			err = errors.New("s2 decoded outside its buffer") // cannot happen: DecodedLen said n
		}
	} else {
		z := o.zstd.Get().(*zstdReader)
		err = z.decode(src, dst)
		o.zstd.Put(z)
	}
	if err != nil {
		transport.PutBuf(buf)
		return nil, &decompressError{alg, err}
	}
	*buf = dst
	return buf, nil
}

// zstdWindow is the window of kiev's zstd frames, and the largest a
// decoder accepts (or the frame limit, if smaller): what a decoder holds
// beside the body it decodes into.
const zstdWindow = 256 << 10

var zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
	// EncodeAll is safe for concurrent use; the encoder keeps up to
	// GOMAXPROCS states for it.
	e, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderCRC(false), // TCP checks the bytes; the length is checked on decoding
		zstd.WithWindowSize(zstdWindow),
		zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)))
	if err != nil {
		panic("kiev: zstd encoder: " + err.Error()) // the options are constants
	}
	return e
})

// zstdReader is a pooled streaming zstd decoder: streaming, so that what
// a frame decodes to is read into a buffer of the length its header says
// and no further, and the decoder holds no more than its window.
type zstdReader struct {
	dec *zstd.Decoder
	src bytes.Reader
}

// zstdPools holds a pool of decoders per window size.
var zstdPools struct {
	sync.Mutex
	m map[uint64]*sync.Pool
}

// zstdReaders returns the pool of decoders for a side whose frames are at
// most limit bytes: their window is at most zstdWindow, or limit if
// smaller (a frame of kiev's whose body fits the limit has a window no
// larger).
func zstdReaders(limit int) *sync.Pool {
	w := uint64(min(zstdWindow, max(limit, zstd.MinWindowSize)))
	zstdPools.Lock()
	defer zstdPools.Unlock()
	if p := zstdPools.m[w]; p != nil {
		return p
	}
	if zstdPools.m == nil {
		zstdPools.m = make(map[uint64]*sync.Pool)
	}
	p := &sync.Pool{New: func() any {
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(1), // decode on the caller's goroutine
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(w),
			zstd.WithDecoderMaxMemory(w))
		if err != nil {
			panic("kiev: zstd decoder: " + err.Error()) // the options are valid
		}
		return &zstdReader{dec: d}
	}}
	zstdPools.m[w] = p
	return p
}

// decode decodes src, which must be one or more zstd frames, into exactly
// len(dst) bytes: it fails if they decode to fewer, or to more, reading
// one byte past dst to tell.
func (z *zstdReader) decode(src, dst []byte) error {
	z.src.Reset(src)
	defer z.src.Reset(nil) // the decoder keeps z.src, not src
	if err := z.dec.Reset(&z.src); err != nil {
		return err
	}
	if k, err := io.ReadFull(z.dec, dst); err != nil {
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			return fmt.Errorf("it decodes to %d bytes, fewer than the %d its header says", k, len(dst))
		}
		return err
	}
	var one [1]byte
	k, err := z.dec.Read(one[:])
	if k > 0 {
		return fmt.Errorf("it decodes to more than the %d bytes its header says", len(dst))
	}
	if err != io.EOF {
		return err
	}
	return nil
}

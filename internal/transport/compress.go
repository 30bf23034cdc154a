package transport

import (
	"bytes"
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

	"github.com/kievrpc/kiev/internal/codes"
	"github.com/kievrpc/kiev/internal/wire"
)

// Compression of bodies on connections: the algorithms (kiev.Compression's
// values, which name them on the wire), compressing a frame's body, and
// decompressing one within the frame limit. PROTOCOL.md, "Compression",
// says when a side compresses.
const (
	NoCompression uint8 = 0
	Zstd          uint8 = 1
	S2            uint8 = 2
)

// AlgName returns an algorithm's name: "none", "zstd" or "s2".
func AlgName(alg uint8) string {
	switch alg {
	case NoCompression:
		return "none"
	case Zstd:
		return "zstd"
	case S2:
		return "s2"
	}
	return "Compression(" + strconv.Itoa(int(alg)) + ")"
}

// KnownAlg reports whether kiev knows the algorithm alg.
func KnownAlg(alg uint8) bool { return alg == Zstd || alg == S2 }

// AlgSet is a set of known algorithms: bit c for algorithm c.
type AlgSet uint8

// Has reports whether alg is known and in s.
func (s AlgSet) Has(alg uint8) bool { return KnownAlg(alg) && s&(1<<alg) != 0 }

// SetOf returns the known algorithms of an Accept list.
func SetOf(accept []byte) AlgSet {
	var s AlgSet
	for _, a := range accept {
		if KnownAlg(a) {
			s |= 1 << a
		}
	}
	return s
}

// Compressor is one side's compression: the algorithms it uses,
// preferred first, and what it decompresses with. Its zero value
// compresses nothing and decompresses nothing.
type Compressor struct {
	Algs      []uint8 // preferred first; empty: compression off
	Threshold int     // the least body compressed, unless a call asks
	Set       AlgSet  // Algs as a set
	zstd      *sync.Pool
}

// NewCompressor returns the compression of a side that uses algs,
// preferred first, on bodies from threshold bytes up, and whose frames
// are at most maxFrame bytes.
func NewCompressor(algs []uint8, threshold, maxFrame int) *Compressor {
	c := &Compressor{Algs: algs, Threshold: threshold, zstd: zstdReaders(maxFrame)}
	for _, a := range algs {
		c.Set |= 1 << a
	}
	return c
}

// First returns the first of the side's algorithms that peer accepts.
func (c *Compressor) First(peer AlgSet) uint8 {
	for _, a := range c.Algs {
		if peer.Has(a) {
			return a
		}
	}
	return NoCompression
}

// SettingsFrame returns the Settings frame of a side that accepts
// algs and, if streams > 0, serves that many streams on a connection at
// once; nil if it has neither to announce.
func SettingsFrame(algs []uint8, streams, maxFrame int) []byte {
	if len(algs) == 0 && streams <= 0 {
		return nil
	}
	b := wire.BeginFrame(nil, wire.TypeSettings, 0)
	if len(algs) > 0 {
		b = wire.AppendField(b, wire.KeyAccept, algs)
	}
	if streams > 0 {
		b = wire.AppendUvarint(b, wire.KeyStreams, uint64(streams))
	}
	_ = wire.EndHeader(b, 0)
	_ = wire.EndFrame(b, 0, maxFrame)
	return b
}

// CompressFrame compresses the body of the frame that starts at b[start:]
// and ends b, whose header is ended, with alg, and adds the Compression
// field to its header, unless the body is shorter than least bytes or
// compressing would not make the frame smaller. The frame's length is
// left for wire.EndFrame.
func CompressFrame(b []byte, start int, alg uint8, least int) []byte {
	hlen := int(binary.BigEndian.Uint16(b[start+wire.HeaderSize-2:]))
	hdrEnd := start + wire.HeaderSize + hlen
	end := len(b)
	n := end - hdrEnd
	var tmp [3 + binary.MaxVarintLen64]byte
	field := wire.AppendCompression(tmp[:0], alg, n)
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

// names lists the side's algorithms, for errors.
func (c *Compressor) names() string {
	if c == nil || len(c.Algs) == 0 {
		return "none"
	}
	s := make([]string, len(c.Algs))
	for i, a := range c.Algs {
		s[i] = AlgName(a)
	}
	return strings.Join(s, ", ")
}

// decompressArgs decompresses the args of a call whose Request says they
// are compressed into hd.Owned, or says why it cannot: an algorithm c
// does not accept, or args that are corrupt or would decompress past
// limit.
func (c *Compressor) decompressArgs(hd *Head, limit int) (codes.Code, string) {
	if c == nil || !c.Set.Has(hd.Compression) {
		return codes.BadRequest, fmt.Sprintf("kiev: the args are compressed with %v, which this server does not accept; it accepts %s (WithCompression)", AlgName(hd.Compression), c.names())
	}
	body, err := c.Decompress(hd.Compression, hd.Decoded, hd.Body, limit)
	if err != nil {
		code := codes.TooLarge
		if errors.Is(err, ErrBadRequest) {
			code = codes.BadRequest
		}
		return code, "kiev: args: " + strings.TrimPrefix(err.Error(), "kiev: ")
	}
	hd.Body, hd.Owned, hd.Compression = nil, body, 0
	return codes.OK, ""
}

// compressReply compresses the Response frame b of the call st, which
// starts at offset 0, as the connection's negotiated algorithm alg allows,
// or as its Request asked (ReplyCompression): asked for none, none; asked
// for an algorithm c uses, that one, whatever the reply's size. A reply
// too large to send (over limit) is left for the connection to refuse.
func (c *Compressor) compressReply(st *CallState, b []byte, alg uint8, limit int) []byte {
	least := c.Threshold
	if ask := st.ReplyAsk; st.ReplyAsked && (ask == NoCompression || c.Set.Has(ask)) {
		alg, least = ask, 0
	}
	if alg == NoCompression || len(b)-4 > limit {
		return b
	}
	return CompressFrame(b, 0, alg, least)
}

// ErrCompressedDatagram refuses a compressed body in a datagram. Like
// every error of a compressed body, it fails its call, not the connection
// or socket: the frame was read whole, so the stream can still be trusted.
var ErrCompressedDatagram = fmt.Errorf("%w: a datagram carried a compressed body; kiev does not compress datagrams", ErrBadRequest)

// decompressError says why a compressed body could not be decoded.
type decompressError struct {
	alg uint8
	err error
}

func (e *decompressError) Error() string {
	return "kiev: corrupt " + AlgName(e.alg) + " body: " + e.err.Error()
}

func (e *decompressError) Unwrap() []error { return []error{ErrBadRequest, e.err} }

// tooLargeError says a body would decompress past the frame limit.
type tooLargeError struct {
	alg    uint8
	n, max uint64
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("kiev: the %v body says it decompresses to %d bytes, over this side's %d-byte frame limit (WithMaxFrameSize); send less, or raise WithMaxFrameSize on both sides", AlgName(e.alg), e.n, e.max)
}

func (e *tooLargeError) Unwrap() error { return ErrTooLarge }

// Decompress decodes src, a body compressed with alg whose Compression
// field says it was n bytes, into a buffer from the pool (PutBuf it). It
// refuses at once a body of more than limit bytes, and allocates nothing
// beyond the n bytes of the result, whatever src holds, but for a zstd
// decoder's own buffers (its window, at most zstdWindow, and its blocks':
// some 600 KB, once per decoder, pooled): a body that decodes to more
// than n bytes is stopped at n+1. Its errors are ErrTooLarge or
// ErrBadRequest.
func (c *Compressor) Decompress(alg uint8, n uint64, src []byte, limit int) (*[]byte, error) {
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
	buf := GetBuf(int(n))
	dst := (*buf)[:n]
	var err error
	if alg == S2 {
		var out []byte
		out, err = s2.Decode(dst, src)
		if err == nil && len(out) > 0 && &out[0] != &dst[0] {
			err = errors.New("s2 decoded outside its buffer") // cannot happen: DecodedLen said n
		}
	} else {
		z := c.zstd.Get().(*zstdReader)
		err = z.decode(src, dst)
		c.zstd.Put(z)
	}
	if err != nil {
		PutBuf(buf)
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

package transport

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"

	"github.com/kievrpc/kiev/internal/wire"
)

func compressible(n int) []byte {
	var b []byte
	for i := 0; len(b) < n; i++ {
		b = fmt.Appendf(b, `{"id":%d,"name":"user-%d","active":true},`, i, i)
	}
	return b[:n]
}

// frameOf returns a Response frame with body, compressed with alg if
// that makes it smaller.
func frameOf(body []byte, alg uint8) []byte {
	b := wire.BeginFrame(nil, wire.TypeResponse, 1)
	b = wire.AppendString(b, wire.KeyCodec, "msgpack")
	_ = wire.EndHeader(b, 0)
	b = append(b, body...)
	b = CompressFrame(b, 0, alg, 0)
	_ = wire.EndFrame(b, 0, 1<<30)
	return b
}

// readBack parses a frame of frameOf and returns its body, decompressed.
func readBack(o *Compressor, frame []byte, limit int) ([]byte, bool, error) {
	f, err := wire.Parse(frame[4:])
	if err != nil {
		return nil, false, err
	}
	var h wire.Header
	if err := wire.ParseHeader(f.Header, &h); err != nil {
		return nil, false, err
	}
	if string(h.Codec) != "msgpack" {
		return nil, false, fmt.Errorf("codec field %q lost", h.Codec)
	}
	if h.Compression == 0 {
		return f.Body, false, nil
	}
	buf, err := o.Decompress(h.Compression, h.Decoded, f.Body, limit)
	if err != nil {
		return nil, true, err
	}
	defer PutBuf(buf)
	return bytes.Clone(*buf), true, nil
}

func newCompressor(limit int, algs ...uint8) *Compressor {
	return NewCompressor(algs, 1<<10, limit)
}

// TestCompressFrame compresses frames with each algorithm and reads them
// back; an incompressible or empty body is left as it is.
func TestCompressFrame(t *testing.T) {
	o := newCompressor(1<<20, Zstd, S2)
	for _, alg := range []uint8{Zstd, S2} {
		for _, tc := range []struct {
			body       []byte
			compressed bool
		}{
			{compressible(16 << 10), true},
			{compressible(700 << 10), true}, // beyond zstd's window
			{compressible(100), true},
			{[]byte("short"), false},
			{nil, false},
			{bytes.Repeat([]byte{0}, 1<<20), true},
		} {
			frame := frameOf(tc.body, alg)
			got, compressed, err := readBack(o, frame, 1<<20)
			if err != nil || !bytes.Equal(got, tc.body) || compressed != tc.compressed {
				t.Fatalf("%s, %d bytes: read back %d bytes, compressed %v, %v; want compressed %v", AlgName(alg), len(tc.body), len(got), compressed, err, tc.compressed)
			}
		}
	}
}

// TestDecompressAllocation feeds bombs to decompress: bodies that decode
// to far more than they say. Refusing one allocates nothing when it says
// more than the frame limit, or for s2, a length its block does not;
// else no more than the length it says, since the decoder (a warm one, as
// its pool gives) stops reading one byte past it.
func TestDecompressAllocation(t *testing.T) {
	const limit = 1 << 20
	o := newCompressor(limit, Zstd, S2)
	zeros := make([]byte, 64<<20)
	zbomb := zstdEncoder().EncodeAll(zeros, nil) // windowed at zstdWindow
	sbomb := s2.Encode(nil, zeros[:16<<20])
	// A zstd stream without a content size, with a window the decoder
	// refuses.
	wide, _ := zstd.NewWriter(nil, zstd.WithWindowSize(8<<20), zstd.WithEncoderLevel(zstd.SpeedFastest))
	zwide := wide.EncodeAll(zeros, nil)
	good := frameOf(compressible(limit), Zstd)
	if _, _, err := readBack(o, good, limit); err != nil { // warm a decoder
		t.Fatal(err)
	}
	// Keep that one: under -race, a sync.Pool drops a fourth of what it
	// is given, on purpose.
	warm := o.zstd.Get()
	o.zstd = &sync.Pool{New: func() any { return warm }}
	for _, tc := range []struct {
		name   string
		alg    uint8
		n      uint64
		src    []byte
		is     error
		maxMem uint64
	}{
		{"zstd, says the limit", Zstd, limit, zbomb, ErrBadRequest, limit + 64<<10},
		{"zstd, says a little", Zstd, 100, zbomb, ErrBadRequest, 64 << 10},
		{"zstd, says past the limit", Zstd, 1 << 40, zbomb, ErrTooLarge, 1 << 10},
		{"zstd, wide window", Zstd, limit, zwide, ErrBadRequest, limit + 64<<10},
		{"s2, says the limit", S2, limit, sbomb, ErrBadRequest, 1 << 10},
		{"s2, says past the limit", S2, 16 << 20, sbomb, ErrTooLarge, 1 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			for range 2 { // the first may fill a pool
				runtime.ReadMemStats(&before)
				buf, err := o.Decompress(tc.alg, tc.n, tc.src, limit)
				runtime.ReadMemStats(&after)
				if err == nil {
					PutBuf(buf)
					t.Fatal("a bomb was decompressed")
				}
				if !errors.Is(err, tc.is) {
					t.Fatalf("err = %v, want %v", err, tc.is)
				}
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > tc.maxMem {
				t.Fatalf("refusing it allocated %d bytes, want at most %d", got, tc.maxMem)
			}
		})
	}
}

// FuzzDecompress feeds decompress arbitrary bodies and lengths: it must
// return exactly the length the header says, or an error, and refuse
// every length over the limit. Its input is also compressed and read
// back, which must give it back. The seeds, in
// testdata/fuzz/FuzzDecompress, are bodies of both algorithms, bombs,
// short and concatenated frames, garbage, and an unknown algorithm.
func FuzzDecompress(f *testing.F) {
	const limit = 64 << 10
	o := newCompressor(limit, Zstd, S2)
	f.Fuzz(func(t *testing.T, alg uint8, n uint32, src []byte) {
		buf, err := o.Decompress(alg, uint64(n), src, limit)
		switch {
		case err == nil && (len(*buf) != int(n) || n > limit):
			t.Fatalf("decompressed %d bytes, said %d, limit %d", len(*buf), n, limit)
		case err == nil:
			PutBuf(buf)
		case n > limit && !errors.Is(err, ErrTooLarge):
			t.Fatalf("a length over the limit gave %v, not ErrTooLarge", err)
		case n <= limit && !errors.Is(err, ErrBadRequest):
			t.Fatalf("a bad body gave %v, not ErrBadRequest", err)
		}
		if c := alg; KnownAlg(c) && len(src) <= limit {
			got, _, err := readBack(o, frameOf(src, c), limit)
			if err != nil || !bytes.Equal(got, src) {
				t.Fatalf("%s round trip of %d bytes: got %d bytes, %v", AlgName(c), len(src), len(got), err)
			}
		}
	})
}

// BenchmarkCompressFrame compresses (enc) and decompresses (dec) bodies
// of repetitive JSON of several sizes, reporting the bytes a body saves
// on the wire (saved-B/op): what WithCompressionThreshold weighs against
// the time.
func BenchmarkCompressFrame(b *testing.B) {
	o := newCompressor(1<<20, Zstd, S2)
	for _, alg := range []uint8{Zstd, S2} {
		for _, n := range []int{256, 1 << 10, 4 << 10, 16 << 10} {
			body := compressible(n)
			plain := frameOf(body, NoCompression)
			small := frameOf(body, alg)
			b.Run(fmt.Sprintf("enc/%s/%d", AlgName(alg), n), func(b *testing.B) {
				var frame []byte
				b.SetBytes(int64(n))
				for b.Loop() {
					frame = CompressFrame(append(frame[:0], plain...), 0, alg, 0)
				}
				b.ReportMetric(float64(len(plain)-len(frame)), "saved-B/op")
			})
			b.Run(fmt.Sprintf("dec/%s/%d", AlgName(alg), n), func(b *testing.B) {
				f, _ := wire.Parse(small[4:])
				var h wire.Header
				if err := wire.ParseHeader(f.Header, &h); err != nil || h.Compression != alg {
					b.Fatalf("not compressed: %v", err)
				}
				b.SetBytes(int64(n))
				for b.Loop() {
					buf, err := o.Decompress(alg, h.Decoded, f.Body, 1<<20)
					if err != nil {
						b.Fatal(err)
					}
					PutBuf(buf)
				}
			})
		}
	}
}

package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// The seed corpora live in testdata/fuzz/<FuzzName>/: valid requests,
// responses and control frames, truncated and oversized frames, garbage.

// readerResult is what a Reader made of a stream, for comparing readers.
type readerResult struct {
	frames []Frame // copies
	err    error
}

// readAll reads frames until an error, checking each frame's invariants
// and parsing its header; it copies the frames, which alias the buffer.
func readAll(t *testing.T, r *Reader, max int) readerResult {
	var res readerResult
	var h Header
	for {
		f, err := r.Next()
		if err != nil {
			res.err = err
			return res
		}
		if n := fixedSize + len(f.Header) + len(f.Body); n > max {
			t.Fatalf("Next returned a %d-byte frame, over the %d-byte limit", n, max)
		}
		if len(f.Header) > MaxHeaderLen {
			t.Fatalf("Next returned %d bytes of header fields", len(f.Header))
		}
		if ParseHeader(f.Header, &h) == nil {
			n := 0
			EachMeta(f.Header, func(k, v []byte) { n++ })
			if n != h.MetaCount {
				t.Fatalf("ParseHeader counted %d metadata pairs, EachMeta saw %d", h.MetaCount, n)
			}
		}
		res.frames = append(res.frames, Frame{
			Type:   f.Type,
			Flags:  f.Flags,
			ID:     f.ID,
			Header: bytes.Clone(f.Header),
			Body:   bytes.Clone(f.Body),
		})
	}
}

// errClass maps a Reader error to the sentinel it must match.
func errClass(t *testing.T, err error) error {
	for _, e := range []error{ErrFrameTooLarge, ErrMalformed, io.ErrUnexpectedEOF} {
		if errors.Is(err, e) {
			return e
		}
	}
	if err == io.EOF {
		return io.EOF
	}
	t.Fatalf("Next returned %v, which is no protocol error, io.EOF or io.ErrUnexpectedEOF", err)
	return nil
}

// FuzzReader feeds arbitrary bytes to a Reader. Reading must end with an
// error (the input is finite) without panicking; a Reader with a tiny
// buffer, which reads every frame through its big-frame path, and a
// pooled-size Reader whose source returns reads of changing sizes (so
// that it moves between its small and large buffers), must see exactly
// the same frames and the same kind of error.
func FuzzReader(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		const max = 1 << 20
		a := readAll(t, NewReader(bytes.NewReader(data), 4096, max), max)
		for _, other := range []struct {
			name string
			r    *Reader
		}{
			{"16-byte buffer", NewReader(bytes.NewReader(data), 16, max)},
			{"pooled buffer, stuttering source", NewReader(&stutterReader{data: data}, PooledSize, max)},
		} {
			b := readAll(t, other.r, max)
			if len(a.frames) != len(b.frames) {
				t.Fatalf("4096-byte buffer read %d frames, %s %d", len(a.frames), other.name, len(b.frames))
			}
			for i := range a.frames {
				fa, fb := a.frames[i], b.frames[i]
				if fa.Type != fb.Type || fa.Flags != fb.Flags || fa.ID != fb.ID ||
					!bytes.Equal(fa.Header, fb.Header) || !bytes.Equal(fa.Body, fb.Body) {
					t.Fatalf("frame %d differs between the 4096-byte buffer and the %s:\n%+v\n%+v", i, other.name, fa, fb)
				}
			}
			if ea, eb := errClass(t, a.err), errClass(t, b.err); ea != eb {
				t.Fatalf("final error differs between the 4096-byte buffer and the %s: %v vs %v", other.name, a.err, b.err)
			}
		}
	})
}

// stutterReader returns its data in reads of sizes that cycle from a
// few bytes to more than a Reader's small buffer.
type stutterReader struct {
	data []byte
	i    int
}

func (r *stutterReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	sizes := [...]int{3, 5000, 1, 2048, 70000, 17}
	r.i++
	m := copy(p[:min(len(p), sizes[r.i%len(sizes)])], r.data)
	r.data = r.data[m:]
	return m, nil
}

// FuzzParseHeader parses arbitrary header fields. When they parse, the
// known fields re-encoded must parse to the same Header.
func FuzzParseHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte) {
		var h Header
		if err := ParseHeader(raw, &h); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseHeader error %v does not match ErrMalformed", err)
			}
			return
		}
		var meta [][2][]byte
		EachMeta(raw, func(k, v []byte) { meta = append(meta, [2][]byte{k, v}) })
		if len(meta) != h.MetaCount {
			t.Fatalf("MetaCount %d, EachMeta saw %d", h.MetaCount, len(meta))
		}

		var re []byte
		if h.Method != nil {
			re = AppendField(re, KeyMethod, h.Method)
		}
		if h.Codec != nil {
			re = AppendField(re, KeyCodec, h.Codec)
		}
		if h.HasTimeout {
			re = AppendUvarint(re, KeyTimeout, h.Timeout)
		}
		for _, kv := range meta {
			re = AppendMeta(re, string(kv[0]), string(kv[1]))
		}
		if h.HasPriority {
			re = AppendField(re, KeyPriority, []byte{h.Priority})
		}
		if h.ErrCode != 0 {
			re = AppendUvarint(re, KeyErrCode, h.ErrCode)
		}
		if h.ErrMsg != nil {
			re = AppendField(re, KeyErrMsg, h.ErrMsg)
		}
		if h.Compression != 0 {
			re = AppendCompression(re, h.Compression, int(h.Decoded))
		}
		if h.HasReplyCompression {
			re = AppendField(re, KeyReplyCompression, []byte{h.ReplyCompression})
		}
		if h.Accept != nil {
			re = AppendField(re, KeyAccept, h.Accept)
		}
		var h2 Header
		if err := ParseHeader(re, &h2); err != nil {
			t.Fatalf("re-encoded header does not parse: %v", err)
		}
		if !bytes.Equal(h.Method, h2.Method) || !bytes.Equal(h.Codec, h2.Codec) ||
			h.HasTimeout != h2.HasTimeout || h.Timeout != h2.Timeout ||
			h.HasPriority != h2.HasPriority || h.Priority != h2.Priority ||
			h.ErrCode != h2.ErrCode || !bytes.Equal(h.ErrMsg, h2.ErrMsg) || h.MetaCount != h2.MetaCount ||
			h.Compression != h2.Compression || h.Decoded != h2.Decoded || !bytes.Equal(h.Accept, h2.Accept) ||
			h.HasReplyCompression != h2.HasReplyCompression || h.ReplyCompression != h2.ReplyCompression {
			t.Fatalf("header changed in a round trip:\n%+v\n%+v", h, h2)
		}
		i := 0
		EachMeta(re, func(k, v []byte) {
			if !bytes.Equal(k, meta[i][0]) || !bytes.Equal(v, meta[i][1]) {
				t.Fatalf("metadata pair %d changed in a round trip: %q=%q, was %q=%q", i, k, v, meta[i][0], meta[i][1])
			}
			i++
		})
	})
}

// FuzzPreface checks ParsePreface accepts exactly Magic and a non-zero
// version byte.
func FuzzPreface(f *testing.F) {
	f.Fuzz(func(t *testing.T, p []byte) {
		v, err := ParsePreface(p)
		valid := len(p) == PrefaceLen && string(p[:4]) == Magic && p[4] != 0
		switch {
		case valid && (err != nil || v != p[4]):
			t.Fatalf("ParsePreface(%q) = %d, %v; want %d, nil", p, v, err, p[4])
		case !valid && err == nil:
			t.Fatalf("ParsePreface(%q) accepted an invalid preface as version %d", p, v)
		case !valid && err != ErrBadMagic && err != ErrBadVersion:
			t.Fatalf("ParsePreface(%q) = %v, want ErrBadMagic or ErrBadVersion", p, err)
		case valid && !bytes.Equal(AppendPreface(nil, v), p):
			t.Fatalf("AppendPreface(%d) = %q, want %q", v, AppendPreface(nil, v), p)
		}
	})
}

// FuzzParseDatagram checks that any datagram is either refused or parsed
// into a frame that lies within it and whose header parses or is refused,
// without panics.
func FuzzParseDatagram(f *testing.F) {
	ok := BeginDatagram(nil, TypeRequest, 7)
	ok = AppendString(ok, KeyMethod, "Arith.Add")
	ok = AppendString(ok, KeyCodec, "msgpack")
	_ = EndHeader(ok, PrefaceLen)
	ok = append(ok, 0x92, 1, 2)
	_ = EndFrame(ok, PrefaceLen, 1<<16)
	f.Add(ok)
	f.Add(ok[:len(ok)-1])
	f.Add([]byte("KIEV\x01\x00\x00\x00\x00"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, p []byte) {
		fr, v, err := ParseDatagram(p)
		if err != nil {
			return
		}
		if v == 0 {
			t.Fatal("accepted version 0")
		}
		if n := DatagramOverhead + len(fr.Header) + len(fr.Body); n != len(p) {
			t.Fatalf("frame of %d bytes from a %d-byte datagram", n, len(p))
		}
		var h Header
		_ = ParseHeader(fr.Header, &h)
	})
}

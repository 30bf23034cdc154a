package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// TestConstants pins every value that is part of the protocol. If one of
// these fails, the change breaks every deployed peer: revert it, or add a
// new value and negotiate it as PROTOCOL.md describes.
func TestConstants(t *testing.T) {
	ints := []struct {
		name      string
		got, want int
	}{
		{"TypeRequest", int(TypeRequest), 1},
		{"TypeResponse", int(TypeResponse), 2},
		{"TypeCancel", int(TypeCancel), 3},
		{"TypePing", int(TypePing), 4},
		{"TypePong", int(TypePong), 5},
		{"TypeGoAway", int(TypeGoAway), 6},
		{"TypeSettings", int(TypeSettings), 7},
		{"TypeMessage", int(TypeMessage), 8},
		{"TypeCredit", int(TypeCredit), 9},
		{"TypeEnd", int(TypeEnd), 10},
		{"KeyMethod", int(KeyMethod), 1},
		{"KeyCodec", int(KeyCodec), 2},
		{"KeyTimeout", int(KeyTimeout), 3},
		{"KeyMeta", int(KeyMeta), 4},
		{"KeyPriority", int(KeyPriority), 5},
		{"KeyErrCode", int(KeyErrCode), 6},
		{"KeyErrMsg", int(KeyErrMsg), 7},
		{"KeySession", int(KeySession), 8},
		{"KeyAckFloor", int(KeyAckFloor), 9},
		{"KeyLimited", int(KeyLimited), 10},
		{"KeyLastID", int(KeyLastID), 11},
		{"KeyTicket", int(KeyTicket), 12},
		{"KeyAuthID", int(KeyAuthID), 13},
		{"KeyAuthTime", int(KeyAuthTime), 14},
		{"KeyAuthMAC", int(KeyAuthMAC), 15},
		{"KeyCompression", int(KeyCompression), 16},
		{"KeyAccept", int(KeyAccept), 17},
		{"KeyReplyCompression", int(KeyReplyCompression), 18},
		{"KeyStream", int(KeyStream), 19},
		{"KeyStreams", int(KeyStreams), 20},
		{"KeySize", int(KeySize), 21},
		{"KeyCredit", int(KeyCredit), 22},
		{"KeyConsumed", int(KeyConsumed), 23},
		{"Version", Version, 1},
		{"PrefaceLen", PrefaceLen, 5},
		{"HeaderSize", HeaderSize, 16},
		{"MaxHeaderLen", MaxHeaderLen, 65535},
		{"lenSize", lenSize, 4},
		{"fixedSize", fixedSize, 12},
	}
	for _, c := range ints {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if Magic != "KIEV" {
		t.Errorf("Magic = %q, want %q", Magic, "KIEV")
	}
	if got := AppendPreface(nil, 1); string(got) != "KIEV\x01" {
		t.Errorf("AppendPreface(nil, 1) = %q, want %q", got, "KIEV\x01")
	}
}

// TestFrameLayout pins the byte layout of a frame.
func TestFrameLayout(t *testing.T) {
	b := BeginFrame([]byte("xx"), TypeResponse, 0x0102030405060708)
	b = AppendString(b, KeyErrMsg, "no")
	if err := EndHeader(b, 2); err != nil {
		t.Fatal(err)
	}
	b = append(b, "body"...)
	if err := EndFrame(b, 2, 1<<20); err != nil {
		t.Fatal(err)
	}
	want := []byte{
		'x', 'x', // bytes before the frame are left alone
		0, 0, 0, 20, // length: 12 fixed + 4 header + 4 body
		2, 0, // type, flags
		1, 2, 3, 4, 5, 6, 7, 8, // id
		0, 4, // header length
		7, 2, 'n', 'o', // KeyErrMsg, len 2, "no"
		'b', 'o', 'd', 'y',
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("frame = % x\nwant    % x", b, want)
	}
}

func TestRoundTrip(t *testing.T) {
	var stream []byte

	// A request with every known field and two metadata pairs.
	start := len(stream)
	b := BeginFrame(stream, TypeRequest, 1)
	b = AppendString(b, KeyMethod, "Arith.Add")
	b = AppendString(b, KeyCodec, "msgpack")
	b = AppendUvarint(b, KeyTimeout, 1_500_000)
	b = AppendMeta(b, "trace-id", "abc123")
	b = AppendMeta(b, "", "empty key")
	b = AppendField(b, KeyPriority, []byte{9})
	if err := EndHeader(b, start); err != nil {
		t.Fatal(err)
	}
	b = append(b, "args"...)
	if err := EndFrame(b, start, 1<<20); err != nil {
		t.Fatal(err)
	}
	stream = b

	// An error response.
	start = len(stream)
	b = BeginFrame(stream, TypeResponse, 1)
	b = AppendUvarint(b, KeyErrCode, 300)
	b = AppendString(b, KeyErrMsg, "it broke")
	_ = EndHeader(b, start)
	_ = EndFrame(b, start, 1<<20)
	stream = b

	// Bodyless control frames, and a frame with the largest id.
	for _, f := range []struct {
		t  Type
		id uint64
	}{{TypePing, 7}, {TypePong, 7}, {TypeCancel, 1}, {TypeGoAway, 1<<64 - 1}} {
		start = len(stream)
		stream = BeginFrame(stream, f.t, f.id)
		_ = EndFrame(stream, start, 1<<20)
	}

	r := NewReader(bytes.NewReader(stream), 4096, 1<<20)
	var h Header

	f, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if f.Type != TypeRequest || f.ID != 1 || f.Flags != 0 || string(f.Body) != "args" {
		t.Fatalf("request frame = %+v", f)
	}
	if err := ParseHeader(f.Header, &h); err != nil {
		t.Fatal(err)
	}
	if string(h.Method) != "Arith.Add" || string(h.Codec) != "msgpack" ||
		!h.HasTimeout || h.Timeout != 1_500_000 || !h.HasPriority || h.Priority != 9 ||
		h.MetaCount != 2 || h.ErrCode != 0 || h.ErrMsg != nil {
		t.Fatalf("request header = %+v", h)
	}
	var meta []string
	EachMeta(f.Header, func(k, v []byte) { meta = append(meta, string(k)+"="+string(v)) })
	if got := strings.Join(meta, ","); got != "trace-id=abc123,=empty key" {
		t.Fatalf("metadata = %q", got)
	}

	f, err = r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if f.Type != TypeResponse || f.ID != 1 || len(f.Body) != 0 {
		t.Fatalf("response frame = %+v", f)
	}
	if err := ParseHeader(f.Header, &h); err != nil {
		t.Fatal(err)
	}
	if h.ErrCode != 300 || string(h.ErrMsg) != "it broke" || h.Method != nil || h.HasTimeout || h.HasPriority || h.MetaCount != 0 {
		t.Fatalf("response header = %+v", h)
	}

	for _, want := range []struct {
		t  Type
		id uint64
	}{{TypePing, 7}, {TypePong, 7}, {TypeCancel, 1}, {TypeGoAway, 1<<64 - 1}} {
		f, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if f.Type != want.t || f.ID != want.id || len(f.Header) != 0 || len(f.Body) != 0 {
			t.Fatalf("frame = %+v, want type %d id %d and nothing else", f, want.t, want.id)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("Next at end = %v, want io.EOF", err)
	}
}

// TestParseHeaderResets checks that ParseHeader clears what an earlier
// frame left in h.
func TestParseHeaderResets(t *testing.T) {
	h := Header{Method: []byte("x"), HasTimeout: true, ErrCode: 9, MetaCount: 3}
	if err := ParseHeader(nil, &h); err != nil {
		t.Fatal(err)
	}
	if h.Method != nil || h.HasTimeout || h.ErrCode != 0 || h.MetaCount != 0 {
		t.Fatalf("header after empty parse = %+v, want zero", h)
	}
}

// Limited marks an Overloaded error refused at the method's limit; any
// value is taken, as an older peer would skip the field whatever it held.
func TestParseHeaderLimited(t *testing.T) {
	for _, v := range []string{"", "x"} {
		var raw []byte
		raw = AppendUvarint(raw, KeyErrCode, 8)
		raw = AppendString(raw, KeyLimited, v)
		var h Header
		if err := ParseHeader(raw, &h); err != nil || !h.Limited || h.ErrCode != 8 {
			t.Fatalf("value %q: header %+v, err %v; want Limited", v, h, err)
		}
	}
	var h Header
	if err := ParseHeader(AppendUvarint(nil, KeyErrCode, 8), &h); err != nil || h.Limited {
		t.Fatalf("without the field: header %+v, err %v", h, err)
	}
}

func TestUnknownHeaderKeysSkipped(t *testing.T) {
	var raw []byte
	raw = AppendString(raw, 200, "from the future")
	raw = AppendString(raw, KeyMethod, "S.M")
	raw = AppendField(raw, 0, nil)
	raw = AppendField(raw, 255, bytes.Repeat([]byte{0xff}, 300)) // two-byte length
	raw = AppendMeta(raw, "k", "v")
	raw = AppendField(raw, 8, []byte{1, 2, 3})
	var h Header
	if err := ParseHeader(raw, &h); err != nil {
		t.Fatalf("ParseHeader: %v", err)
	}
	if string(h.Method) != "S.M" || h.MetaCount != 1 {
		t.Fatalf("header = %+v", h)
	}
	n := 0
	EachMeta(raw, func(k, v []byte) {
		n++
		if string(k) != "k" || string(v) != "v" {
			t.Errorf("meta %q=%q", k, v)
		}
	})
	if n != 1 {
		t.Fatalf("EachMeta saw %d pairs, want 1", n)
	}
}

func TestUnknownFrameTypeReturned(t *testing.T) {
	var s []byte
	s = BeginFrame(s, 99, 5)
	s = AppendString(s, 200, "x")
	_ = EndHeader(s, 0)
	s = append(s, "future body"...)
	_ = EndFrame(s, 0, 1<<20)
	start := len(s)
	s = BeginFrame(s, TypePing, 6)
	_ = EndFrame(s, start, 1<<20)

	r := NewReader(bytes.NewReader(s), 4096, 1<<20)
	f, err := r.Next()
	if err != nil || f.Type != 99 || f.ID != 5 || string(f.Body) != "future body" {
		t.Fatalf("Next = %+v, %v; want the type-99 frame", f, err)
	}
	f, err = r.Next()
	if err != nil || f.Type != TypePing || f.ID != 6 {
		t.Fatalf("Next after unknown frame = %+v, %v; want the ping", f, err)
	}
}

// rawFrame builds a raw frame: length prefix n, then rest.
func rawFrame(n uint32, rest ...byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, n), rest...)
}

func TestReaderErrors(t *testing.T) {
	// fixed returns the 12 fixed bytes of a request frame with hlen.
	fixed := func(hlen uint16) []byte {
		b := []byte{byte(TypeRequest), 0, 0, 0, 0, 0, 0, 0, 0, 1}
		return binary.BigEndian.AppendUint16(b, hlen)
	}
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty stream", nil, io.EOF},
		{"over max", rawFrame(1<<20 + 1), ErrFrameTooLarge},
		{"length 0xffffffff", rawFrame(0xffffffff), ErrFrameTooLarge},
		{"under fixed header", rawFrame(11, make([]byte, 11)...), ErrMalformed},
		{"length 0", rawFrame(0), ErrMalformed},
		{"hlen past frame end", rawFrame(14, append(fixed(3), 1, 0)...), ErrMalformed},
		{"hlen 0xffff", rawFrame(12, fixed(0xffff)...), ErrMalformed},
		{"partial length prefix", []byte{0, 0}, io.ErrUnexpectedEOF},
		{"truncated fixed header", rawFrame(12, 1, 0, 0), io.ErrUnexpectedEOF},
		{"truncated body", rawFrame(100, fixed(0)...), io.ErrUnexpectedEOF},
		{"truncated big frame", rawFrame(200<<10, fixed(0)...), io.ErrUnexpectedEOF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NewReader(bytes.NewReader(c.in), 64<<10, 1<<20)
			_, err := r.Next()
			if !errors.Is(err, c.want) {
				t.Fatalf("Next = %v, want %v", err, c.want)
			}
		})
	}
}

// TestEOFBetweenFrames checks that a stream ending after a whole frame
// ends with a clean io.EOF, and one ending inside a frame does not.
func TestEOFBetweenFrames(t *testing.T) {
	one := BeginFrame(nil, TypePing, 1)
	_ = EndFrame(one, 0, 1<<20)
	two := append(append([]byte(nil), one...), one...)

	r := NewReader(bytes.NewReader(two), 4096, 1<<20)
	for i := range 2 {
		if _, err := r.Next(); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("Next after last frame = %v, want io.EOF", err)
	}

	r = NewReader(bytes.NewReader(two[:len(two)-1]), 4096, 1<<20)
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("Next on cut frame = %v, want io.ErrUnexpectedEOF", err)
	}
}

// TestBufferedSaysWhetherNextReads checks that Buffered is true exactly
// when the next frame is buffered whole: a reader that wakes others
// before it may block relies on it.
func TestBufferedSaysWhetherNextReads(t *testing.T) {
	one := BeginFrame(nil, TypePing, 1)
	_ = EndFrame(one, 0, 1<<20)
	two := append(append([]byte(nil), one...), one[:len(one)-1]...) // a frame and all but a byte of another
	pr, pw := io.Pipe()
	go func() {
		pw.Write(two)
		pw.Write(one[len(one)-1:])
		pw.Close()
	}()
	r := NewReader(pr, 4096, 1<<20)
	if r.Buffered() {
		t.Fatal("Buffered before any read = true")
	}
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if r.Buffered() {
		t.Fatal("Buffered with part of a frame in the buffer = true, want false: Next would read")
	}
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if r.Buffered() {
		t.Fatal("Buffered after the last frame = true")
	}

	r = NewReader(bytes.NewReader(append(append([]byte(nil), one...), one...)), 4096, 1<<20)
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if !r.Buffered() {
		t.Fatal("Buffered with the next frame read whole = false")
	}
}

func TestParseHeaderErrors(t *testing.T) {
	cases := []struct {
		name string
		raw  []byte
	}{
		{"key without length", []byte{byte(KeyMethod)}},
		{"field past header", []byte{byte(KeyMethod), 5, 'a', 'b'}},
		{"unknown field past header", []byte{200, 2, 'a'}},
		{"length varint cut", []byte{byte(KeyMethod), 0x80}},
		{"length varint overflow", append([]byte{byte(KeyMethod)}, bytes.Repeat([]byte{0xff}, 10)...)},
		{"huge length", append([]byte{byte(KeyCodec)}, binary.AppendUvarint(nil, 1<<63)...)},
		{"second field past header", append(AppendString(nil, KeyMethod, "S.M"), byte(KeyCodec), 9)},
		{"priority 10", []byte{byte(KeyPriority), 1, 10}},
		{"priority 255", []byte{byte(KeyPriority), 1, 255}},
		{"priority empty", []byte{byte(KeyPriority), 0}},
		{"priority two bytes", []byte{byte(KeyPriority), 2, 1, 1}},
		{"timeout empty", []byte{byte(KeyTimeout), 0}},
		{"timeout cut varint", []byte{byte(KeyTimeout), 1, 0x80}},
		{"err code empty", []byte{byte(KeyErrCode), 0}},
		{"meta empty", []byte{byte(KeyMeta), 0}},
		{"meta key past value", []byte{byte(KeyMeta), 3, 5, 'a', 'b'}},
		{"compression empty", []byte{byte(KeyCompression), 0}},
		{"compression without length", []byte{byte(KeyCompression), 1, 1}},
		{"compression algorithm 0", []byte{byte(KeyCompression), 2, 0, 5}},
		{"compression length cut", []byte{byte(KeyCompression), 2, 1, 0x80}},
		{"compression trailing byte", []byte{byte(KeyCompression), 3, 1, 5, 0}},
		{"reply compression empty", []byte{byte(KeyReplyCompression), 0}},
		{"reply compression two bytes", []byte{byte(KeyReplyCompression), 2, 1, 2}},
		{"stream credit cut off", []byte{byte(KeyStream), 1, 0x80}},
		{"size with trailing bytes", []byte{byte(KeySize), 2, 1, 2}},
		{"credit empty", []byte{byte(KeyCredit), 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var h Header
			if err := ParseHeader(c.raw, &h); !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseHeader(% x) = %v, want ErrMalformed", c.raw, err)
			}
		})
	}
	// Every priority from 0 to 9 is valid.
	for p := range byte(10) {
		var h Header
		if err := ParseHeader([]byte{byte(KeyPriority), 1, p}, &h); err != nil || !h.HasPriority || h.Priority != p {
			t.Errorf("priority %d: %+v, %v", p, h, err)
		}
	}
}

// TestCompressionFields pins the bytes of the compression fields and
// reads them back: a Settings frame's Accept list, a compressed body's
// algorithm and length, and a Request's ask for its reply.
func TestCompressionFields(t *testing.T) {
	b := BeginFrame(nil, TypeSettings, 0)
	b = AppendField(b, KeyAccept, []byte{1, 2})
	_ = EndHeader(b, 0)
	_ = EndFrame(b, 0, 1<<20)
	want := []byte{0, 0, 0, 16, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 17, 2, 1, 2}
	if !bytes.Equal(b, want) {
		t.Fatalf("Settings = % x\nwant       % x", b, want)
	}
	f, err := Parse(b[4:])
	if err != nil {
		t.Fatal(err)
	}
	var h Header
	if err := ParseHeader(f.Header, &h); err != nil || f.Type != TypeSettings || !bytes.Equal(h.Accept, []byte{1, 2}) {
		t.Fatalf("Settings read back as %+v, %+v, %v", f, h, err)
	}

	raw := AppendCompression(nil, 2, 16384)
	raw = AppendField(raw, KeyReplyCompression, []byte{0})
	if want := []byte{16, 4, 2, 0x80, 0x80, 1, 18, 1, 0}; !bytes.Equal(raw, want) {
		t.Fatalf("fields = % x, want % x", raw, want)
	}
	if err := ParseHeader(raw, &h); err != nil {
		t.Fatal(err)
	}
	if h.Compression != 2 || h.Decoded != 16384 || !h.HasReplyCompression || h.ReplyCompression != 0 || h.Accept != nil {
		t.Fatalf("read back as %+v", h)
	}
	// An algorithm this package does not know is the caller's to refuse.
	if err := ParseHeader(AppendCompression(nil, 200, 1), &h); err != nil || h.Compression != 200 {
		t.Fatalf("unknown algorithm: %+v, %v", h, err)
	}
}

// TestFrameLargerThanBuffer reads frames that do not fit the reader's
// buffer, interleaved with small ones, so the big-frame path and its
// buffer reuse are both exercised.
func TestFrameLargerThanBuffer(t *testing.T) {
	bodies := [][]byte{
		pattern(200 << 10),
		[]byte("small"),
		pattern(64<<10 - HeaderSize + 1), // one byte over the buffer
		pattern(64<<10 - HeaderSize),     // fits exactly
		pattern(100 << 10),
		pattern(900 << 10),
	}
	var s []byte
	for i, body := range bodies {
		start := len(s)
		s = BeginFrame(s, TypeRequest, uint64(i))
		s = AppendString(s, KeyMethod, "S.M")
		_ = EndHeader(s, start)
		s = append(s, body...)
		if err := EndFrame(s, start, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	// Deliver at most 1000 bytes per Read, so frames arrive in pieces.
	r := NewReader(&chunkReader{data: s, n: 1000}, 64<<10, 1<<20)
	for i, body := range bodies {
		f, err := r.Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if f.ID != uint64(i) || string(f.Header) != "\x01\x03S.M" || !bytes.Equal(f.Body, body) {
			t.Fatalf("frame %d: id %d, header %q, %d-byte body differs from the %d bytes sent", i, f.ID, f.Header, len(f.Body), len(body))
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("Next at end = %v, want io.EOF", err)
	}
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	data []byte
	n    int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	m := copy(p[:min(len(p), r.n)], r.data)
	r.data = r.data[m:]
	return m, nil
}

// TestHugeAnnouncedFrameSmallAllocation checks that a peer announcing a
// 15 MiB frame and sending 10 bytes costs a small allocation, not 15 MiB.
func TestHugeAnnouncedFrameSmallAllocation(t *testing.T) {
	in := rawFrame(15<<20, make([]byte, 10)...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := NewReader(bytes.NewReader(in), 64<<10, 16<<20)
	_, err := r.Next()
	runtime.ReadMemStats(&after)
	if err != io.ErrUnexpectedEOF {
		t.Fatalf("Next = %v, want io.ErrUnexpectedEOF", err)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d >= 2<<20 {
		t.Fatalf("reading a 15 MiB announcement with 10 bytes behind it allocated %d bytes, want < 2 MiB", d)
	}
}

func TestParsePreface(t *testing.T) {
	cases := []struct {
		name string
		in   string
		v    uint8
		err  error
	}{
		{"version 1", "KIEV\x01", 1, nil},
		{"newer version", "KIEV\x07", 7, nil},
		{"version 255", "KIEV\xff", 255, nil},
		{"version 0", "KIEV\x00", 0, ErrBadVersion},
		{"wrong magic", "KIEW\x01", 0, ErrBadMagic},
		{"lower case magic", "kiev\x01", 0, ErrBadMagic},
		{"http", "HTTP/", 0, ErrBadMagic},
		{"short", "KIEV", 0, ErrBadMagic},
		{"empty", "", 0, ErrBadMagic},
		{"long", "KIEV\x01\x01", 0, ErrBadMagic},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := ParsePreface([]byte(c.in))
			if v != c.v || err != c.err {
				t.Fatalf("ParsePreface(%q) = %d, %v; want %d, %v", c.in, v, err, c.v, c.err)
			}
		})
	}
}

func TestReadPreface(t *testing.T) {
	v, err := ReadPreface(strings.NewReader("KIEV\x02rest"))
	if v != 2 || err != nil {
		t.Fatalf("ReadPreface = %d, %v; want 2, nil", v, err)
	}
	if _, err := ReadPreface(strings.NewReader("KIE")); err != io.ErrUnexpectedEOF {
		t.Fatalf("ReadPreface on 3 bytes = %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := ReadPreface(strings.NewReader("")); err != io.EOF {
		t.Fatalf("ReadPreface on nothing = %v, want io.EOF", err)
	}
}

func TestEndHeaderTooLong(t *testing.T) {
	b := BeginFrame(nil, TypeRequest, 1)
	b = AppendString(b, KeyErrMsg, strings.Repeat("x", MaxHeaderLen-4)) // 1-byte key + 3-byte length + value = 65535
	if err := EndHeader(b, 0); err != nil {
		t.Fatalf("EndHeader on exactly %d bytes: %v", MaxHeaderLen, err)
	}
	if got := binary.BigEndian.Uint16(b[HeaderSize-2:]); got != MaxHeaderLen {
		t.Fatalf("hlen = %d, want %d", got, MaxHeaderLen)
	}
	b = append(b, 'x')
	if err := EndHeader(b, 0); err != ErrHeaderTooLong {
		t.Fatalf("EndHeader on %d bytes = %v, want ErrHeaderTooLong", MaxHeaderLen+1, err)
	}
	b = AppendString(b, KeyMethod, strings.Repeat("y", 70000))
	if err := EndHeader(b, 0); err != ErrHeaderTooLong {
		t.Fatalf("EndHeader on %d bytes = %v, want ErrHeaderTooLong", len(b)-HeaderSize, err)
	}
}

func TestEndFrameMax(t *testing.T) {
	b := BeginFrame(nil, TypeResponse, 1)
	_ = EndHeader(b, 0)
	b = append(b, make([]byte, 100)...)
	if err := EndFrame(b, 0, 112); err != nil { // 12 fixed + 100 body
		t.Fatalf("EndFrame at the limit: %v", err)
	}
	if got := binary.BigEndian.Uint32(b); got != 112 {
		t.Fatalf("length = %d, want 112", got)
	}
	if err := EndFrame(b, 0, 111); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("EndFrame over the limit = %v, want ErrFrameTooLarge", err)
	}
}

// loopReader replays data for ever.
type loopReader struct {
	data []byte
	off  int
}

func (r *loopReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m := copy(p[n:], r.data[r.off:])
		n += m
		r.off = (r.off + m) % len(r.data)
	}
	return n, nil
}

// TestReadAllocs checks that reading small frames and their headers
// allocates nothing per frame.
func TestReadAllocs(t *testing.T) {
	var s []byte
	for i := range 1000 {
		start := len(s)
		s = BeginFrame(s, TypeRequest, uint64(i))
		s = AppendString(s, KeyMethod, "Arith.Add")
		s = AppendString(s, KeyCodec, "msgpack")
		s = AppendUvarint(s, KeyTimeout, 5_000_000)
		s = AppendMeta(s, "trace-id", "0af7651916cd43dd8448eb211c80319c")
		_ = EndHeader(s, start)
		s = append(s, 0x82, 0xa1, 'A', 7, 0xa1, 'B', 8)
		_ = EndFrame(s, start, 1<<20)
	}
	r := NewReader(&loopReader{data: s}, 64<<10, 1<<20)
	var h Header
	var failed error
	allocs := testing.AllocsPerRun(10000, func() {
		f, err := r.Next()
		if err == nil {
			err = ParseHeader(f.Header, &h)
		}
		if err != nil && failed == nil {
			failed = err
		}
	})
	if failed != nil {
		t.Fatal(failed)
	}
	if allocs != 0 {
		t.Fatalf("Next + ParseHeader allocated %v times per frame, want 0", allocs)
	}
}

func TestDatagramRoundTrip(t *testing.T) {
	b := BeginDatagram([]byte("junk"), TypeResponse, 42)
	b = AppendString(b, KeyCodec, "msgpack")
	if err := EndHeader(b, 4+PrefaceLen); err != nil {
		t.Fatal(err)
	}
	b = append(b, "body"...)
	if err := EndFrame(b, 4+PrefaceLen, 1<<16); err != nil {
		t.Fatal(err)
	}
	f, v, err := ParseDatagram(b[4:])
	if err != nil || v != Version || f.Type != TypeResponse || f.ID != 42 || string(f.Body) != "body" {
		t.Fatalf("ParseDatagram = %+v, %d, %v", f, v, err)
	}
	for _, bad := range [][]byte{
		nil,
		[]byte("KIEV"),
		append([]byte("KIEX"), b[4+4:]...),
		append([]byte("KIEV\x00"), b[4+PrefaceLen:]...),
		b[4 : len(b)-1],
		append(append([]byte{}, b[4:]...), 0),
	} {
		if _, _, err := ParseDatagram(bad); err == nil {
			t.Errorf("ParseDatagram(%q) accepted it", bad)
		}
	}
}

// countBudget is a Budget of max bytes that remembers the most it held.
type countBudget struct {
	mu        sync.Mutex
	used, max int
	peak      int
}

func (b *countBudget) Take(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	b.peak = max(b.peak, b.used)
	return true
}

func (b *countBudget) Give(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
}

func (b *countBudget) get() (used, peak int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.peak
}

// TestLargeFrameHoldsWhatArrived announces a 16 MiB frame and sends 200
// KiB of it. The reader held up to twice what had arrived (its buffer
// doubled ahead of the bytes); now what arrived plus one 64 KiB chunk,
// taken from its budget and given back by the next Next or Release.
func TestLargeFrameHoldsWhatArrived(t *testing.T) {
	pr, pw := io.Pipe()
	b := &countBudget{max: 1 << 30}
	r := NewReader(pr, 4096, 32<<20)
	r.SetBudget(b)
	done := make(chan error, 1)
	go func() {
		_, err := r.Next()
		done <- err
	}()
	head := BeginFrame(nil, TypeRequest, 1)
	if err := EndHeader(head, 0); err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint32(head, 16<<20) // the length the peer announces
	sent := 200 << 10
	if _, err := pw.Write(append(head, make([]byte, sent)...)); err != nil {
		t.Fatal(err)
	}
	pw.Close() // the rest never comes
	if err := <-done; !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Next: %v; want io.ErrUnexpectedEOF", err)
	}
	if _, peak := b.get(); peak > sent+64<<10 {
		t.Errorf("held %d bytes for a frame of which %d arrived; want at most a 64 KiB chunk more", peak, sent)
	}
	r.Release()
	if used, _ := b.get(); used != 0 {
		t.Errorf("%d bytes still held after Release", used)
	}

	// Past its budget, Next fails with ErrBudget.
	var frame []byte
	frame = BeginFrame(frame, TypeRequest, 2)
	if err := EndHeader(frame, 0); err != nil {
		t.Fatal(err)
	}
	frame = append(frame, make([]byte, 300<<10)...)
	if err := EndFrame(frame, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	small := &countBudget{max: 256 << 10}
	r = NewReader(bytes.NewReader(frame), 4096, 1<<20)
	r.SetBudget(small)
	if _, err := r.Next(); !errors.Is(err, ErrBudget) {
		t.Errorf("a 300 KiB frame on a 256 KiB budget: %v; want ErrBudget", err)
	}
	r.Release()
	// Within it, the frame arrives whole, and the next Next gives its
	// bytes back.
	big := &countBudget{max: 1 << 20}
	r = NewReader(bytes.NewReader(frame), 4096, 1<<20)
	r.SetBudget(big)
	f, err := r.Next()
	if err != nil || len(f.Body) != 300<<10 {
		t.Fatalf("Next: %d bytes, %v; want the 300 KiB body", len(f.Body), err)
	}
	if used, _ := big.get(); used < 300<<10 {
		t.Errorf("%d bytes held while the frame is in use; want its size", used)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("Next at the end: %v", err)
	}
	if used, _ := big.get(); used != 0 {
		t.Errorf("%d bytes still held after the next Next", used)
	}
}

// TestLastID round-trips a GoAway's LastID, and an older server's GoAway,
// which has none.
func TestLastID(t *testing.T) {
	b := BeginFrame(nil, TypeGoAway, 0)
	b = AppendUvarint(b, KeyLastID, 1<<40)
	if err := EndHeader(b, 0); err != nil {
		t.Fatal(err)
	}
	f, err := Parse(b[lenSize:])
	if err != nil {
		t.Fatal(err)
	}
	var h Header
	if err := ParseHeader(f.Header, &h); err != nil || !h.HasLastID || h.LastID != 1<<40 {
		t.Errorf("LastID %d (present %v), %v; want 1<<40", h.LastID, h.HasLastID, err)
	}
	if err := ParseHeader(nil, &h); err != nil || h.HasLastID {
		t.Errorf("a GoAway with no header: LastID present %v, %v", h.HasLastID, err)
	}
}

package kiev_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/internal/wire"
)

// jsonText returns n bytes of repetitive JSON, as compressible as the
// lists of records services send each other.
func jsonText(n int) []byte {
	var b []byte
	for i := 0; len(b) < n; i++ {
		b = fmt.Appendf(b, `{"id":%d,"name":"user-%d","email":"user%d@example.com","active":true,"roles":["reader","writer"]},`, i, i, i)
	}
	return b[:n]
}

// seen is a frame a sniffer saw go by.
type seen struct {
	typ      wire.Type
	alg      uint8 // its Compression field, 0 if none
	decoded  uint64
	body     int // bytes of body on the wire
	ask      int // its ReplyCompression field, -1 if none
	accept   []byte
	hdrError error // its header did not parse
}

// sniffer is a client's connection that reads the frames going by in
// both directions, after the prefaces: what a client sent (out) and what
// it received (in).
type sniffer struct {
	net.Conn
	mu      sync.Mutex
	out, in frameStream
}

type frameStream struct {
	buf    []byte
	frames []seen
	bytes  int // every byte, the preface's too
}

// add takes in stream bytes and parses the whole frames among them.
func (s *frameStream) add(p []byte) {
	if skip := wire.PrefaceLen - s.bytes; skip > 0 { // each way starts with a preface
		s.bytes += min(skip, len(p))
		p = p[min(skip, len(p)):]
	}
	s.buf = append(s.buf, p...)
	s.bytes += len(p)
	for len(s.buf) >= 4 {
		n := int(binary.BigEndian.Uint32(s.buf))
		if len(s.buf) < 4+n {
			return
		}
		f, err := wire.Parse(s.buf[4 : 4+n])
		s.buf = s.buf[4+n:]
		if err != nil {
			s.frames = append(s.frames, seen{hdrError: err})
			continue
		}
		var h wire.Header
		err = wire.ParseHeader(f.Header, &h)
		sn := seen{typ: f.Type, alg: h.Compression, decoded: h.Decoded, body: len(f.Body), ask: -1, accept: bytes.Clone(h.Accept), hdrError: err}
		if h.HasReplyCompression {
			sn.ask = int(h.ReplyCompression)
		}
		s.frames = append(s.frames, sn)
	}
}

// Write notes the frames before it writes them: the reply to a Request
// may come before the Write of the Request returns.
func (s *sniffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.out.add(p)
	s.mu.Unlock()
	return s.Conn.Write(p)
}

func (s *sniffer) Read(p []byte) (int, error) {
	n, err := s.Conn.Read(p)
	s.mu.Lock()
	s.in.add(p[:n])
	s.mu.Unlock()
	return n, err
}

// calls returns the Requests the client sent and the Responses it
// received since the last look, and the Settings each way.
func (s *sniffer) calls() (reqs, resps, settingsOut, settingsIn []seen) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.out.frames {
		switch {
		case f.typ == wire.TypeSettings:
			settingsOut = append(settingsOut, f)
		case f.typ == wire.TypeRequest || f.hdrError != nil:
			reqs = append(reqs, f)
		}
	}
	for _, f := range s.in.frames {
		switch {
		case f.typ == wire.TypeSettings:
			settingsIn = append(settingsIn, f)
		case f.typ == wire.TypeResponse || f.hdrError != nil:
			resps = append(resps, f)
		}
	}
	s.out.frames, s.in.frames = nil, nil
	return reqs, resps, settingsOut, settingsIn
}

// sniffDialer returns a dialer for WithContextDialer whose connections
// are sniffers, and a function that returns the last one.
func sniffDialer() (kiev.DialOption, func() *sniffer) {
	var mu sync.Mutex
	var last *sniffer
	opt := kiev.WithContextDialer(func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		s := &sniffer{Conn: nc}
		mu.Lock()
		last = s
		mu.Unlock()
		return s, nil
	})
	return opt, func() *sniffer {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// echo calls Arith.Echo with b on c and checks the reply.
func echo(t *testing.T, ctx context.Context, c *kiev.Client, b []byte) {
	t.Helper()
	var got []byte
	if err := c.Call(ctx, "Arith.Echo", b, &got); err != nil {
		t.Fatalf("Echo of %d bytes: %v", len(b), err)
	}
	if !bytes.Equal(got, b) {
		t.Fatalf("Echo of %d bytes returned %d other bytes", len(b), len(got))
	}
}

// oneEach checks that one Request and one Response went by since the
// last look, compressed with req and resp (0: not compressed).
func oneEach(t *testing.T, s *sniffer, req, resp uint8) (seen, seen) {
	t.Helper()
	reqs, resps, _, _ := s.calls()
	return check1(t, "Request", reqs, req), check1(t, "Response", resps, resp)
}

func check1(t *testing.T, what string, fs []seen, alg uint8) seen {
	t.Helper()
	if len(fs) != 1 {
		t.Fatalf("%d %s frames went by, want 1: %+v", len(fs), what, fs)
	}
	f := fs[0]
	if f.hdrError != nil {
		t.Fatalf("%s: %v", what, f.hdrError)
	}
	if f.alg != alg {
		t.Fatalf("%s compressed with %d, want %d (%+v)", what, f.alg, alg, f)
	}
	return f
}

// noise returns n incompressible bytes.
func noise(n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{1})
	_, _ = r.Read(b)
	return b
}

// TestCompressionNegotiated runs calls between two sides with compression:
// each announces its algorithms in a Settings frame, and bodies from the
// threshold up go compressed both ways, with the client's choice among
// the server's algorithms; small and incompressible bodies go as they are.
func TestCompressionNegotiated(t *testing.T) {
	for _, alg := range []kiev.Compression{kiev.Zstd, kiev.S2} {
		t.Run(alg.String(), func(t *testing.T) {
			addr := newArithServer(t, nil, kiev.WithCompression(kiev.Zstd, kiev.S2))
			opt, last := sniffDialer()
			c := dial(t, addr, opt, kiev.WithCompression(alg))
			ctx := context.Background()
			big := jsonText(16 << 10)
			// The first call may leave before the server's Settings is read.
			echo(t, ctx, c, big)
			s := last()
			_, _, so, si := s.calls()
			if len(so) != 1 || !bytes.Equal(so[0].accept, []byte{byte(alg)}) {
				t.Fatalf("the client sent Settings %+v, want one listing %v", so, alg)
			}
			if len(si) != 1 || !bytes.Equal(si[0].accept, []byte{byte(kiev.Zstd), byte(kiev.S2)}) {
				t.Fatalf("the server sent Settings %+v, want one listing zstd, s2", si)
			}
			for range 3 {
				echo(t, ctx, c, big)
				req, resp := oneEach(t, s, uint8(alg), uint8(alg))
				for _, f := range []seen{req, resp} {
					if f.decoded != 16<<10+3 || f.body > 16<<10/4 {
						t.Fatalf("a %d-byte body (msgpack of 16 KiB) went as %d bytes, saying %d", 16<<10+3, f.body, f.decoded)
					}
				}
			}
			// Below the threshold, and incompressible: as they are.
			echo(t, ctx, c, jsonText(kiev.DefaultCompressionThreshold-10))
			oneEach(t, s, 0, 0)
			echo(t, ctx, c, noise(16<<10))
			oneEach(t, s, 0, 0)
		})
	}
}

// TestCompressionThreshold checks WithCompressionThreshold on each side.
func TestCompressionThreshold(t *testing.T) {
	addr := newArithServer(t, nil, kiev.WithCompression(kiev.S2), kiev.WithCompressionThreshold(10<<10))
	opt, last := sniffDialer()
	c := dial(t, addr, opt, kiev.WithCompression(kiev.S2), kiev.WithCompressionThreshold(100))
	ctx := context.Background()
	echo(t, ctx, c, jsonText(500))
	s := last()
	s.calls()
	echo(t, ctx, c, jsonText(500))
	oneEach(t, s, uint8(kiev.S2), 0)
	echo(t, ctx, c, jsonText(12<<10))
	oneEach(t, s, uint8(kiev.S2), uint8(kiev.S2))
}

// TestCompressionAllowList checks that a server's WithCompression is what
// it accepts: a client uses one of those or none, and a Request
// compressed with another is refused.
func TestCompressionAllowList(t *testing.T) {
	addr := newArithServer(t, nil, kiev.WithCompression(kiev.S2))
	ctx := context.Background()
	big := jsonText(16 << 10)
	for _, tc := range []struct {
		name      string
		client    []kiev.Compression
		call      *kiev.Compression
		req, resp kiev.Compression
	}{
		{"client zstd, s2", []kiev.Compression{kiev.Zstd, kiev.S2}, nil, kiev.S2, kiev.S2},
		{"client zstd", []kiev.Compression{kiev.Zstd}, nil, 0, 0},
		{"client zstd, call zstd", []kiev.Compression{kiev.Zstd}, ptr(kiev.Zstd), 0, 0},
		{"client zstd, s2, call zstd", []kiev.Compression{kiev.Zstd, kiev.S2}, ptr(kiev.Zstd), kiev.S2, kiev.S2},
		{"client none, call zstd", nil, ptr(kiev.Zstd), 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt, last := sniffDialer()
			c := dial(t, addr, opt, kiev.WithCompression(tc.client...))
			cctx := ctx
			if tc.call != nil {
				cctx = kiev.WithCallCompression(ctx, *tc.call)
			}
			echo(t, cctx, c, big)
			s := last()
			s.calls()
			for range 3 {
				echo(t, cctx, c, big)
				oneEach(t, s, uint8(tc.req), uint8(tc.resp))
			}
		})
	}

	// A Request compressed with zstd, which no kiev client sends to this
	// server, is refused.
	rc := dialRaw(t, addr)
	args, _ := msgpack.Marshal(big)
	z, _ := zstd.NewWriter(nil)
	code, msg, _ := rc.call(t, "Arith.Echo", zstdBody(z, args), uint8(kiev.Zstd), uint64(len(args)))
	if code != kiev.CodeBadRequest || !strings.Contains(msg, "zstd, which this server does not accept; it accepts s2 (WithCompression)") {
		t.Fatalf("zstd Request to an s2 server: code %v, %q", code, msg)
	}
}

func ptr[T any](v T) *T { return &v }

// TestCallCompression checks WithCallCompression: it turns compression
// off for a call, or on whatever the body's size, both ways, and works on
// a client without WithCompression.
func TestCallCompression(t *testing.T) {
	addr := newArithServer(t, nil, kiev.WithCompression(kiev.Zstd, kiev.S2))
	ctx := context.Background()
	big, small := jsonText(16<<10), jsonText(300)

	opt, last := sniffDialer()
	c := dial(t, addr, opt, kiev.WithCompression(kiev.Zstd))
	echo(t, ctx, c, big)
	s := last()
	s.calls()
	echo(t, kiev.WithCallCompression(ctx, kiev.NoCompression), c, big)
	if req, _ := oneEach(t, s, 0, 0); req.ask != 0 {
		t.Fatalf("the Request asked for %d for its reply, want 0 (none)", req.ask)
	}
	echo(t, kiev.WithCallCompression(ctx, kiev.S2), c, small)
	if req, _ := oneEach(t, s, uint8(kiev.S2), uint8(kiev.S2)); req.ask != int(kiev.S2) {
		t.Fatalf("the Request asked for %d for its reply, want s2", req.ask)
	}
	echo(t, ctx, c, small) // back to the client's defaults: below the threshold
	if req, _ := oneEach(t, s, 0, 0); req.ask != -1 {
		t.Fatalf("a call without WithCallCompression asked for %d for its reply", req.ask)
	}

	opt, last = sniffDialer()
	c = dial(t, addr, opt) // no WithCompression
	echo(t, ctx, c, big)
	s = last()
	if _, _, so, _ := s.calls(); len(so) != 0 {
		t.Fatalf("a client without compression sent Settings: %+v", so)
	}
	echo(t, ctx, c, big)
	oneEach(t, s, 0, 0)
	echo(t, kiev.WithCallCompression(ctx, kiev.Zstd), c, big)
	oneEach(t, s, uint8(kiev.Zstd), uint8(kiev.Zstd))

	// Over UDP, it changes nothing.
	srv := kiev.NewServer(kiev.WithCompression(kiev.Zstd))
	if err := srv.Register(&Arith{}); err != nil {
		t.Fatal(err)
	}
	uc := dial(t, servePacket(t, srv, nil), kiev.WithCompression(kiev.Zstd))
	echo(t, kiev.WithCallCompression(ctx, kiev.Zstd), uc, jsonText(800))
}

// TestCompressedDatagramRefused sends a server with compression a
// datagram whose args are compressed: datagrams never are, so it is
// answered with BadRequest, saying so.
func TestCompressedDatagramRefused(t *testing.T) {
	_, target := newUDPArith(t, nil, kiev.WithCompression(kiev.S2))
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	server, err := net.ResolveUDPAddr("udp", strings.TrimPrefix(target, "udp://"))
	if err != nil {
		t.Fatal(err)
	}
	args, _ := msgpack.Marshal(jsonText(600))
	body := s2.Encode(nil, args)
	b := wire.BeginDatagram(nil, wire.TypeRequest, 1)
	b = wire.AppendString(b, wire.KeyMethod, "Arith.Echo")
	b = wire.AppendString(b, wire.KeyCodec, "msgpack")
	b = wire.AppendUvarint(b, wire.KeySession, 77)
	b = wire.AppendCompression(b, uint8(kiev.S2), len(args))
	_ = wire.EndHeader(b, wire.PrefaceLen)
	b = append(b, body...)
	_ = wire.EndFrame(b, wire.PrefaceLen, 1<<16)
	if _, err := conn.WriteToUDP(b, server); err != nil {
		t.Fatal(err)
	}
	if _, h := udpAnswer(t, conn); kiev.Code(h.ErrCode) != kiev.CodeBadRequest || !strings.Contains(string(h.ErrMsg), "kiev does not compress datagrams") {
		t.Fatalf("answered code %d, %q", h.ErrCode, h.ErrMsg)
	}
}

// rawClient plays a client that speaks the wire by hand: an old one,
// which sends no Settings and skips the frames it does not know, or a
// hostile one.
type rawClient struct {
	nc     net.Conn
	r      *wire.Reader
	id     uint64
	frames []wire.Type // the types of frames it read, in order
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(wire.AppendPreface(nil, 1)); err != nil {
		t.Fatal(err)
	}
	r := wire.NewReader(nc, 64<<10, 16<<20)
	if v, err := wire.ReadPreface(r); err != nil || v != 1 {
		t.Fatalf("preface: version %d, %v", v, err)
	}
	return &rawClient{nc: nc, r: r}
}

// call sends a Request for method with body, compressed with alg from n
// bytes if alg is not 0, and returns the Response's error code and
// message, and its body, decompressed.
func (rc *rawClient) call(t *testing.T, method string, body []byte, alg uint8, n uint64) (kiev.Code, string, []byte) {
	t.Helper()
	rc.id++
	b := wire.BeginFrame(nil, wire.TypeRequest, rc.id)
	b = wire.AppendString(b, wire.KeyMethod, method)
	b = wire.AppendString(b, wire.KeyCodec, "msgpack")
	if alg != 0 {
		b = wire.AppendCompression(b, alg, int(n))
	}
	_ = wire.EndHeader(b, 0)
	b = append(b, body...)
	_ = wire.EndFrame(b, 0, 16<<20)
	if _, err := rc.nc.Write(b); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := rc.r.Next()
		if err != nil {
			t.Fatalf("reading the Response: %v", err)
		}
		rc.frames = append(rc.frames, f.Type)
		if f.Type != wire.TypeResponse { // an old client skips the rest
			continue
		}
		var h wire.Header
		if err := wire.ParseHeader(f.Header, &h); err != nil {
			t.Fatal(err)
		}
		if f.ID != rc.id {
			t.Fatalf("Response to %d, want %d", f.ID, rc.id)
		}
		out := bytes.Clone(f.Body)
		switch h.Compression {
		case 0:
		case uint8(kiev.Zstd):
			d, _ := zstd.NewReader(nil)
			defer d.Close()
			if out, err = d.DecodeAll(f.Body, nil); err != nil {
				t.Fatal(err)
			}
		case uint8(kiev.S2):
			if out, err = s2.Decode(nil, f.Body); err != nil {
				t.Fatal(err)
			}
		}
		return kiev.Code(h.ErrCode), string(h.ErrMsg), out
	}
}

// zstdBody compresses b with z with a window kiev accepts.
func zstdBody(z *zstd.Encoder, b []byte) []byte { return z.EncodeAll(b, nil) }

// TestCompressionOldClient plays an old client, which sends no Settings
// and skips the server's: a server with compression answers it as it
// would without, uncompressed.
func TestCompressionOldClient(t *testing.T) {
	addr := newArithServer(t, nil, kiev.WithCompression(kiev.Zstd, kiev.S2), kiev.WithCompressionThreshold(1))
	rc := dialRaw(t, addr)
	args, _ := msgpack.Marshal(jsonText(64 << 10))
	for range 3 {
		code, msg, body := rc.call(t, "Arith.Echo", args, 0, 0)
		if code != 0 || !bytes.Equal(body, args) {
			t.Fatalf("Echo: code %v %q, %d bytes back, want %d", code, msg, len(body), len(args))
		}
	}
	// It saw (and skipped) the server's Settings before its first reply.
	if len(rc.frames) != 4 || rc.frames[0] != wire.TypeSettings {
		t.Fatalf("frames read: %v, want Settings and 3 Responses", rc.frames)
	}
}

// oldServer plays a kiev server of before compression on one
// connection: it sends no Settings, skips frames it does not know, and
// echoes the args of every Request (Arith.Echo's msgpack reply is its
// args). It sends on seen the header fields of each Request that an old
// server would not know.
func oldServer(t *testing.T, seen chan<- string) string {
	return rawServer(t, func(nc net.Conn) {
		r := wire.NewReader(nc, 64<<10, 16<<20)
		if _, err := wire.ReadPreface(r); err != nil {
			return
		}
		if _, err := nc.Write(wire.AppendPreface(nil, 1)); err != nil {
			return
		}
		for {
			f, err := r.Next()
			if err != nil {
				return
			}
			if f.Type != wire.TypeRequest {
				continue
			}
			var h wire.Header
			if err := wire.ParseHeader(f.Header, &h); err != nil {
				seen <- err.Error()
				return
			}
			var news []string
			if h.Compression != 0 {
				news = append(news, fmt.Sprintf("Compression %d", h.Compression))
			}
			if h.HasReplyCompression {
				news = append(news, fmt.Sprintf("ReplyCompression %d", h.ReplyCompression))
			}
			seen <- strings.Join(news, ", ")
			b := wire.BeginFrame(nil, wire.TypeResponse, f.ID)
			b = wire.AppendField(b, wire.KeyCodec, h.Codec)
			_ = wire.EndHeader(b, 0)
			b = append(b, f.Body...)
			_ = wire.EndFrame(b, 0, 16<<20)
			if _, err := nc.Write(b); err != nil {
				return
			}
		}
	})
}

// TestCompressionOldServer plays an old server to a client with
// compression: it never gets a compressed body nor a field it does not
// know, even for calls that ask for compression, and the calls succeed.
func TestCompressionOldServer(t *testing.T) {
	seen := make(chan string, 16)
	addr := oldServer(t, seen)
	c := dial(t, addr, kiev.WithCompression(kiev.Zstd, kiev.S2), kiev.WithCompressionThreshold(1))
	ctx := context.Background()
	big := jsonText(64 << 10)
	for _, cctx := range []context.Context{ctx, ctx, kiev.WithCallCompression(ctx, kiev.Zstd), kiev.WithCallCompression(ctx, kiev.NoCompression)} {
		echo(t, cctx, c, big)
		if news := <-seen; news != "" {
			t.Fatalf("an old server got a Request with %s", news)
		}
	}
}

// TestDecompressionRefused sends a server compressed args that it must
// refuse, each with an error that says why, on a connection that goes on
// serving: bombs, which decode past what their header says, or say more
// than the frame limit; corrupt bodies; unknown algorithms.
func TestDecompressionRefused(t *testing.T) {
	const limit = 1 << 20
	addr := newArithServer(t, nil, kiev.WithCompression(kiev.Zstd, kiev.S2), kiev.WithMaxFrameSize(limit))
	zeros := make([]byte, 64<<20)
	z, _ := zstd.NewWriter(nil, zstd.WithWindowSize(256<<10), zstd.WithEncoderLevel(zstd.SpeedFastest))
	zbomb := z.EncodeAll(zeros, nil)
	sbomb := s2.Encode(nil, zeros[:8<<20])
	args, _ := msgpack.Marshal(jsonText(16 << 10))
	// Dialed once the bombs are made: the raw client sends no pings, and
	// making them under the race detector on a loaded machine can take
	// longer than the server's heartbeat timeout.
	rc := dialRaw(t, addr)
	for _, tc := range []struct {
		name string
		body []byte
		alg  uint8
		n    uint64
		code kiev.Code
		msg  string
	}{
		{"zstd bomb", zbomb, 1, limit, kiev.CodeBadRequest, "corrupt zstd body: it decodes to more than the 1048576 bytes its header says"},
		{"zstd bomb over the limit", zbomb, 1, 64 << 20, kiev.CodeTooLarge, "decompresses to 67108864 bytes, over this side's 1048576-byte frame limit (WithMaxFrameSize)"},
		{"s2 bomb", sbomb, 2, limit, kiev.CodeBadRequest, "corrupt s2 body: it decodes to 8388608 bytes, not the 1048576 its header says"},
		{"s2 bomb over the limit", sbomb, 2, 8 << 20, kiev.CodeTooLarge, "(WithMaxFrameSize)"},
		{"zstd short", z.EncodeAll(args, nil), 1, uint64(len(args)) + 1, kiev.CodeBadRequest, "fewer than"},
		{"zstd corrupt", []byte("this is not zstd at all"), 1, 100, kiev.CodeBadRequest, "corrupt zstd body"},
		{"s2 corrupt", append(binary.AppendUvarint(nil, 100), "garbage"...), 2, 100, kiev.CodeBadRequest, "corrupt s2 body"},
		{"unknown algorithm", args, 9, uint64(len(args)), kiev.CodeBadRequest, "Compression(9), which this server does not accept"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, msg, _ := rc.call(t, "Arith.Echo", tc.body, tc.alg, tc.n)
			if code != tc.code || !strings.Contains(msg, tc.msg) {
				t.Fatalf("code %v, %q; want %v, %q", code, msg, tc.code, tc.msg)
			}
			code, msg, body := rc.call(t, "Arith.Echo", z.EncodeAll(args, nil), 1, uint64(len(args)))
			if code != 0 || !bytes.Equal(body, args) {
				t.Fatalf("a good call after it: code %v, %q", code, msg)
			}
		})
	}
}

// TestDecompressionRefusedClient has a server answer a client with
// compression with replies it must refuse: each call fails with an error
// that says why, and the connection goes on.
func TestDecompressionRefusedClient(t *testing.T) {
	const limit = 1 << 20
	zeros := make([]byte, 64<<20)
	z, _ := zstd.NewWriter(nil, zstd.WithWindowSize(256<<10), zstd.WithEncoderLevel(zstd.SpeedFastest))
	zbomb := z.EncodeAll(zeros, nil)
	good, _ := msgpack.Marshal([]byte("fine"))
	replies := []struct {
		body []byte
		alg  uint8
		n    uint64
	}{
		{zbomb, 1, limit},
		{zbomb, 1, 64 << 20},
		{[]byte("garbage"), 2, 10},
		{good, 0, 0},
	}
	addr := rawServer(t, func(nc net.Conn) {
		r := wire.NewReader(nc, 64<<10, 16<<20)
		if _, err := wire.ReadPreface(r); err != nil {
			return
		}
		if _, err := nc.Write(wire.AppendPreface(nil, 1)); err != nil {
			return
		}
		for _, rep := range replies {
			var f wire.Frame
			for f.Type != wire.TypeRequest {
				var err error
				if f, err = r.Next(); err != nil {
					return
				}
			}
			b := wire.BeginFrame(nil, wire.TypeResponse, f.ID)
			b = wire.AppendString(b, wire.KeyCodec, "msgpack")
			if rep.alg != 0 {
				b = wire.AppendCompression(b, rep.alg, int(rep.n))
			}
			_ = wire.EndHeader(b, 0)
			b = append(b, rep.body...)
			_ = wire.EndFrame(b, 0, 16<<20)
			if _, err := nc.Write(b); err != nil {
				return
			}
		}
		_, _ = io.Copy(io.Discard, nc)
	})
	c := dial(t, addr, kiev.WithCompression(kiev.Zstd), kiev.WithMaxFrameSize(limit))
	ctx := context.Background()
	for _, want := range []struct {
		is  error
		msg string
	}{
		{kiev.ErrBadRequest, "corrupt zstd body: it decodes to more than the 1048576 bytes its header says"},
		{kiev.ErrTooLarge, "over this side's 1048576-byte frame limit (WithMaxFrameSize)"},
		{kiev.ErrBadRequest, "corrupt s2 body"},
		{nil, ""},
	} {
		var got []byte
		err := c.Call(ctx, "Arith.Echo", []byte("x"), &got)
		if !errors.Is(err, want.is) || want.is != nil && !strings.Contains(err.Error(), want.msg) {
			t.Fatalf("Call: %v; want %v with %q", err, want.is, want.msg)
		}
	}
}

// TestRefusedCallIsNotDecompressed sends a call past
// WithMaxConcurrentCalls whose compressed args are corrupt: it is refused
// as Overloaded before its args are decompressed, which would have
// answered BadRequest.
func TestRefusedCallIsNotDecompressed(t *testing.T) {
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 1)}
	addr := newArithServer(t, svc, kiev.WithCompression(kiev.S2), kiev.WithMaxConcurrentCalls(1))
	rc := dialRaw(t, addr)
	send := func(id uint64, method string, body []byte, alg uint8, n int) {
		t.Helper()
		b := wire.BeginFrame(nil, wire.TypeRequest, id)
		b = wire.AppendString(b, wire.KeyMethod, method)
		b = wire.AppendString(b, wire.KeyCodec, "msgpack")
		if alg != 0 {
			b = wire.AppendCompression(b, alg, n)
		}
		_ = wire.EndHeader(b, 0)
		b = append(b, body...)
		_ = wire.EndFrame(b, 0, 16<<20)
		if _, err := rc.nc.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	answer := func() (uint64, kiev.Code, string) {
		t.Helper()
		for {
			f, err := rc.r.Next()
			if err != nil {
				t.Fatalf("reading the Response: %v", err)
			}
			if f.Type != wire.TypeResponse {
				continue
			}
			var h wire.Header
			if err := wire.ParseHeader(f.Header, &h); err != nil {
				t.Fatal(err)
			}
			return f.ID, kiev.Code(h.ErrCode), string(h.ErrMsg)
		}
	}
	args, _ := msgpack.Marshal(Args{A: 7})
	send(1, "Arith.Block", args, 0, 0)
	<-svc.started
	send(2, "Arith.Echo", []byte("not an s2 block at all"), uint8(kiev.S2), 100)
	if id, code, msg := answer(); id != 2 || code != kiev.CodeOverloaded || !strings.Contains(msg, "WithMaxConcurrentCalls") {
		t.Fatalf("the call past the limit was answered: id %d, %v %q; want id 2 refused as Overloaded (WithMaxConcurrentCalls) without its args decompressed", id, code, msg)
	}
	close(svc.block)
	if id, code, msg := answer(); id != 1 || code != kiev.CodeOK {
		t.Fatalf("the first call was answered: id %d, %v %q; want its reply", id, code, msg)
	}
}

package kiev_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/transport"
	"github.com/kievrpc/kiev/internal/wire"
)

// lockedBuffer is a bytes.Buffer safe for a logging server and a reading
// test at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// captureLog returns a logger option writing into the returned buffer.
func captureLog() (kiev.Option, *lockedBuffer) {
	buf := new(lockedBuffer)
	return kiev.WithLogger(slog.New(slog.NewTextHandler(buf, nil))), buf
}

// closeTimeout bounds how long a test waits for the server to close a
// hostile connection. It is a safety net, not synchronization: the server
// closes at once, and a test that hits this limit fails.
const closeTimeout = 5 * time.Second

// rawDial opens a plain TCP connection to addr, closed when the test ends.
func rawDial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc.(*net.TCPConn)
}

// expectClosed reads nc until the server closes it and fails the test if
// that does not happen within closeTimeout. It returns what was read.
func expectClosed(t *testing.T, nc net.Conn) []byte {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(closeTimeout))
	var got []byte
	buf := make([]byte, 4096)
	for {
		n, err := nc.Read(buf)
		got = append(got, buf[:n]...)
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("server did not close the connection within %v (read %q)", closeTimeout, got)
		}
		// io.EOF, or a reset when the server closed with our bytes unread.
		return got
	}
}

// frame builds one frame with the given header fields and body.
func frame(t wire.Type, id uint64, header func([]byte) []byte, body []byte) []byte {
	b := wire.BeginFrame(nil, t, id)
	if header != nil {
		b = header(b)
	}
	if err := wire.EndHeader(b, 0); err != nil {
		panic(err)
	}
	b = append(b, body...)
	if err := wire.EndFrame(b, 0, 1<<30); err != nil {
		panic(err)
	}
	return b
}

// callLoad runs concurrent Add calls on c until stop is closed, each
// goroutine making at least minCalls calls, and reports any failure. Wait for
// it with the returned function.
func callLoad(t *testing.T, c *kiev.Client, workers, minCalls int, stop <-chan struct{}) (wait func()) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				if i >= minCalls {
					select {
					case <-stop:
						return
					default:
					}
				}
				var r Reply
				if err := c.Call(context.Background(), "Arith.Add", Args{w, i}, &r); err != nil {
					t.Errorf("call during the attack failed: %v", err)
					return
				}
				if r.C != w+i {
					t.Errorf("Add(%d, %d) = %d during the attack", w, i, r.C)
					return
				}
			}
		})
	}
	return wg.Wait
}

func checkAdd(t *testing.T, c *kiev.Client) {
	t.Helper()
	var r Reply
	if err := c.Call(context.Background(), "Arith.Add", Args{7, 8}, &r); err != nil || r.C != 15 {
		t.Fatalf("Add(7, 8) = %d, %v; want 15", r.C, err)
	}
}

func TestHostileBytes(t *testing.T) {
	const max = 1 << 20
	preface := wire.AppendPreface(nil, wire.Version)
	serverSettings := transport.SettingsFrame(nil, kiev.DefaultMaxStreams, kiev.DefaultMaxFrameSize)
	request := frame(wire.TypeRequest, 1, func(b []byte) []byte {
		b = wire.AppendString(b, wire.KeyMethod, "Arith.Add")
		return wire.AppendString(b, wire.KeyCodec, "msgpack")
	}, []byte{0x82, 0xa1, 'A', 7, 0xa1, 'B', 8})
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	lenPrefix := func(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

	// A Request whose Method field claims 50 bytes but the header has 3.
	pastHeader := wire.BeginFrame(nil, wire.TypeRequest, 1)
	pastHeader = append(pastHeader, byte(wire.KeyMethod), 50, 'A', '.', 'B')
	_ = wire.EndHeader(pastHeader, 0)
	pastHeader = append(pastHeader, make([]byte, 60)...)
	_ = wire.EndFrame(pastHeader, 0, max)

	cases := []struct {
		name   string
		send   []byte
		hangUp bool   // half-close after sending, as a client that gives up
		reason string // what the server's log must say
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: kiev\r\n\r\n"), false, "wrong magic"},
		{"wrong magic", []byte("KIEW\x01"), false, "wrong magic"},
		{"version 0", []byte("KIEV\x00"), false, "version 0"},
		{"frame over max", cat(preface, lenPrefix(max+1), make([]byte, 64)), false, "larger than the maximum frame size"},
		{"length 0xffffffff", cat(preface, lenPrefix(0xffffffff)), false, "larger than the maximum frame size"},
		{"frame under fixed header", cat(preface, lenPrefix(11), make([]byte, 11)), false, "shorter than the 12-byte fixed header"},
		{"hlen past frame end", cat(preface, lenPrefix(12), []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff}), false, "runs past the"},
		{"truncated frame", cat(preface, request[:len(request)-3]), true, "unexpected EOF"},
		{"field past header", cat(preface, pastHeader), false, "runs past the header"},
		{"bad priority", cat(preface, frame(wire.TypeRequest, 1, func(b []byte) []byte {
			return wire.AppendField(b, wire.KeyPriority, []byte{10})
		}, nil)), false, "bad priority"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logOpt, log := captureLog()
			addr := newArithServer(t, nil, logOpt, kiev.WithMaxFrameSize(max))
			c := dial(t, addr, kiev.WithMaxFrameSize(max))
			checkAdd(t, c)

			stop := make(chan struct{})
			wait := callLoad(t, c, 4, 20, stop)

			nc := rawDial(t, addr)
			if _, err := nc.Write(tc.send); err != nil {
				t.Fatalf("writing the attack: %v", err)
			}
			if tc.hangUp {
				if err := nc.CloseWrite(); err != nil {
					t.Fatal(err)
				}
			}
			got := expectClosed(t, nc)
			close(stop)
			wait()

			if len(got) > 0 && !bytes.Equal(got, preface) && !bytes.Equal(got, append(preface[:len(preface):len(preface)], serverSettings...)) {
				t.Errorf("server sent %q to the attacker, want at most its preface and Settings", got)
			}
			// The server logs the reason before it closes the connection.
			if l := log.String(); !strings.Contains(l, tc.reason) {
				t.Errorf("server log does not mention %q:\n%s", tc.reason, l)
			}
			checkAdd(t, c)
		})
	}
}

// TestHugeFrameAnnouncement checks that announcing a 15 MiB frame and
// sending a few bytes of it costs the server no 15 MiB allocation, and
// that the server closes the connection when the sender hangs up.
func TestHugeFrameAnnouncement(t *testing.T) {
	logOpt, log := captureLog()
	addr := newArithServer(t, nil, logOpt) // default 16 MiB frame limit
	c := dial(t, addr)
	checkAdd(t, c)

	nc := rawDial(t, addr)
	hdr := wire.AppendPreface(nil, wire.Version)
	hdr = binary.BigEndian.AppendUint32(hdr, 15<<20)
	hdr = append(hdr, byte(wire.TypeRequest), 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 'x', 'y', 'z')

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if _, err := nc.Write(hdr); err != nil {
		t.Fatal(err)
	}
	checkAdd(t, c) // the server is serving others while it waits
	if err := nc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, nc)
	runtime.ReadMemStats(&after)

	if d := after.TotalAlloc - before.TotalAlloc; d > 4<<20 {
		t.Errorf("a 15 MiB frame announcement with 15 bytes behind it made the process allocate %d bytes, want < 4 MiB", d)
	}
	if l := log.String(); !strings.Contains(l, "unexpected EOF") {
		t.Errorf("server log does not mention the truncated frame:\n%s", l)
	}
	checkAdd(t, c)
}

// TestForwardCompatibility speaks the protocol over a raw connection as a
// newer client would: it sends a frame type and a header field the server
// does not know, which the server must skip.
func TestForwardCompatibility(t *testing.T) {
	addr := newArithServer(t, nil)
	nc := rawDial(t, addr)
	_ = nc.SetDeadline(time.Now().Add(closeTimeout)) // safety net only

	if _, err := nc.Write(wire.AppendPreface(nil, wire.Version)); err != nil {
		t.Fatal(err)
	}
	r := wire.NewReader(nc, 4096, 1<<20)
	if v, err := wire.ReadPreface(r); err != nil || v != wire.Version {
		t.Fatalf("server preface: version %d, %v; want %d", v, err, wire.Version)
	}

	body, err := codec.Msgpack.Marshal(nil, Args{7, 8})
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	out = append(out, frame(99, 1, func(b []byte) []byte {
		return wire.AppendString(b, 200, "from the future")
	}, []byte("a body the server cannot know"))...)
	out = append(out, frame(wire.TypeRequest, 42, func(b []byte) []byte {
		b = wire.AppendString(b, wire.KeyMethod, "Arith.Add")
		b = wire.AppendString(b, 200, "an extra field")
		b = wire.AppendString(b, wire.KeyCodec, codec.Msgpack.Name())
		return wire.AppendField(b, 255, nil)
	}, body)...)
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}

	for {
		f, err := r.Next()
		if err != nil {
			t.Fatalf("reading the response: %v", err)
		}
		if f.Type == wire.TypePing || f.Type == wire.TypeSettings { // a heartbeat, the server's Settings: not needed here
			continue
		}
		if f.Type != wire.TypeResponse || f.ID != 42 {
			t.Fatalf("got frame type %d id %d, want the Response to call 42", f.Type, f.ID)
		}
		var h wire.Header
		if err := wire.ParseHeader(f.Header, &h); err != nil {
			t.Fatal(err)
		}
		if h.ErrCode != 0 {
			t.Fatalf("server answered error %d: %s", h.ErrCode, h.ErrMsg)
		}
		if string(h.Codec) != "msgpack" {
			t.Fatalf("response codec %q, want msgpack", h.Codec)
		}
		var reply Reply
		if err := codec.Msgpack.Unmarshal(f.Body, &reply); err != nil {
			t.Fatal(err)
		}
		if reply != (Reply{C: 15}) {
			t.Fatalf("reply = %+v, want {C:15}", reply)
		}
		return
	}
}

// TestDialNonKievServer checks that dialing something that is not a kiev
// server fails at once with an error that says so.
func TestDialNonKievServer(t *testing.T) {
	addr := rawServer(t, func(nc net.Conn) {
		_, _ = nc.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
		// Like an HTTP server, keep the connection until the peer hangs
		// up, so it surely reads the answer.
		_, _ = io.Copy(io.Discard, nc)
	})

	const dialTimeout = 3 * time.Second
	start := time.Now()
	c, err := kiev.Dial(addr, kiev.WithDialTimeout(dialTimeout))
	elapsed := time.Since(start)
	if err == nil {
		c.Close()
		t.Fatal("Dial to an HTTP server succeeded")
	}
	if !strings.Contains(err.Error(), "does not speak") {
		t.Errorf("Dial error %q does not say the peer does not speak kiev", err)
	}
	if !errors.Is(err, kiev.ErrUnavailable) {
		t.Errorf("Dial error %v does not match ErrUnavailable", err)
	}
	if elapsed >= dialTimeout {
		t.Errorf("Dial took %v, want an answer within the %v dial timeout", elapsed, dialTimeout)
	}
}

// Holder holds each call until the test releases it or its context ends,
// and reports both.
type Holder struct {
	started chan int
	ended   chan error
	release chan struct{}
}

func (h *Holder) Hold(ctx context.Context, n int, reply *int) error {
	h.started <- n
	select {
	case <-h.release:
		*reply = n
		h.ended <- nil
		return nil
	case <-ctx.Done():
		h.ended <- ctx.Err()
		return ctx.Err()
	}
}

// TestReusedIDIsAProtocolError sends Requests that reuse the id of a call
// in flight. The server ran them all (50 of 50 past a limit of 2 calls
// per connection), and the hidden ones were never canceled. Now the
// first reuse closes the connection and cancels its calls; an id whose
// call was answered or canceled may be used again.
func TestReusedIDIsAProtocolError(t *testing.T) {
	h := &Holder{started: make(chan int, 64), ended: make(chan error, 64), release: make(chan struct{})}
	logOpt, logs := captureLog()
	srv := kiev.NewServer(kiev.WithMaxConcurrentCalls(2), logOpt)
	if err := srv.Register(h); err != nil {
		t.Fatal(err)
	}
	if err := srv.Register(&Arith{}); err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, srv)
	request := func(id uint64, method string, args any) []byte {
		body, err := codec.Msgpack.Marshal(nil, args)
		if err != nil {
			t.Fatal(err)
		}
		return frame(wire.TypeRequest, id, func(b []byte) []byte {
			b = wire.AppendString(b, wire.KeyMethod, method)
			return wire.AppendString(b, wire.KeyCodec, codec.Msgpack.Name())
		}, body)
	}
	open := func() (*net.TCPConn, *wire.Reader) {
		nc := rawDial(t, addr)
		if _, err := nc.Write(wire.AppendPreface(nil, wire.Version)); err != nil {
			t.Fatal(err)
		}
		r := wire.NewReader(nc, 4096, 1<<20)
		if _, err := wire.ReadPreface(r); err != nil {
			t.Fatal(err)
		}
		return nc, r
	}
	response := func(nc net.Conn, r *wire.Reader, id uint64) wire.Header {
		_ = nc.SetReadDeadline(time.Now().Add(closeTimeout)) // safety net only
		for {
			f, err := r.Next()
			if err != nil {
				t.Fatalf("reading the response to %d: %v", id, err)
			}
			if f.Type != wire.TypeResponse {
				continue
			}
			if f.ID != id {
				t.Fatalf("a response to %d; want %d", f.ID, id)
			}
			var hd wire.Header
			if err := wire.ParseHeader(f.Header, &hd); err != nil {
				t.Fatal(err)
			}
			return hd
		}
	}

	// Reused in flight: one handler runs, the connection closes, and the
	// handler's context is canceled.
	nc, _ := open()
	if _, err := nc.Write(request(7, "Holder.Hold", 1)); err != nil {
		t.Fatal(err)
	}
	<-h.started
	var flood []byte
	for range 49 {
		flood = append(flood, request(7, "Holder.Hold", 2)...)
	}
	if _, err := nc.Write(flood); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, nc)
	if err := <-h.ended; !errors.Is(err, context.Canceled) {
		t.Errorf("the first call ended with %v; want its context canceled", err)
	}
	if n := len(h.started); n != 0 {
		t.Errorf("%d more calls of the reused id ran; want none", n)
	}
	if !strings.Contains(logs.String(), "protocol error: the client sent a Request with id 7 while its call Holder.Hold of that id was in flight") {
		t.Errorf("the server's log does not say why it closed the connection:\n%s", logs)
	}

	// Reused once answered, or once canceled: served.
	nc, r := open()
	for range 3 {
		if _, err := nc.Write(request(1, "Arith.Add", Args{2, 3})); err != nil {
			t.Fatal(err)
		}
		if hd := response(nc, r, 1); hd.ErrCode != 0 {
			t.Fatalf("Arith.Add with a reused, answered id: %s", hd.ErrMsg)
		}
	}
	if _, err := nc.Write(request(3, "Holder.Hold", 3)); err != nil {
		t.Fatal(err)
	}
	<-h.started
	cancel := frame(wire.TypeCancel, 3, nil, nil)
	if _, err := nc.Write(append(cancel, request(3, "Arith.Add", Args{1, 1})...)); err != nil {
		t.Fatal(err)
	}
	if hd := response(nc, r, 3); hd.ErrCode != 0 {
		t.Fatalf("Arith.Add with the id of a canceled call: %s", hd.ErrMsg)
	}
	if err := <-h.ended; !errors.Is(err, context.Canceled) {
		t.Errorf("the canceled call ended with %v; want its context canceled", err)
	}
}

// TestPartialFramesShareABound sends, from two connections, frames that
// announce 4 MiB and stop part way, to a server that holds at most 1 MiB
// for frames in progress. Such frames were held with no bound across
// connections; now the connection whose frame would pass it is closed,
// saying why, other clients are served, and the bytes come back when the
// connections end.
func TestPartialFramesShareABound(t *testing.T) {
	logOpt, logs := captureLog()
	addr := newArithServer(t, nil, logOpt, kiev.WithMaxPartialFrameBytes(1<<20))
	start := func(n int) *net.TCPConn {
		nc := rawDial(t, addr)
		if _, err := nc.Write(wire.AppendPreface(nil, wire.Version)); err != nil {
			t.Fatal(err)
		}
		head := frame(wire.TypeRequest, 1, func(b []byte) []byte {
			b = wire.AppendString(b, wire.KeyMethod, "Arith.Echo")
			return wire.AppendString(b, wire.KeyCodec, codec.Msgpack.Name())
		}, nil)
		binary.BigEndian.PutUint32(head, 4<<20) // announced, never sent whole
		if _, err := nc.Write(append(head, make([]byte, n)...)); err != nil {
			t.Fatal(err)
		}
		return nc
	}
	a := start(640 << 10)
	b := start(640 << 10)
	// One of the two passes 1 MiB as its bytes arrive: it is closed.
	closed := make(chan int, 2)
	for i, nc := range []*net.TCPConn{a, b} {
		go func() {
			_ = nc.SetReadDeadline(time.Now().Add(closeTimeout)) // safety net only
			buf := make([]byte, 64)
			for {
				if _, err := nc.Read(buf); err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						closed <- i
					}
					return
				}
			}
		}()
	}
	var first int
	select {
	case first = <-closed:
	case <-time.After(2 * closeTimeout): // a safety net
		t.Fatal("neither connection was closed, though their frames hold 1.25 MiB")
	}
	if !strings.Contains(logs.String(), "limit of 1 MiB for frames in progress from all clients (WithMaxPartialFrameBytes)") {
		t.Errorf("the log does not say why connection %d was closed:\n%s", first, logs)
	}
	// Others are served meanwhile, and once the other partial frame's
	// connection ends too, its bytes are free for a 900 KiB call.
	c := dial(t, addr)
	checkAdd(t, c)
	[]*net.TCPConn{a, b}[1-first].Close()
	var echo []byte
	deadline := time.Now().Add(closeTimeout)
	for {
		err := c.Call(context.Background(), "Arith.Echo", make([]byte, 900<<10), &echo)
		if err == nil {
			break
		}
		// The server may not have seen the close yet: the bytes come back
		// when its reader ends. The client redials after the cut.
		if time.Now().After(deadline) {
			t.Fatalf("a 900 KiB call after both partial frames ended: %v", err)
		}
		c = dial(t, addr)
	}
	if len(echo) != 900<<10 {
		t.Errorf("echoed %d bytes; want 900 KiB", len(echo))
	}
}

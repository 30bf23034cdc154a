package xversion

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/testpb"
	"github.com/kievrpc/kiev/internal/wire"
)

// keyNew and typeNew stand for a header field and a frame type that a
// newer peer adds: no version of kiev defines 255 (PROTOCOL.md, "Versions
// checked against each other"), so every build must skip them.
const (
	keyNew  wire.Key  = 255
	typeNew wire.Type = 255
)

// msg is the peer's msgpack payload (peer.Msg): kiev's msgpack encodes a
// struct as a map from field name to value, so the same names decode.
type msg struct {
	ID   int64
	Name string
	Tags []int64
}

// withNewFields appends the header of a Request for method in codec name:
// kiev's fields with the new field before, among and after them, the
// first with a value long enough for a two-byte length. A datagram also
// carries a Session and AckFloor.
func withNewFields(b []byte, method, name string, session, id uint64) []byte {
	b = wire.AppendField(b, keyNew, bytes.Repeat([]byte{0xa5}, 300))
	b = wire.AppendString(b, wire.KeyMethod, method)
	if session != 0 {
		b = wire.AppendUvarint(b, wire.KeySession, session)
		b = wire.AppendUvarint(b, wire.KeyAckFloor, id)
	}
	b = wire.AppendString(b, keyNew, "a field a newer peer added")
	b = wire.AppendString(b, wire.KeyCodec, name)
	b = wire.AppendUvarint(b, wire.KeyTimeout, uint64(5*time.Second/time.Microsecond))
	b = wire.AppendField(b, wire.KeyPriority, []byte{7})
	b = wire.AppendMeta(b, "xv-trace", "new-field")
	return wire.AppendField(b, keyNew, nil)
}

// echoArgs are the args of the Echo calls made by hand, in each codec,
// and check compares a reply body with them.
type echoArgs struct {
	codec   codec.Codec
	service string
	body    []byte
	check   func(reply []byte) error
}

func echoCases(t *testing.T) []echoArgs {
	t.Helper()
	mp := msg{ID: 7, Name: "skipped", Tags: []int64{2, 4}}
	mb, err := codec.Msgpack.Marshal(nil, &mp)
	if err != nil {
		t.Fatal(err)
	}
	pb := &testpb.Small{Id: 7, Name: "skipped", Tags: []int64{2, 4}}
	pbb, err := codec.Protobuf.Marshal(nil, pb)
	if err != nil {
		t.Fatal(err)
	}
	return []echoArgs{
		{codec.Msgpack, "XV", mb, func(reply []byte) error {
			var got msg
			if err := codec.Msgpack.Unmarshal(reply, &got); err != nil {
				return err
			}
			if got.ID != mp.ID || got.Name != mp.Name || !slices.Equal(got.Tags, mp.Tags) {
				return fmt.Errorf("echoed %+v, want %+v", got, mp)
			}
			return nil
		}},
		{codec.Protobuf, "XVProto", pbb, func(reply []byte) error {
			var got testpb.Small
			if err := codec.Protobuf.Unmarshal(reply, &got); err != nil {
				return err
			}
			if got.Id != pb.Id || got.Name != pb.Name || !slices.Equal(got.Tags, pb.Tags) {
				return fmt.Errorf("echoed %v, want %v", &got, pb)
			}
			return nil
		}},
	}
}

// checkResponse checks that f answers call id with no error, and that
// its body passes check.
func checkResponse(f wire.Frame, id uint64, check func([]byte) error) error {
	if f.Type != wire.TypeResponse || f.ID != id {
		return fmt.Errorf("got frame type %d id %d, want a Response to %d", f.Type, f.ID, id)
	}
	var h wire.Header
	if err := wire.ParseHeader(f.Header, &h); err != nil {
		return err
	}
	if h.ErrCode != 0 {
		return fmt.Errorf("answered error code %d: %s", h.ErrCode, h.ErrMsg)
	}
	return check(f.Body)
}

// TestNewFieldsSkipped shows every build skipping a header field and a
// frame type that none defines, as PROTOCOL.md's rules for evolving the
// protocol require of them: each build's server answers a Request that
// carries the new field, sent after a frame of the new type, over TCP
// and UDP; and each build's client takes a Response that carries it,
// after a frame of the new type, from a server made here.
func TestNewFieldsSkipped(t *testing.T) {
	for _, b := range allBuilds(t) {
		t.Run("server="+b.name, func(t *testing.T) {
			a := startServer(t, b)
			for _, c := range echoCases(t) {
				t.Run("tcp/"+c.codec.Name(), func(t *testing.T) { requestOverTCP(t, a.TCP, c) })
				t.Run("udp/"+c.codec.Name(), func(t *testing.T) { requestOverUDP(t, a.UDP, c) })
			}
		})
		t.Run("client="+b.name, func(t *testing.T) {
			a := Addrs{TCP: newFieldServer(t), UDP: newFieldPacketServer(t)}
			for _, network := range []string{"tcp", "udp"} {
				for _, codecName := range []string{"msgpack", "protobuf"} {
					for _, r := range runClient(t, b, a, network, codecName, "call") {
						if r.Class != "ok" {
							t.Errorf("%s %s: %s: %s (%s); want ok", network, codecName, r.Scenario, r.Class, r.Detail)
						}
					}
				}
			}
		})
	}
}

// requestOverTCP sends, after the preface, a frame of the new type and a
// Request with the new field, and wants its answer.
func requestOverTCP(t *testing.T, addr string, c echoArgs) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(wire.AppendPreface(nil, wire.Version)); err != nil {
		t.Fatal(err)
	}
	if v, err := wire.ReadPreface(nc); err != nil || v != wire.Version {
		t.Fatalf("server preface: version %d, %v", v, err)
	}
	var b []byte
	b = wire.BeginFrame(b, typeNew, 1)
	b = wire.AppendString(b, keyNew, "a frame a newer peer added")
	if err := wire.EndHeader(b, 0); err != nil {
		t.Fatal(err)
	}
	b = append(b, "its body"...)
	if err := wire.EndFrame(b, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	start := len(b)
	b = wire.BeginFrame(b, wire.TypeRequest, 1)
	b = withNewFields(b, c.service+".Echo", c.codec.Name(), 0, 1)
	if err := wire.EndHeader(b, start); err != nil {
		t.Fatal(err)
	}
	b = append(b, c.body...)
	if err := wire.EndFrame(b, start, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	r := wire.NewReader(nc, 4096, 1<<20)
	for {
		f, err := r.Next()
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		if f.Type == wire.TypePing || f.Type == wire.TypePong || f.Type == wire.TypeSettings {
			continue
		}
		if err := checkResponse(f, 1, c.check); err != nil {
			t.Fatal(err)
		}
		return
	}
}

// requestOverUDP sends a datagram of the new frame type, which is
// dropped, and a Request with the new field, until it is answered.
func requestOverUDP(t *testing.T, addr string, c echoArgs) {
	nc, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	other := wire.BeginDatagram(nil, typeNew, 1)
	other = wire.AppendString(other, keyNew, "a frame a newer peer added")
	if err := wire.EndHeader(other, wire.PrefaceLen); err != nil {
		t.Fatal(err)
	}
	if err := wire.EndFrame(other, wire.PrefaceLen, 1<<16); err != nil {
		t.Fatal(err)
	}
	const session, id = 0x5eed, 1
	req := wire.BeginDatagram(nil, wire.TypeRequest, id)
	req = withNewFields(req, c.service+".Echo", c.codec.Name(), session, id)
	if err := wire.EndHeader(req, wire.PrefaceLen); err != nil {
		t.Fatal(err)
	}
	req = append(req, c.body...)
	if err := wire.EndFrame(req, wire.PrefaceLen, 1<<16); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<16)
	deadline := time.Now().Add(10 * time.Second)
	// Loopback rarely drops a datagram, but may: send again, as a kiev
	// client would, every 200ms; the server runs the call once.
	for time.Now().Before(deadline) {
		if _, err := nc.Write(other); err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(req); err != nil {
			t.Fatal(err)
		}
		nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, err := nc.Read(buf)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		f, _, err := wire.ParseDatagram(buf[:n])
		if err != nil {
			t.Fatalf("the answer: %v", err)
		}
		if err := checkResponse(f, id, c.check); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("no answer within 10s")
}

// newFieldServer serves kiev's TCP protocol by hand, as a newer server
// might: it answers every Request with a Response that echoes its args,
// carries the new field among kiev's, and comes after a frame of the new
// type; Pings get Pongs with the new field. It stops when the test ends.
func newFieldServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex // guards conns
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Go(func() { serveNewFields(nc) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, nc := range conns {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

func serveNewFields(nc net.Conn) {
	defer nc.Close()
	if _, err := wire.ReadPreface(nc); err != nil {
		return
	}
	if _, err := nc.Write(wire.AppendPreface(nil, wire.Version)); err != nil {
		return
	}
	r := wire.NewReader(nc, 4096, 1<<20)
	for {
		f, err := r.Next()
		if err != nil {
			return
		}
		var b []byte
		switch f.Type {
		case wire.TypeRequest:
			var h wire.Header
			if wire.ParseHeader(f.Header, &h) != nil {
				return
			}
			b = wire.BeginFrame(b, typeNew, f.ID)
			b = wire.AppendString(b, keyNew, "a frame a newer peer added")
			_ = wire.EndHeader(b, 0)
			_ = wire.EndFrame(b, 0, 1<<20)
			start := len(b)
			b = wire.BeginFrame(b, wire.TypeResponse, f.ID)
			b = wire.AppendField(b, keyNew, bytes.Repeat([]byte{0xa5}, 300))
			b = wire.AppendField(b, wire.KeyCodec, h.Codec)
			b = wire.AppendField(b, keyNew, nil)
			_ = wire.EndHeader(b, start)
			b = append(b, f.Body...)
			_ = wire.EndFrame(b, start, 1<<20)
		case wire.TypePing:
			b = wire.BeginFrame(b, wire.TypePong, f.ID)
			b = wire.AppendString(b, keyNew, "a field a newer peer added")
			_ = wire.EndHeader(b, 0)
			_ = wire.EndFrame(b, 0, 1<<20)
		default:
			continue
		}
		if _, err := nc.Write(b); err != nil {
			return
		}
	}
}

// newFieldPacketServer is newFieldServer over UDP: every Request is
// answered with a Response that echoes its args and carries the new
// field. It stops when the test ends.
func newFieldPacketServer(t *testing.T) string {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 1<<16)
		for {
			n, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			f, _, err := wire.ParseDatagram(buf[:n])
			if err != nil || f.Type != wire.TypeRequest {
				continue
			}
			var h wire.Header
			if wire.ParseHeader(f.Header, &h) != nil {
				continue
			}
			b := wire.BeginDatagram(nil, wire.TypeResponse, f.ID)
			b = wire.AppendField(b, keyNew, bytes.Repeat([]byte{0xa5}, 300))
			b = wire.AppendField(b, wire.KeyCodec, h.Codec)
			b = wire.AppendField(b, keyNew, nil)
			_ = wire.EndHeader(b, wire.PrefaceLen)
			b = append(b, f.Body...)
			_ = wire.EndFrame(b, wire.PrefaceLen, 1<<16)
			_, _ = pc.WriteTo(b, addr)
		}
	})
	t.Cleanup(func() {
		pc.Close()
		wg.Wait()
	})
	return pc.LocalAddr().String()
}

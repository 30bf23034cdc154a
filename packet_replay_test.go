package kiev_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
)

// tokenCheck is a TokenAuth that wants the token "s3cret".
func tokenCheck() kiev.ServerInterceptor {
	return kiev.TokenAuth(func(ctx context.Context, token string) error {
		if token != "s3cret" {
			return errors.New("send a valid token")
		}
		return nil
	})
}

// TestUDPTokenAuthNeedsPacketKeys serves UDP from a server with TokenAuth.
// Without packet keys the token travelled in clear in every datagram,
// and a captured request replayed from another socket ran its handler
// again, with nothing said. Now ServePacket refuses to start and says
// why; WithPacketKeys serves; WithoutPacketKeysForTokenAuth serves with
// a warning, and the replay its doc warns of still runs the handler
// again.
func TestUDPTokenAuthNeedsPacketKeys(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)), kiev.WithServerInterceptor(tokenCheck()))
	defer refused.Close()
	served := make(chan error, 1)
	go func() { served <- refused.ServePacket(pc) }()
	select {
	case err = <-served:
	case <-time.After(5 * time.Second):
		refused.Close()
		<-served
		t.Fatal("ServePacket served UDP on a server with TokenAuth and no packet keys; want a refusal")
	}
	for _, want := range []string{"token in clear", "replay", "WithPacketKeys", "WithoutPacketKeysForTokenAuth"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("ServePacket on a server with TokenAuth and no packet keys: %v; want a refusal that says %q", err, want)
		}
	}

	keys := map[string][]byte{"billing": []byte("0123456789abcdef0123456789abcdef")}
	signed := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)), kiev.WithServerInterceptor(tokenCheck()),
		kiev.WithPacketKeys(func(id string) ([]byte, bool) { k, ok := keys[id]; return k, ok }))
	signed.Register(&Tallied{})
	target := servePacket(t, signed, nil)
	c := dial(t, target, kiev.WithToken("s3cret"), kiev.WithPacketKey("billing", keys["billing"]))
	if err := c.Call(context.Background(), "Tallied.Inc", 0, new(string)); err != nil {
		t.Errorf("a signed call with the token, on a server with packet keys: %v", err)
	}

	// Opted in: served, with a warning; a captured request replayed from
	// another socket runs again, as the option's doc says.
	log := &records{}
	counter := &Tallied{}
	open := kiev.NewServer(kiev.WithLogger(slog.New(log)), kiev.WithServerInterceptor(tokenCheck()), kiev.WithoutPacketKeysForTokenAuth(),
		kiev.WithPacket(kiev.Packet{MaxAmplification: -1}))
	open.Register(counter)
	var cap *capture
	target = servePacket(t, open, func(c *net.UDPConn) net.PacketConn {
		cap = &capture{PacketConn: c}
		return cap
	})
	if err := dial(t, target, kiev.WithToken("s3cret")).Call(context.Background(), "Tallied.Inc", 0, new(string)); err != nil {
		t.Fatalf("a call with the token on the opted-in server: %v", err)
	}
	if n := log.count("kiev: serving TokenAuth over UDP without packet keys: tokens travel in clear and a captured request replays (WithoutPacketKeysForTokenAuth)"); n != 1 {
		t.Errorf("the opted-in server warned %d times; want once", n)
	}
	reqs := cap.requests()
	if len(reqs) == 0 || !strings.Contains(string(reqs[0]), "s3cret") {
		t.Fatal("no request with the token in clear captured")
	}
	other := replaySocket(t)
	server, _ := net.ResolveUDPAddr("udp", strings.TrimPrefix(target, "udp://"))
	if _, err := other.WriteToUDP(reqs[0], server); err != nil {
		t.Fatal(err)
	}
	if !waitAnswer(t, other) {
		t.Fatal("no answer to the replay")
	}
	if n := counter.n.Load(); n != 2 {
		t.Errorf("with WithoutPacketKeysForTokenAuth, the replay from another socket ran the handler %d times in all; want 2, the risk its doc names", n)
	}
}

// replaySocket opens a UDP socket of the test's own, closed at its end.
func replaySocket(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitAnswer reads one datagram from c within 5s, and reports whether it
// came.
func waitAnswer(t *testing.T, c *net.UDPConn) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2048)
	_, _, err := c.ReadFromUDP(buf)
	return err == nil
}

// Gated's Run counts its runs, and answers 42 once the test releases it.
type Gated struct {
	runs    atomic.Int64
	started chan struct{}
	release chan struct{}
}

func (g *Gated) Run(ctx context.Context, _ int, reply *int) error {
	g.runs.Add(1)
	g.started <- struct{}{}
	<-g.release
	*reply = 42
	return nil
}

// blackout is a server socket that, while dark, drops every datagram
// both ways, as a network partition does.
type blackout struct {
	net.PacketConn
	dark atomic.Bool
}

func (b *blackout) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, addr, err := b.PacketConn.ReadFrom(p)
		if err != nil || !b.dark.Load() {
			return n, addr, err
		}
	}
}

func (b *blackout) WriteTo(p []byte, addr net.Addr) (int, error) {
	if b.dark.Load() {
		return len(p), nil
	}
	return b.PacketConn.WriteTo(p, addr)
}

// TestUDPLateDuplicateNotRunAgain loses a call's reply, and every
// datagram after it, until the server forgets the call (its dedup
// linger, shortened here); then the client's retransmission gets
// through. It ran the handler again. Now it is answered ErrAnswered,
// which the client returns, unretried: the handler ran once.
func TestUDPLateDuplicateNotRunAgain(t *testing.T) {
	noLeaks(t)
	g := &Gated{started: make(chan struct{}, 2), release: make(chan struct{})}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)),
		kiev.WithPacket(kiev.Packet{DedupLinger: 50 * time.Millisecond, MaxAmplification: -1}))
	srv.Register(g)
	var bo *blackout
	target := servePacket(t, srv, func(c *net.UDPConn) net.PacketConn {
		bo = &blackout{PacketConn: c}
		return bo
	})
	c := dial(t, target, kiev.WithPacket(kiev.Packet{MaxRTO: 20 * time.Millisecond}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Call(ctx, "Gated.Run", 0, new(int)) }()
	<-g.started
	bo.dark.Store(true)
	close(g.release)
	deadline := time.Now().Add(10 * time.Second)
	for srv.PacketStats().Cached != 0 { // the reply is lost; the call is forgotten after the linger
		if time.Now().After(deadline) {
			t.Fatal("the server did not forget the answered call")
		}
		time.Sleep(10 * time.Millisecond) // polls the condition
	}
	bo.dark.Store(false)
	var err error
	select {
	case err = <-done:
	case <-g.started:
		t.Fatal("the late retransmission ran the handler again")
	}
	if !errors.Is(err, kiev.ErrAnswered) || !strings.Contains(err.Error(), "no longer kept") {
		t.Errorf("the call whose reply was lost until the server forgot it: %v; want ErrAnswered", err)
	}
	if n := g.runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times; want once", n)
	}
}

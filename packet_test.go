package kiev_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/wire"
	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/registry/memory"
)

// servePacket serves srv on a loopback UDP socket, wrapped by wrap if not
// nil, until the test ends.
func servePacket(t testing.TB, srv *kiev.Server, wrap func(*net.UDPConn) net.PacketConn) string {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var pc net.PacketConn = conn
	if wrap != nil {
		pc = wrap(conn)
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServePacket(pc) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, kiev.ErrServerClosed) {
			t.Errorf("ServePacket returned %v, want ErrServerClosed", err)
		}
	})
	return "udp://" + conn.LocalAddr().String()
}

func newUDPArith(t testing.TB, svc *Arith, opts ...kiev.ServerOption) (*kiev.Server, string) {
	t.Helper()
	srv := kiev.NewServer(opts...)
	if svc == nil {
		svc = &Arith{}
	}
	if err := srv.Register(svc); err != nil {
		t.Fatal(err)
	}
	return srv, servePacket(t, srv, nil)
}

func TestUDPCall(t *testing.T) {
	var intercepted atomic.Int64
	count := kiev.WithServerInterceptor(func(next kiev.Handler) kiev.Handler {
		return func(ctx context.Context, req *kiev.Request) error {
			intercepted.Add(1)
			return next(ctx, req)
		}
	})
	_, target := newUDPArith(t, nil, count)
	c := dial(t, target)
	ctx := context.Background()

	var r Reply
	if err := c.Call(ctx, "Arith.Add", Args{7, 8}, &r); err != nil || r.C != 15 {
		t.Fatalf("Add over UDP = %v, %v", r.C, err)
	}
	var got string
	if err := c.Call(kiev.WithMetadata(ctx, "trace-id", "t-1"), "Arith.Meta", "trace-id", &got); err != nil || got != "t-1" {
		t.Fatalf("metadata over UDP = %q, %v", got, err)
	}
	var left time.Duration
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := c.Call(dctx, "Arith.Deadline", Args{}, &left); err != nil || left <= 2*time.Second || left > 3*time.Second {
		t.Fatalf("deadline over UDP: handler saw %v left, %v; want just under 3s", left, err)
	}
	if err := c.Call(ctx, "Arith.Deadline", Args{}, &left); err != nil || left <= 0 || left > kiev.DefaultPacketTimeout {
		t.Fatalf("a call with no deadline: handler saw %v left, %v; want the default packet timeout", left, err)
	}
	err := c.Call(ctx, "Arith.Div", Args{1, 0}, &r)
	var se *kiev.ServerError
	if !errors.As(err, &se) || se.Code != kiev.CodeApplication || err.Error() != "divide by zero" {
		t.Fatalf("handler error over UDP = %v", err)
	}
	if err := c.Call(ctx, "Arith.Nope", Args{}, &r); !errors.Is(err, kiev.ErrNotFound) {
		t.Fatalf("unknown method over UDP = %v", err)
	}
	if err := c.Call(ctx, "Arith.Panic", Args{}, &r); !errors.Is(err, kiev.ErrInternal) {
		t.Fatalf("panic over UDP = %v", err)
	}
	if intercepted.Load() != 7 {
		t.Errorf("server interceptor ran %d times for 7 calls; want every one, the unknown method's too", intercepted.Load())
	}
}

func TestUDPPriority(t *testing.T) {
	srv := kiev.NewServer()
	srv.Register(Push{})
	c := dial(t, servePacket(t, srv, nil))
	var got string
	if err := c.Call(kiev.WithPriority(context.Background(), 9), "Push.Send", "alice", &got); err != nil || !strings.Contains(got, "priority 9") {
		t.Fatalf("priority over UDP: %q, %v", got, err)
	}
}

func TestUDPTooLarge(t *testing.T) {
	srv, target := newUDPArith(t, nil)
	c := dial(t, target)
	var got string
	err := c.Call(context.Background(), "Arith.Meta", strings.Repeat("k", 2000), &got)
	if !errors.Is(err, kiev.ErrTooLarge) || !strings.Contains(err.Error(), "1200-byte datagram limit") {
		t.Fatalf("request over the datagram limit = %v; want ErrTooLarge naming the limit", err)
	}
	if n := srv.PacketStats().Received; n != 0 {
		t.Errorf("the server received %d datagrams; a request too large must not be sent", n)
	}
	var big []byte
	err = c.Call(context.Background(), "Arith.Big", Args{A: 5000}, &big)
	if !errors.Is(err, kiev.ErrTooLarge) || !strings.Contains(err.Error(), "datagram limit") {
		t.Fatalf("reply over the datagram limit = %v; want an ErrTooLarge answer", err)
	}

	// Raised on both sides, the same calls fit.
	srv2, target2 := newUDPArith(t, nil, kiev.WithPacket(kiev.Packet{MaxDatagram: 9000}))
	c2 := dial(t, target2, kiev.WithPacket(kiev.Packet{MaxDatagram: 9000}))
	if err := c2.Call(context.Background(), "Arith.Big", Args{A: 5000}, &big); err != nil || len(big) != 5000 {
		t.Fatalf("5000-byte reply with a 9000-byte limit: %d bytes, %v", len(big), err)
	}
	_ = srv2
}

// Counter counts the runs of each call, to check that none runs twice.
type Counter struct {
	mu   sync.Mutex
	runs map[int]int
}

func (c *Counter) Hit(ctx context.Context, id int, reply *int) error {
	c.mu.Lock()
	c.runs[id]++
	c.mu.Unlock()
	*reply = 2 * id
	return nil
}

// lossy wraps a UDP socket and mistreats what it receives and sends, as a
// bad network would: it drops, duplicates and reorders datagrams.
type lossy struct {
	*net.UDPConn
	loss, dup, reorder float64
	// drop, if set, sees each datagram received before the dice do, and
	// drops those it returns true for. Set it before the socket is served.
	drop func(b []byte) bool

	mu                      sync.Mutex
	rng                     *rand.Rand
	queued                  []datagram // received, to be delivered before reading more
	held                    *datagram  // received, delivered after the next one
	dropped, duped, swapped int
}

type datagram struct {
	b    []byte
	from netip.AddrPort
}

func newLossy(conn *net.UDPConn, loss, dup, reorder float64) *lossy {
	return &lossy{UDPConn: conn, loss: loss, dup: dup, reorder: reorder, rng: rand.New(rand.NewPCG(1, 2))}
}

func (l *lossy) ReadFromUDPAddrPort(b []byte) (int, netip.AddrPort, error) {
	for {
		l.mu.Lock()
		if len(l.queued) > 0 {
			d := l.queued[0]
			l.queued = l.queued[1:]
			l.mu.Unlock()
			return copy(b, d.b), d.from, nil
		}
		l.mu.Unlock()
		n, from, err := l.UDPConn.ReadFromUDPAddrPort(b)
		if err != nil {
			return n, from, err
		}
		d := datagram{append([]byte(nil), b[:n]...), from}
		l.mu.Lock()
		if l.drop != nil && l.drop(d.b) {
			l.dropped++
			l.mu.Unlock()
			continue
		}
		r := l.rng.Float64()
		switch {
		case r < l.loss:
			l.dropped++
			l.mu.Unlock()
			continue
		case r < l.loss+l.dup:
			l.duped++
			l.queued = append(l.queued, d, d)
		case r < l.loss+l.dup+l.reorder && l.held == nil:
			l.swapped++
			l.held = &d
			l.mu.Unlock()
			continue
		default:
			l.queued = append(l.queued, d)
		}
		if l.held != nil {
			l.queued = append(l.queued, *l.held)
			l.held = nil
		}
		l.mu.Unlock()
	}
}

func (l *lossy) ReadFrom(b []byte) (int, net.Addr, error) {
	n, ap, err := l.ReadFromUDPAddrPort(b)
	return n, net.UDPAddrFromAddrPort(ap), err
}

func (l *lossy) WriteToUDPAddrPort(b []byte, to netip.AddrPort) (int, error) {
	l.mu.Lock()
	r := l.rng.Float64()
	l.mu.Unlock()
	switch {
	case r < l.loss:
		l.mu.Lock()
		l.dropped++
		l.mu.Unlock()
		return len(b), nil
	case r < l.loss+l.dup:
		l.mu.Lock()
		l.duped++
		l.mu.Unlock()
		l.UDPConn.WriteToUDPAddrPort(b, to)
	}
	return l.UDPConn.WriteToUDPAddrPort(b, to)
}

func (l *lossy) WriteTo(b []byte, to net.Addr) (int, error) {
	return l.WriteToUDPAddrPort(b, to.(*net.UDPAddr).AddrPort())
}

func TestUDPLossyNetwork(t *testing.T) {
	counter := &Counter{runs: map[int]int{}}
	srv := kiev.NewServer()
	srv.Register(counter)
	var bad *lossy
	target := servePacket(t, srv, func(conn *net.UDPConn) net.PacketConn {
		bad = newLossy(conn, 0.20, 0.05, 0.05)
		return bad
	})
	packet := kiev.Packet{InitialRTO: 20 * time.Millisecond, MinRTO: 5 * time.Millisecond, MaxRTO: 100 * time.Millisecond}
	c := dial(t, target, kiev.WithPacket(packet))

	const workers, perWorker = 20, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				id := w*perWorker + i
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				var got int
				err := c.Call(ctx, "Counter.Hit", id, &got)
				cancel()
				if err == nil && got != 2*id {
					err = fmt.Errorf("call %d got reply %d", id, got)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("call over the lossy network failed: %v", err)
	}
	counter.mu.Lock()
	defer counter.mu.Unlock()
	if len(counter.runs) != workers*perWorker {
		t.Errorf("%d calls ran, want %d", len(counter.runs), workers*perWorker)
	}
	for id, n := range counter.runs {
		if n != 1 {
			t.Errorf("call %d ran its handler %d times", id, n)
		}
	}
	cs, ss := c.PacketStats(), srv.PacketStats()
	bad.mu.Lock()
	dropped, duped, swapped := bad.dropped, bad.duped, bad.swapped
	bad.mu.Unlock()
	if cs.Retransmits == 0 || ss.Duplicates == 0 || cs.Stale == 0 {
		t.Errorf("a lossy network should cause retransmissions, suppressed duplicates and stale replies: client %+v, server %+v", cs, ss)
	}
	t.Logf("%d calls over a network dropping 20%%, duplicating 5%%, reordering 5%%: all answered correctly, each handler ran once; the network dropped %d, duplicated %d, reordered %d datagrams; the client retransmitted %d requests and dropped %d stale replies; the server answered %d duplicate requests from its cache or ignored them while running",
		workers*perWorker, dropped, duped, swapped, cs.Retransmits, cs.Stale, ss.Duplicates)
}

func TestUDPHostileDatagrams(t *testing.T) {
	srv, target := newUDPArith(t, nil)
	addr, _ := net.ResolveUDPAddr("udp", strings.TrimPrefix(target, "udp://"))
	rogue, err := net.DialUDP("udp", nil, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	garbage := [][]byte{
		[]byte("GET / HTTP/1.1\r\n\r\n"),
		[]byte("KIEV"),
		[]byte("KIEV\x01\x00\x00\x00\x20\x01\x00"),
		[]byte("KIEV\x00\x00\x00\x00\x0c\x01\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00"),
		[]byte("KIEV\x01\x00\x00\x00\x0c\x02\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00"),         // a Response, to a server
		[]byte("KIEV\x01\x00\x00\x00\x0e\x01\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x02\x05\x07"), // priority 7 with a bad length
		make([]byte, 1400),
	}
	const rounds = 200
	measure := !raceEnabled
	var before, after runtime.MemStats
	if measure {
		runtime.GC()
		runtime.ReadMemStats(&before)
	}
	// Each round waits until the server has read it, so that no datagram
	// overflows the socket's receive buffer.
	deadline := time.Now().Add(10 * time.Second)
	for round := range rounds {
		for _, g := range garbage {
			if _, err := rogue.Write(g); err != nil {
				t.Fatal(err)
			}
		}
		for srv.PacketStats().Received < int64((round+1)*len(garbage)) && time.Now().Before(deadline) {
			runtime.Gosched() // waiting on the server's counter
		}
	}
	want := int64(rounds * len(garbage))
	// The server counts a datagram received before it finds it malformed:
	// let it finish judging the last one.
	for st := srv.PacketStats(); st.Malformed < st.Received && time.Now().Before(deadline); st = srv.PacketStats() {
		runtime.Gosched() // waiting on the server's counter
	}
	if measure {
		runtime.ReadMemStats(&after)
	}
	st := srv.PacketStats()
	if st.Received < want || st.Malformed != st.Received {
		t.Fatalf("server stats after %d garbage datagrams: %+v; want every one received and counted malformed", want, st)
	}
	if measure {
		n := after.Mallocs - before.Mallocs
		if n > 50 {
			t.Errorf("%d garbage datagrams cost %d allocations; want none beyond the read buffer", want, n)
		}
		t.Logf("%d garbage datagrams: %d allocations in the whole process while the server read them", want, n)
	}
	// The server still serves.
	c := dial(t, target)
	var r Reply
	if err := c.Call(context.Background(), "Arith.Add", Args{1, 2}, &r); err != nil || r.C != 3 {
		t.Fatalf("call after the garbage = %v, %v", r.C, err)
	}
}

func TestUDPRepliesFromElsewhereDropped(t *testing.T) {
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 1)}
	_, target := newUDPArith(t, svc)
	c := dial(t, target)
	done := make(chan error, 1)
	var r Reply
	go func() { done <- c.Call(context.Background(), "Arith.Block", Args{A: 42}, &r) }()
	<-svc.started
	// A rogue sends the client replies to every plausible id; none may be
	// taken for the call's.
	rogue, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	forged := []byte("KIEV\x01\x00\x00\x00\x0c\x02\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00")
	for range 50 {
		rogue.WriteTo(forged, kiev.PacketLocalAddr(c))
	}
	for c.PacketStats().Unexpected < 50 {
		runtime.Gosched() // waiting on the client's counter
	}
	close(svc.block)
	if err := <-done; err != nil || r.C != 42 {
		t.Fatalf("call after forged replies = %v, %v; want the server's reply 42", r.C, err)
	}
}

func TestUDPCancel(t *testing.T) {
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 1)}
	defer close(svc.block)
	_, target := newUDPArith(t, svc)
	c := dial(t, target)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Call(ctx, "Arith.Block", Args{}, &Reply{}) }()
	<-svc.started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled UDP call = %v", err)
	}
}

func TestUDPDedupCacheFull(t *testing.T) {
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 2)}
	_, target := newUDPArith(t, svc, kiev.WithPacket(kiev.Packet{DedupEntries: 2}))
	c := dial(t, target, kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1}))
	done := make(chan error, 2)
	for range 2 {
		go func() { done <- c.Call(context.Background(), "Arith.Block", Args{}, &Reply{}) }()
	}
	<-svc.started
	<-svc.started
	err := c.Call(context.Background(), "Arith.Add", Args{1, 1}, &Reply{})
	if !errors.Is(err, kiev.ErrOverloaded) || !strings.Contains(err.Error(), "duplicate-request cache is full") {
		t.Fatalf("call with the duplicate cache full = %v; want ErrOverloaded saying so", err)
	}
	close(svc.block)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func TestUDPShutdown(t *testing.T) {
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 1)}
	srv := kiev.NewServer()
	srv.Register(svc)
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServePacket(conn) }()
	c := dial(t, "udp://"+conn.LocalAddr().String(), kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1}))
	inflight := make(chan error, 1)
	var r Reply
	go func() { inflight <- c.Call(context.Background(), "Arith.Block", Args{A: 7}, &r) }()
	<-svc.started
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	// New calls are turned away while the call in flight finishes.
	for {
		err := c.Call(context.Background(), "Arith.Add", Args{1, 1}, &Reply{})
		if errors.Is(err, kiev.ErrShutdown) {
			break
		}
		if err != nil {
			t.Fatalf("call during Shutdown = %v; want ErrShutdown", err)
		}
	}
	close(svc.block)
	if err := <-inflight; err != nil || r.C != 7 {
		t.Fatalf("call in flight during Shutdown = %v, %v", r.C, err)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, kiev.ErrServerClosed) {
		t.Fatalf("ServePacket after Shutdown = %v", err)
	}
}

func TestUDPDiscovery(t *testing.T) {
	reg := memory.New()
	for _, name := range []string{"u1", "u2"} {
		srv := kiev.NewServer(kiev.WithRegistry(reg))
		srv.Register(&Who{name: name})
		servePacket(t, srv, nil)
	}
	w, _ := reg.Watch(context.Background(), "Who")
	defer w.Stop()
	var set []registry.Instance
	for len(set) < 2 {
		set, _ = w.Next(context.Background())
	}
	for _, in := range set {
		if in.Network != "udp" {
			t.Fatalf("a packet server registered %+v; want network udp", in)
		}
	}
	c := dial(t, "Who", kiev.WithRegistry(reg))
	waitProviders(t, c, 2)
	seen := map[string]bool{}
	for range 10 {
		seen[callName(t, c, context.Background())] = true
	}
	if !seen["u1"] || !seen["u2"] {
		t.Fatalf("calls over UDP through discovery reached %v", seen)
	}
	if c.PacketStats().Sent < 10 {
		t.Errorf("client stats %+v: the calls did not go over UDP", c.PacketStats())
	}
}

func TestUDPCacheFollowsAckFloor(t *testing.T) {
	srv, target := newUDPArith(t, nil)
	c := dial(t, target)
	var r Reply
	for i := range 500 {
		if err := c.Call(context.Background(), "Arith.Add", Args{i, 1}, &r); err != nil || r.C != i+1 {
			t.Fatalf("call %d = %v, %v", i, r.C, err)
		}
	}
	// Each request tells the server which calls the client has finished,
	// so the cache holds about the calls in flight, not the last
	// DedupLinger's worth.
	if n := srv.PacketStats().Cached; n > 2 {
		t.Errorf("after 500 calls one at a time, the server caches %d calls; want at most 2", n)
	}
}

// TestUDPMaxConcurrentCalls holds calls from one UDP client on a server
// that allows 2 per client. WithMaxConcurrentCalls applied to TCP only,
// so a UDP client could take every worker; now the third call is refused
// at once, and calls are served again once the first two end.
func TestUDPMaxConcurrentCalls(t *testing.T) {
	h := &Holder{started: make(chan int, 8), ended: make(chan error, 8), release: make(chan struct{})}
	srv := kiev.NewServer(kiev.WithMaxConcurrentCalls(2), kiev.WithLogger(slog.New(slog.DiscardHandler)))
	if err := srv.Register(h); err != nil {
		t.Fatal(err)
	}
	// One attempt per call: retries of the refused call would each be
	// counted as refused, and the client's throttle would then refuse
	// the last call itself some of the time (the design: three refusals
	// to two accepts is past its k of 2).
	c := dial(t, servePacket(t, srv, nil), kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1}))
	done := make(chan *kiev.Call, 2)
	for i := range 2 {
		c.Go(context.Background(), "Holder.Hold", i, new(int), done)
		<-h.started
	}
	err := c.Call(context.Background(), "Holder.Hold", 3, new(int))
	if !errors.Is(err, kiev.ErrOverloaded) || !strings.Contains(err.Error(), "WithMaxConcurrentCalls") {
		t.Errorf("a third call from the client: %v; want ErrOverloaded naming WithMaxConcurrentCalls", err)
	}
	close(h.release)
	for range 2 {
		if call := <-done; call.Error != nil {
			t.Errorf("a held call: %v", call.Error)
		}
	}
	if err := c.Call(context.Background(), "Holder.Hold", 4, new(int)); err != nil {
		t.Errorf("a call once the others ended: %v", err)
	}
}

// TestUDPAmplifiers checks two ways a spoofed request could make the
// server send a victim many times its bytes: kiev.Reflection's long
// answers (598 bytes for a 62-byte request, ×389 with 40 services and a
// large MaxDatagram), refused over UDP unless Packet.ServeReflection; and
// a cached reply, sent again for every retransmission without end, now
// at most MaxReplyResends times.
func TestUDPAmplifiers(t *testing.T) {
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)))
	srv.Register(&Arith{})
	target := servePacket(t, srv, nil)
	var list any
	err := dial(t, target).Call(context.Background(), "kiev.Reflection.List", struct{}{}, &list)
	if !errors.Is(err, kiev.ErrNotFound) || !strings.Contains(err.Error(), "Packet.ServeReflection") {
		t.Errorf("kiev.Reflection.List over UDP: %v; want NotFound naming Packet.ServeReflection", err)
	}
	open := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)), kiev.WithPacket(kiev.Packet{ServeReflection: true, MaxDatagram: 9000}))
	open.Register(&Arith{})
	if err := dial(t, servePacket(t, open, nil), kiev.WithPacket(kiev.Packet{MaxDatagram: 9000})).Call(context.Background(), "kiev.Reflection.List", struct{}{}, &list); err != nil {
		t.Errorf("kiev.Reflection.List over UDP with ServeReflection: %v", err)
	}

	// One request datagram, answered, then sent 20 times more: its cached
	// reply goes out at most MaxReplyResends times more.
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	server, err := net.ResolveUDPAddr("udp", strings.TrimPrefix(target, "udp://"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := codec.Msgpack.Marshal(nil, Args{1, 2})
	b := wire.BeginDatagram(nil, wire.TypeRequest, 1)
	b = wire.AppendString(b, wire.KeyMethod, "Arith.Add")
	b = wire.AppendString(b, wire.KeyCodec, "msgpack")
	b = wire.AppendUvarint(b, wire.KeySession, 77)
	if err := wire.EndHeader(b, wire.PrefaceLen); err != nil {
		t.Fatal(err)
	}
	b = append(b, body...)
	if err := wire.EndFrame(b, wire.PrefaceLen, 1<<16); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	if _, err := conn.WriteToUDP(b, server); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second)) // a safety net
	if _, _, err := conn.ReadFromUDP(buf); err != nil {
		t.Fatalf("no answer to the request: %v", err)
	}
	got := 0
	for range 20 {
		if _, err := conn.WriteToUDP(b, server); err != nil {
			t.Fatal(err)
		}
	}
	for {
		_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond)) // the server answers within it, or not at all
		if _, _, err := conn.ReadFromUDP(buf); err != nil {
			break
		}
		got++
	}
	t.Logf("20 more copies of an answered request: %d answers", got)
	if got == 0 || got > kiev.MaxReplyResends {
		t.Errorf("20 more copies of an answered request were answered %d times; want 1 to %d", got, kiev.MaxReplyResends)
	}
}

// udpRequest is a request datagram for method with args, in session,
// carrying ticket if it is not nil.
func udpRequest(t *testing.T, id, session uint64, method string, args any, ticket []byte) []byte {
	t.Helper()
	body, err := codec.Msgpack.Marshal(nil, args)
	if err != nil {
		t.Fatal(err)
	}
	b := wire.BeginDatagram(nil, wire.TypeRequest, id)
	b = wire.AppendString(b, wire.KeyMethod, method)
	b = wire.AppendString(b, wire.KeyCodec, "msgpack")
	b = wire.AppendUvarint(b, wire.KeySession, session)
	if ticket != nil {
		b = wire.AppendField(b, wire.KeyTicket, ticket)
	}
	if err := wire.EndHeader(b, wire.PrefaceLen); err != nil {
		t.Fatal(err)
	}
	b = append(b, body...)
	if err := wire.EndFrame(b, wire.PrefaceLen, 1<<16); err != nil {
		t.Fatal(err)
	}
	return b
}

// udpAnswer reads the next datagram on conn and returns its size and
// header, or fails the test.
func udpAnswer(t *testing.T, conn *net.UDPConn) (int, wire.Header) {
	t.Helper()
	buf := make([]byte, 65536)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second)) // a safety net
	n, _, err := conn.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	f, _, err := wire.ParseDatagram(buf[:n])
	if err != nil {
		t.Fatal(err)
	}
	var h wire.Header
	if err := wire.ParseHeader(f.Header, &h); err != nil {
		t.Fatal(err)
	}
	h.Ticket = append([]byte(nil), h.Ticket...)
	return n, h
}

// TestUDPAmplificationBound asks, from a raw socket, for a reply 40 times
// larger than the request. The server sent it to any source address, so
// a spoofed request aimed it at a victim. Now an address that has not
// shown it receives gets at most 3 times its bytes: a Retry with a ticket
// bound to the address, and the reply once the request comes back with
// it; a replay of that request from another address gets only a Retry. A
// kiev client does all this by itself.
func TestUDPAmplificationBound(t *testing.T) {
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)), kiev.WithPacket(kiev.Packet{MaxDatagram: 9000}))
	srv.Register(&Arith{})
	target := servePacket(t, srv, nil)
	server, err := net.ResolveUDPAddr("udp", strings.TrimPrefix(target, "udp://"))
	if err != nil {
		t.Fatal(err)
	}
	listen := func() *net.UDPConn {
		conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	me, other := listen(), listen()
	req := udpRequest(t, 1, 42, "Arith.Big", Args{A: 4000}, nil)
	if _, err := me.WriteToUDP(req, server); err != nil {
		t.Fatal(err)
	}
	n, h := udpAnswer(t, me)
	// The Retry of a held reply says TooLarge to clients that do not know
	// tickets, which do not retry it: the call ran, and must not run again.
	if n > 3*len(req) || h.Ticket == nil || h.ErrCode != uint64(kiev.CodeTooLarge) {
		t.Fatalf("a %d-byte request for 4000 bytes: %d bytes back (ticket %x, code %d); want a Retry of at most %d bytes, code TooLarge", len(req), n, h.Ticket, h.ErrCode, 3*len(req))
	}
	t.Logf("a %d-byte request for 4000 bytes: a %d-byte Retry", len(req), n)
	withTicket := udpRequest(t, 1, 42, "Arith.Big", Args{A: 4000}, h.Ticket)
	if _, err := me.WriteToUDP(withTicket, server); err != nil {
		t.Fatal(err)
	}
	if n, h := udpAnswer(t, me); n < 4000 || h.ErrCode != 0 {
		t.Errorf("the request again with its ticket: %d bytes, code %d; want the 4000-byte reply", n, h.ErrCode)
	}
	// The same datagram, ticket and all, from another address.
	if _, err := other.WriteToUDP(withTicket, server); err != nil {
		t.Fatal(err)
	}
	if n, h := udpAnswer(t, other); n > 3*len(withTicket) || h.ErrCode == 0 {
		t.Errorf("a replay from another address: %d bytes, code %d; want a Retry within 3 times its %d bytes", n, h.ErrCode, len(withTicket))
	}

	c := dial(t, target, kiev.WithPacket(kiev.Packet{MaxDatagram: 9000}))
	var big []byte
	if err := c.Call(context.Background(), "Arith.Big", Args{A: 4000}, &big); err != nil || len(big) != 4000 {
		t.Fatalf("a kiev client's call for 4000 bytes: %d bytes, %v", len(big), err)
	}
	if st := srv.PacketStats(); st.Retries < 3 {
		t.Errorf("PacketStats.Retries = %d; want the three Retries sent", st.Retries)
	}
}

// TestUDPFloodKeepsRoomForProvenClients fills the duplicate cache with
// calls from a spoofed-looking source that never shows it receives. Such a
// flood filled the whole cache, and then every real call was refused. Now
// it takes at most half; a client that has shown it receives is served.
func TestUDPFloodKeepsRoomForProvenClients(t *testing.T) {
	a := &Arith{block: make(chan struct{}), started: make(chan struct{}, 64)}
	defer close(a.block)
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)), kiev.WithPacket(kiev.Packet{DedupEntries: 8}))
	srv.Register(a)
	target := servePacket(t, srv, nil)
	server, err := net.ResolveUDPAddr("udp", strings.TrimPrefix(target, "udp://"))
	if err != nil {
		t.Fatal(err)
	}
	flood, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer flood.Close()
	for i := range 20 {
		if _, err := flood.WriteToUDP(udpRequest(t, 1, uint64(100+i), "Arith.Block", Args{}, nil), server); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 { // half the cache of 8
		<-a.started
	}
	c := dial(t, target)
	var r Reply
	if err := c.Call(context.Background(), "Arith.Add", Args{2, 3}, &r); err != nil || r.C != 5 {
		t.Errorf("a real client's call beside the flood: %d, %v; want 5", r.C, err)
	}
	if st := srv.PacketStats(); st.Cached > 8 || st.CacheFull < 16 {
		t.Errorf("cache %d calls, %d refused; want at most 8 held and the flood's 16 beyond half refused", st.Cached, st.CacheFull)
	}
}

// capture records the datagrams a server's socket reads.
type capture struct {
	net.PacketConn
	mu  sync.Mutex
	got [][]byte
}

func (c *capture) ReadFrom(p []byte) (int, net.Addr, error) {
	n, addr, err := c.PacketConn.ReadFrom(p)
	if n > 0 {
		c.mu.Lock()
		c.got = append(c.got, append([]byte(nil), p[:n]...))
		c.mu.Unlock()
	}
	return n, addr, err
}

func (c *capture) requests() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [][]byte
	for _, b := range c.got {
		if f, _, err := wire.ParseDatagram(b); err == nil && f.Type == wire.TypeRequest {
			out = append(out, b)
		}
	}
	return out
}

// Tallied counts its calls.
type Tallied struct{ n atomic.Int64 }

func (c *Tallied) Inc(ctx context.Context, _ int, reply *string) error {
	c.n.Add(1)
	*reply = kiev.MetadataFrom(ctx).Get(kiev.PacketKeyMetadata)
	return nil
}

// TestUDPSignedRequestsCannotBeReplayed signs UDP calls with a key
// (WithPacketKey, WithPacketKeys), and replays a captured request: from
// another address, after the server's dedup linger, and once stale. A
// token in metadata travelled in clear and a replay from elsewhere, or
// after the linger, ran the handler again. Now none runs it; unsigned or
// wrongly signed requests are refused; the handler sees the key id.
func TestUDPSignedRequestsCannotBeReplayed(t *testing.T) {
	keys := map[string][]byte{"billing": []byte("0123456789abcdef0123456789abcdef")}
	counter := &Tallied{}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)),
		kiev.WithPacket(kiev.Packet{DedupLinger: 50 * time.Millisecond, MaxAmplification: -1, AuthSkew: 200 * time.Millisecond}),
		kiev.WithPacketKeys(func(id string) ([]byte, bool) { k, ok := keys[id]; return k, ok }))
	srv.Register(counter)
	var cap *capture
	target := servePacket(t, srv, func(c *net.UDPConn) net.PacketConn {
		cap = &capture{PacketConn: c}
		return cap
	})
	client := kiev.WithPacket(kiev.Packet{MaxRTO: 20 * time.Millisecond})
	signed := dial(t, target, client, kiev.WithPacketKey("billing", keys["billing"]))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var who string
	if err := signed.Call(ctx, "Tallied.Inc", 0, &who); err != nil || who != "billing" {
		t.Fatalf("a signed call: %q, %v; want the handler to see key billing", who, err)
	}
	for name, c := range map[string]*kiev.Client{
		"unsigned":  dial(t, target, client),
		"wrong key": dial(t, target, client, kiev.WithPacketKey("billing", []byte("not the key at all, not at all"))),
		"unknown":   dial(t, target, client, kiev.WithPacketKey("nobody", keys["billing"])),
	} {
		if err := c.Call(context.Background(), "Tallied.Inc", 0, new(string)); !errors.Is(err, kiev.ErrUnauthenticated) {
			t.Errorf("%s: %v; want ErrUnauthenticated", name, err)
		}
	}
	reqs := cap.requests()
	if len(reqs) == 0 {
		t.Fatal("no request captured")
	}
	replay := reqs[0]
	if n := counter.n.Load(); n != 1 {
		t.Fatalf("the handler ran %d times; want once", n)
	}
	server, err := net.ResolveUDPAddr("udp", strings.TrimPrefix(target, "udp://"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	send := func() {
		if _, err := other.WriteToUDP(replay, server); err != nil {
			t.Fatal(err)
		}
	}
	// From another address, at once; then after the dedup linger (50ms),
	// while the request is still fresh (its 300ms timeout plus a skew of
	// 200ms); then once it is stale, when it is refused.
	send()
	time.Sleep(150 * time.Millisecond) // the workload: past the linger
	t.Logf("after the first replay: %d runs", counter.n.Load())
	send()
	time.Sleep(600 * time.Millisecond) // the workload: past the request's life
	t.Logf("after the second replay: %d runs", counter.n.Load())
	send()
	_ = other.SetReadDeadline(time.Now().Add(500 * time.Millisecond)) // answers come within it, or not at all
	var codes []uint64
	buf := make([]byte, 2048)
	for {
		n, _, err := other.ReadFromUDP(buf)
		if err != nil {
			break
		}
		f, _, _ := wire.ParseDatagram(buf[:n])
		var h wire.Header
		_ = wire.ParseHeader(f.Header, &h)
		codes = append(codes, h.ErrCode)
	}
	if n := counter.n.Load(); n != 1 {
		t.Errorf("replays ran the handler %d more times; want none", n-1)
	}
	if len(codes) == 0 || codes[len(codes)-1] != uint64(kiev.CodeUnauthenticated) {
		t.Errorf("answers to the replays had codes %v; want the stale one refused, Unauthenticated (%d)", codes, kiev.CodeUnauthenticated)
	}
}

// TestUDPSignedCancel cancels a signed call: the server finds it by its
// key, not its address, and ends the handler's context.
func TestUDPSignedCancel(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	h := &Holder{started: make(chan int, 1), ended: make(chan error, 1), release: make(chan struct{})}
	defer close(h.release)
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)),
		kiev.WithPacketKeys(func(id string) ([]byte, bool) { return key, id == "k" }))
	srv.Register(h)
	c := dial(t, servePacket(t, srv, nil), kiev.WithPacketKey("k", key))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Call(ctx, "Holder.Hold", 1, new(int)) }()
	<-h.started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the canceled call: %v", err)
	}
	select {
	case err := <-h.ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the handler ended with %v; want its context canceled", err)
		}
	case <-time.After(5 * time.Second): // a safety net: the call's own deadline is 10s
		t.Error("the signed Cancel did not reach the handler")
	}
}

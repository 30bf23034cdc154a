package kiev_test

import (
	"context"
	"errors"
	"net"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/wire"
)

// Waiter's Wait runs until its ctx ends, and reports when and why.
type Waiter struct {
	started chan struct{}
	ended   chan ctxEnd
}

// ctxEnd is when a handler's ctx ended, and its Err.
type ctxEnd struct {
	at  time.Time
	err error
}

func newWaiter() *Waiter {
	return &Waiter{started: make(chan struct{}, 1), ended: make(chan ctxEnd, 1)}
}

func (w *Waiter) Wait(ctx context.Context, _ int, _ *int) error {
	w.started <- struct{}{}
	<-ctx.Done()
	w.ended <- ctxEnd{time.Now(), ctx.Err()}
	return ctx.Err()
}

// noLeaks checks, once the test's other cleanups have closed its clients
// and servers, that no goroutine it started is left. Call it first.
func noLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// cancelServer serves a Waiter and an Arith over UDP, through a lossy
// socket that drops the share loss of the datagrams it reads and sends,
// and also those received that drop returns true for (if not nil).
func cancelServer(t *testing.T, loss float64, drop func([]byte) bool) (*kiev.Server, *Waiter, string) {
	t.Helper()
	w := newWaiter()
	srv := kiev.NewServer()
	if err := srv.Register(w); err != nil {
		t.Fatal(err)
	}
	if err := srv.Register(&Arith{}); err != nil {
		t.Fatal(err)
	}
	target := servePacket(t, srv, func(conn *net.UDPConn) net.PacketConn {
		l := newLossy(conn, loss, 0, 0)
		l.drop = drop
		return l
	})
	return srv, w, target
}

// isCancel reports whether b is a Cancel datagram.
func isCancel(b []byte) bool {
	f, _, err := wire.ParseDatagram(b)
	return err == nil && f.Type == wire.TypeCancel
}

// cancelWait calls w.Wait with a deadline timeout away, cancels the call
// once the handler runs, and returns how long after the cancel the
// handler's ctx ended, and why. The caller must see context.Canceled at
// once, whatever the handler's fate.
func cancelWait(t *testing.T, c *kiev.Client, w *Waiter, timeout time.Duration) (time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Call(ctx, "Waiter.Wait", 0, new(int)) }()
	bound := time.NewTimer(timeout + 5*time.Second)
	defer bound.Stop()
	select {
	case <-w.started:
	case err := <-done:
		t.Fatalf("the call ended before its handler ran: %v", err)
	case <-bound.C:
		t.Fatal("the handler did not start")
	}
	canceled := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled call = %v; want context.Canceled", err)
		}
		if waited := time.Since(canceled); waited > time.Second {
			t.Errorf("the caller waited %v after its cancel; want its error at once", waited)
		}
	case <-bound.C:
		t.Fatal("the canceled call did not return")
	}
	select {
	case end := <-w.ended:
		return end.at.Sub(canceled), end.err
	case <-bound.C:
		t.Fatalf("the handler's ctx did not end %v after the cancel, past the call's deadline", timeout+5*time.Second)
		return 0, nil
	}
}

// TestUDPCancelEndsHandler checks that a caller's cancel reaches the
// handler over UDP, on a clean network, within milliseconds.
func TestUDPCancelEndsHandler(t *testing.T) {
	noLeaks(t)
	srv, w, target := cancelServer(t, 0, nil)
	c := dial(t, target)
	const runs, timeout = 20, 5 * time.Second
	took := make([]time.Duration, 0, runs)
	for range runs {
		d, err := cancelWait(t, c, w, timeout)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the handler's ctx ended %v after the cancel with %v; want context.Canceled, from the client's Cancel", d, err)
		}
		took = append(took, d)
	}
	slices.Sort(took)
	median, worst := took[runs/2], took[runs-1]
	if median > 10*time.Millisecond || worst > time.Second {
		t.Errorf("cancel to handler ctx done over loopback: median %v, worst %v; want a few milliseconds", median, worst)
	}
	if st := srv.PacketStats(); st.SessionlessCancels != 0 {
		t.Errorf("server stats %+v: the client's Cancels lack the session", st)
	}
	t.Logf("cancel to handler ctx done, %d runs on a clean network: min %v, median %v, max %v", runs, took[0], median, worst)
}

// TestUDPCancelUnderLoss checks that a caller's cancel still reaches the
// handler where a fifth of the datagrams are lost: the client sends the
// Cancel again, and if every copy is lost, the call's deadline ends it.
func TestUDPCancelUnderLoss(t *testing.T) {
	noLeaks(t)
	var cancels atomic.Int64
	_, w, target := cancelServer(t, 0.20, func(b []byte) bool {
		if isCancel(b) {
			cancels.Add(1)
		}
		return false
	})
	c := dial(t, target, kiev.WithPacket(kiev.Packet{InitialRTO: 20 * time.Millisecond, MinRTO: 5 * time.Millisecond, MaxRTO: 100 * time.Millisecond}))
	const runs, timeout = 30, time.Second
	var took []time.Duration
	byDeadline := 0
	for range runs {
		d, err := cancelWait(t, c, w, timeout)
		switch {
		case errors.Is(err, context.Canceled):
			took = append(took, d)
		case errors.Is(err, context.DeadlineExceeded):
			byDeadline++
		default:
			t.Fatalf("the handler's ctx ended with %v", err)
		}
	}
	// Each of the four Cancels of a call is lost with odds 1 in 5, so
	// about one call in 600 ends by its deadline.
	if byDeadline > 2 {
		t.Errorf("%d of %d canceled calls ran to their deadline: the Cancel is not resent", byDeadline, runs)
	}
	slices.Sort(took)
	t.Logf("cancel to handler ctx done, %d runs at 20%% loss: %d by a Cancel (min %v, median %v, max %v), %d by the %v deadline; the server's socket had seen %d Cancels before the loss (resends included, the last ones still due)",
		runs, len(took), took[0], took[len(took)/2], took[len(took)-1], byDeadline, timeout, cancels.Load())
}

// TestUDPCancelResent checks that the client sends a Cancel again when it
// is lost, and that it stops after a few sends.
func TestUDPCancelResent(t *testing.T) {
	noLeaks(t)
	var cancels, lose atomic.Int64
	lose.Store(3) // of the first call's 4 Cancels
	_, w, target := cancelServer(t, 0, func(b []byte) bool {
		if !isCancel(b) {
			return false
		}
		cancels.Add(1)
		return lose.Add(-1) >= 0
	})
	c := dial(t, target, kiev.WithPacket(kiev.Packet{InitialRTO: 20 * time.Millisecond}))
	d, err := cancelWait(t, c, w, 5*time.Second)
	if !errors.Is(err, context.Canceled) || d > 2*time.Second {
		t.Fatalf("with its first 3 Cancels lost, the handler's ctx ended %v after the cancel with %v; want context.Canceled from the 4th", d, err)
	}
	t.Logf("the 4th Cancel, the first not lost, ended the handler %v after the cancel", d)

	// With every Cancel lost, the handler runs to the call's deadline,
	// and the client stops resending before it.
	lose.Store(1 << 30)
	cancels.Store(0)
	d, err = cancelWait(t, c, w, 500*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with every Cancel lost, the handler's ctx ended %v after the cancel with %v; want the deadline", d, err)
	}
	if n := cancels.Load(); n != 4 {
		t.Errorf("the client sent a call's Cancel %d times by the deadline; want 4", n)
	}
}

// TestUDPAckFloorCancelsHandler checks that a handler whose Cancels are
// all lost ends as soon as the client's next request says the client no
// longer waits for it.
func TestUDPAckFloorCancelsHandler(t *testing.T) {
	noLeaks(t)
	_, w, target := cancelServer(t, 0, isCancel)
	c := dial(t, target)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Call(ctx, "Waiter.Wait", 0, new(int)) }()
	select {
	case <-w.started:
	case <-ctx.Done():
		t.Fatal("the handler did not start")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled call = %v", err)
	}
	next := time.Now()
	var r Reply
	if err := c.Call(context.Background(), "Arith.Add", Args{1, 2}, &r); err != nil || r.C != 3 {
		t.Fatalf("the next call = %v, %v", r.C, err)
	}
	bound := time.NewTimer(10 * time.Second)
	defer bound.Stop()
	select {
	case end := <-w.ended:
		if !errors.Is(end.err, context.Canceled) || end.at.Sub(next) > time.Second {
			t.Fatalf("the handler's ctx ended %v after the next request with %v; want context.Canceled at once", end.at.Sub(next), end.err)
		}
	case <-bound.C:
		t.Fatal("the handler's ctx did not end")
	}
}

// TestUDPCancelWithoutSession checks that a Cancel without the Session
// field, as older kiev clients sent it, cancels nothing and is counted,
// while the same Cancel with the session cancels the handler.
func TestUDPCancelWithoutSession(t *testing.T) {
	noLeaks(t)
	srv, w, target := cancelServer(t, 0, nil)
	server, err := net.ResolveUDPAddr("udp4", target[len("udp://"):])
	if err != nil {
		t.Fatal(err)
	}
	peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	const session, id = 77, 1
	datagram := func(f []byte) []byte { return append(wire.AppendPreface(nil, wire.Version), f...) }
	args, err := codec.Msgpack.Marshal(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	request := datagram(frame(wire.TypeRequest, id, func(b []byte) []byte {
		b = wire.AppendString(b, wire.KeyMethod, "Waiter.Wait")
		b = wire.AppendString(b, wire.KeyCodec, codec.Msgpack.Name())
		b = wire.AppendUvarint(b, wire.KeyTimeout, uint64((5 * time.Second).Microseconds()))
		b = wire.AppendUvarint(b, wire.KeySession, session)
		return wire.AppendUvarint(b, wire.KeyAckFloor, id)
	}, args))
	cancelFrom := func(s uint64) []byte {
		return datagram(frame(wire.TypeCancel, id, func(b []byte) []byte {
			if s != 0 {
				b = wire.AppendUvarint(b, wire.KeySession, s)
			}
			return b
		}, nil))
	}
	send := func(b []byte) {
		t.Helper()
		if _, err := peer.WriteToUDP(b, server); err != nil {
			t.Fatal(err)
		}
	}
	send(request)
	bound := time.NewTimer(10 * time.Second)
	defer bound.Stop()
	select {
	case <-w.started:
	case <-bound.C:
		t.Fatal("the handler did not start")
	}
	// Another session's Cancel, then one with no session: neither is the
	// call's. The server reads datagrams in turn, so once it has counted
	// the second, it has judged both.
	send(cancelFrom(session + 1))
	send(cancelFrom(0))
	deadline := time.Now().Add(10 * time.Second)
	for srv.PacketStats().SessionlessCancels < 1 && time.Now().Before(deadline) {
		runtime.Gosched() // waiting on the server's counter
	}
	if st := srv.PacketStats(); st.SessionlessCancels != 1 || st.Malformed != 0 {
		t.Fatalf("server stats %+v after a Cancel without session; want it counted in SessionlessCancels, once", st)
	}
	select {
	case end := <-w.ended:
		t.Fatalf("a Cancel without the call's session ended its handler's ctx: %v", end.err)
	default:
	}
	canceled := time.Now()
	send(cancelFrom(session))
	select {
	case end := <-w.ended:
		if !errors.Is(end.err, context.Canceled) {
			t.Fatalf("the handler's ctx ended with %v after the call's Cancel; want context.Canceled", end.err)
		}
		t.Logf("the call's own Cancel ended its handler's ctx %v after it was sent", end.at.Sub(canceled))
	case <-bound.C:
		t.Fatal("the call's own Cancel did not end its handler's ctx")
	}
}

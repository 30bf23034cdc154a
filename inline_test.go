package kiev_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/shed"
)

// Lender's Work is quick unless asked to wait, so its calls run on the
// connection's reader once the server has seen that it is quick.
type Lender struct {
	started  chan struct{}
	release  chan struct{}
	canceled chan struct{} // Work signals here when its ctx ends
}

// Work returns args.B at once, or with args.A set, once released or its
// context ends.
func (l *Lender) Work(ctx context.Context, args Args, reply *Reply) error {
	if args.A != 0 {
		l.started <- struct{}{}
		select {
		case <-l.release:
		case <-ctx.Done():
			l.canceled <- struct{}{}
			return ctx.Err()
		}
	}
	reply.C = args.B
	return nil
}

// Nap takes a couple of milliseconds: too slow to run on the reader.
func (l *Lender) Nap(args Args, reply *Reply) error {
	time.Sleep(2 * time.Millisecond) // stands for real work
	reply.C = args.B
	return nil
}

// lenderServer serves a Lender and trains the server on quick calls, so
// that the next call alone on a connection runs on its reader.
func lenderServer(t *testing.T, opts ...kiev.ServerOption) (*kiev.Server, *Lender, *kiev.Client) {
	t.Helper()
	t.Cleanup(kiev.SetInlineMaxCost(time.Second)) // the race detector slows quick calls
	srv := kiev.NewServer(opts...)
	l := &Lender{started: make(chan struct{}, 1), release: make(chan struct{}), canceled: make(chan struct{}, 1)}
	if err := srv.Register(l); err != nil {
		t.Fatal(err)
	}
	c := dial(t, startServer(t, srv), kiev.WithHeartbeat(20*time.Millisecond, 100*time.Millisecond))
	// A call runs on the reader only if the call before it is wholly
	// done when it arrives. The worker that ran that call sends its reply
	// before it forgets the call, so on a busy machine the next call can
	// arrive in between, now and then: call until one runs on the reader.
	for i := range 2000 {
		var r Reply
		if err := c.Call(context.Background(), "Lender.Work", Args{B: i}, &r); err != nil || r.C != i {
			t.Fatalf("quick call %d: %v, reply %d", i, err, r.C)
		}
		if runs, _ := kiev.InlineCounts(srv); i >= 20 && runs > 0 {
			return srv, l, c
		}
	}
	t.Fatal("none of 2,000 quick calls alone on their connection ran on the reader")
	return nil, nil, nil
}

// A call that runs on the reader and turns out slow must not hold up the
// calls behind it on the same connection: the watchdog hands the reading
// to a new goroutine.
func TestSlowCallOnReaderDoesNotHoldConnection(t *testing.T) {
	srv, l, c := lenderServer(t)
	slow := c.Go(context.Background(), "Lender.Work", Args{A: 1, B: 1}, &Reply{}, nil)
	<-l.started

	// The slow call holds the reader. These calls are read only once the
	// watchdog has taken the reading over.
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var r Reply
		err := c.Call(ctx, "Lender.Work", Args{B: 100 + i}, &r)
		cancel()
		if err != nil || r.C != 100+i {
			t.Fatalf("call %d behind a slow one: %v, reply %d", i, err, r.C)
		}
	}
	select {
	case <-slow.Done:
		t.Fatal("the slow call ended before it was released")
	default:
	}
	if _, takeovers := kiev.InlineCounts(srv); takeovers == 0 {
		t.Fatal("the watchdog took no reader over, yet calls behind a slow one on the reader were answered")
	}
	close(l.release)
	if got := <-slow.Done; got.Error != nil || got.Reply.(*Reply).C != 1 {
		t.Fatalf("slow call: %v", got.Error)
	}
}

// A slow call on the reader must not starve the heartbeat: the
// connection outlives a call five heartbeat timeouts long.
func TestSlowCallOnReaderKeepsHeartbeat(t *testing.T) {
	srv, l, c := lenderServer(t, kiev.WithHeartbeat(20*time.Millisecond, 100*time.Millisecond))
	slow := c.Go(context.Background(), "Lender.Work", Args{A: 1, B: 2}, &Reply{}, nil)
	<-l.started
	wait := time.NewTimer(500 * time.Millisecond)
	defer wait.Stop()
	select {
	case got := <-slow.Done:
		t.Fatalf("slow call ended before it was released: %v", got.Error)
	case <-wait.C:
	}
	close(l.release)
	if got := <-slow.Done; got.Error != nil || got.Reply.(*Reply).C != 2 {
		t.Fatalf("slow call, after five heartbeat timeouts: %v", got.Error)
	}
	var r Reply
	if err := c.Call(context.Background(), "Lender.Work", Args{B: 3}, &r); err != nil || r.C != 3 {
		t.Fatalf("next call: %v, reply %d", err, r.C)
	}
	if _, takeovers := kiev.InlineCounts(srv); takeovers == 0 {
		t.Fatal("the watchdog took no reader over")
	}
}

// Canceling a call that runs on the reader reaches its handler: the
// Cancel frame is read by the goroutine that took the reading over.
func TestCancelReachesCallOnReader(t *testing.T) {
	_, l, c := lenderServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	slow := c.Go(ctx, "Lender.Work", Args{A: 1}, &Reply{}, nil)
	<-l.started
	cancel()
	if got := <-slow.Done; !errors.Is(got.Error, context.Canceled) {
		t.Fatalf("canceled call: %v, want context.Canceled", got.Error)
	}
	wait := time.NewTimer(5 * time.Second)
	defer wait.Stop()
	select {
	case <-l.canceled:
	case <-wait.C:
		t.Fatal("the handler running on the reader never saw its call canceled")
	}
	var r Reply
	if err := c.Call(context.Background(), "Lender.Work", Args{B: 4}, &r); err != nil || r.C != 4 {
		t.Fatalf("next call: %v, reply %d", err, r.C)
	}
}

// A server whose scheduler is disabled runs every call on a goroutine of
// its own, as net/rpc does: never on the reader.
func TestDisabledSchedulerRunsNothingOnReader(t *testing.T) {
	srv := kiev.NewServer(kiev.WithShed(shed.Options{Disabled: true}))
	if err := srv.Register(&Lender{}); err != nil {
		t.Fatal(err)
	}
	c := dial(t, startServer(t, srv))
	for i := range 40 {
		var r Reply
		if err := c.Call(context.Background(), "Lender.Work", Args{B: i}, &r); err != nil {
			t.Fatal(err)
		}
	}
	if runs, _ := kiev.InlineCounts(srv); runs != 0 {
		t.Fatalf("%d calls ran on the reader with the scheduler disabled", runs)
	}
}

// Calls of a method that takes milliseconds run on workers, never on the
// reader, where they would hold up the connection's other calls.
func TestSlowMethodNeverRunsOnReader(t *testing.T) {
	srv := kiev.NewServer()
	if err := srv.Register(&Lender{}); err != nil {
		t.Fatal(err)
	}
	c := dial(t, startServer(t, srv))
	for i := range 30 {
		var r Reply
		if err := c.Call(context.Background(), "Lender.Nap", Args{B: i}, &r); err != nil || r.C != i {
			t.Fatalf("call %d: %v, reply %d", i, err, r.C)
		}
	}
	if runs, _ := kiev.InlineCounts(srv); runs != 0 {
		t.Fatalf("%d calls of a 2 ms method ran on the reader", runs)
	}
}

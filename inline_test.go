package kiev_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/wire"
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
func lenderServer(t *testing.T, opts ...kiev.ServerOption) (*kiev.Server, *Lender, *kiev.Client, string) {
	t.Helper()
	// The race detector slows quick calls.
	srv := kiev.NewServer(append([]kiev.ServerOption{kiev.InlineMaxCost(time.Second)}, opts...)...)
	l := &Lender{started: make(chan struct{}, 1), release: make(chan struct{}), canceled: make(chan struct{}, 1)}
	if err := srv.Register(l); err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, srv)
	// The client pings often, so that a server reader lent too long would
	// miss its pings and cut the connection; its own timeout is long, as
	// what is tested is the server's side.
	c := dial(t, addr, kiev.WithHeartbeat(20*time.Millisecond, time.Second))
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
			return srv, l, c, addr
		}
	}
	t.Fatal("none of 2,000 quick calls alone on their connection ran on the reader")
	return nil, nil, nil, ""
}

// A call that runs on the reader and turns out slow must not hold up the
// calls behind it on the same connection: the watchdog hands the reading
// to a new goroutine.
func TestSlowCallOnReaderDoesNotHoldConnection(t *testing.T) {
	srv, l, c, _ := lenderServer(t)
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
// connection outlives a call five heartbeat timeouts long. (The server's
// timeout is 300 ms, not less: on a machine loaded by parallel test
// packages, a process can be descheduled for 100 ms, which a heartbeat
// rightly takes for a dead peer.)
func TestSlowCallOnReaderKeepsHeartbeat(t *testing.T) {
	srv, l, c, _ := lenderServer(t, kiev.WithHeartbeat(50*time.Millisecond, 300*time.Millisecond))
	slow := c.Go(context.Background(), "Lender.Work", Args{A: 1, B: 2}, &Reply{}, nil)
	<-l.started
	wait := time.NewTimer(1500 * time.Millisecond)
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
	_, l, c, _ := lenderServer(t)
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

// burstConn opens a bare kiev connection to addr, as a client that sends
// many calls in one write would.
func burstConn(t *testing.T, addr string) (*net.TCPConn, *wire.Reader) {
	t.Helper()
	nc := rawDial(t, addr)
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second)) // safety net only
	if _, err := nc.Write(wire.AppendPreface(nil, wire.Version)); err != nil {
		t.Fatal(err)
	}
	r := wire.NewReader(nc, 4096, 1<<20)
	if _, err := wire.ReadPreface(r); err != nil {
		t.Fatal(err)
	}
	return nc, r
}

// workRequest is a Request frame for Lender.Work.
func workRequest(t *testing.T, id uint64, args Args) []byte {
	t.Helper()
	body, err := codec.Msgpack.Marshal(nil, args)
	if err != nil {
		t.Fatal(err)
	}
	return frame(wire.TypeRequest, id, func(b []byte) []byte {
		b = wire.AppendString(b, wire.KeyMethod, "Lender.Work")
		return wire.AppendString(b, wire.KeyCodec, codec.Msgpack.Name())
	}, body)
}

// readBodies reads n successful Responses from r within wait and returns
// their bodies by call id.
func readBodies(t *testing.T, nc net.Conn, r *wire.Reader, n int, wait time.Duration) map[uint64][]byte {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(wait))
	got := make(map[uint64][]byte)
	for len(got) < n {
		f, err := r.Next()
		if err != nil {
			t.Fatalf("after %d of %d replies: %v", len(got), n, err)
		}
		if f.Type != wire.TypeResponse {
			continue
		}
		var h wire.Header
		if err := wire.ParseHeader(f.Header, &h); err != nil {
			t.Fatal(err)
		}
		if h.ErrCode != 0 {
			t.Fatalf("call %d: error %d: %s", f.ID, h.ErrCode, h.ErrMsg)
		}
		got[f.ID] = append([]byte(nil), f.Body...)
	}
	return got
}

// readReplies reads n Lender.Work replies and returns each one's C by
// call id.
func readReplies(t *testing.T, nc net.Conn, r *wire.Reader, n int, wait time.Duration) map[uint64]int {
	t.Helper()
	got := make(map[uint64]int)
	for id, body := range readBodies(t, nc, r, n, wait) {
		var reply Reply
		if err := codec.Msgpack.Unmarshal(body, &reply); err != nil {
			t.Fatal(err)
		}
		got[id] = reply.C
	}
	return got
}

// sendBurstOfWork sends n calls in one write, call id asking for 3×id,
// and checks that each is answered with its own result.
func sendBurstOfWork(t *testing.T, nc net.Conn, r *wire.Reader, n int) {
	t.Helper()
	var out []byte
	for id := uint64(1); id <= uint64(n); id++ {
		out = append(out, workRequest(t, id, Args{B: int(id) * 3})...)
	}
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
	got := readReplies(t, nc, r, n, 5*time.Second)
	for id := uint64(1); id <= uint64(n); id++ {
		if got[id] != int(id)*3 {
			t.Fatalf("call %d got %d, want %d", id, got[id], id*3)
		}
	}
}

// Calls of a quick method that arrive together run on the reader, and
// their replies, held until the burst is read, all arrive, each with its
// own answer.
func TestBurstOfQuickCallsRunsOnReader(t *testing.T) {
	// A heartbeat far off, so that no tick writes the held replies.
	srv, _, _, addr := lenderServer(t, kiev.WithHeartbeat(10*time.Second, time.Minute),
		kiev.BurstMaxCost(time.Second), // the race detector slows quick calls
		kiev.BurstBudget(time.Minute))  // and makes 64 of them outlast a tick
	nc, r := burstConn(t, addr)
	before, _ := kiev.InlineCounts(srv)
	const n = 64
	sendBurstOfWork(t, nc, r, n)
	if after, _ := kiev.InlineCounts(srv); after-before < n/2 {
		t.Fatalf("%d of %d calls sent in one write ran on the reader; want most", after-before, n)
	}
}

// A burst runs on its reader no more estimated work than its budget: the
// rest goes to the workers, and is answered all the same.
func TestBurstBeyondItsBudgetGoesToWorkers(t *testing.T) {
	srv, _, _, addr := lenderServer(t, kiev.WithHeartbeat(10*time.Second, time.Minute),
		kiev.BurstMaxCost(time.Second), kiev.BurstBudget(time.Nanosecond)) // no call of a burst fits
	nc, r := burstConn(t, addr)
	before, _ := kiev.InlineCounts(srv)
	const n = 64
	sendBurstOfWork(t, nc, r, n)
	// The last call of the write may still run on the reader, alone.
	if after, _ := kiev.InlineCounts(srv); after-before > 1 {
		t.Fatalf("%d of %d calls of a burst with no budget ran on the reader; want at most the last, alone", after-before, n)
	}
}

// A call of a burst that turns out slow does not hold the replies of the
// calls before it: when the watchdog takes the reading over, what the
// burst held goes out.
func TestSlowCallInBurstReleasesEarlierReplies(t *testing.T) {
	// A heartbeat far off, so that no tick writes the held replies.
	_, l, _, addr := lenderServer(t, kiev.WithHeartbeat(10*time.Second, time.Minute), kiev.BurstMaxCost(time.Second))
	nc, r := burstConn(t, addr)
	var out []byte
	for id := uint64(1); id <= 3; id++ {
		out = append(out, workRequest(t, id, Args{B: int(id)})...)
	}
	out = append(out, workRequest(t, 4, Args{A: 1, B: 4})...)
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
	<-l.started
	got := readReplies(t, nc, r, 3, 5*time.Second)
	for id := uint64(1); id <= 3; id++ {
		if got[id] != int(id) {
			t.Fatalf("call %d got %d, want %d", id, got[id], id)
		}
	}
	close(l.release)
	if got := readReplies(t, nc, r, 1, 5*time.Second); got[4] != 4 {
		t.Fatalf("slow call: got %v, want 4", got)
	}
}

// A burst whose replies add up to more than a connection's share of the
// server's queued bytes is answered in full: the replies it holds are
// written before the reader waits for room, which otherwise would never
// come, and before they could count as a client that does not read.
func TestBurstOfLargeRepliesIsAnswered(t *testing.T) {
	// The whole burst on the reader, however slow the race detector and
	// a busy machine make Big: its replies must outgrow the share.
	srv := kiev.NewServer(kiev.WithMaxQueuedBytes(64<<10), kiev.WithHeartbeat(10*time.Second, time.Minute),
		kiev.BurstMaxCost(time.Second), kiev.InlineMaxCost(time.Second), kiev.BurstBudget(time.Minute))
	if err := srv.Register(&Arith{}); err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, srv)
	c := dial(t, addr)
	for range 20 { // learn that Big is quick
		var b []byte
		if err := c.Call(context.Background(), "Arith.Big", Args{A: 4096}, &b); err != nil || len(b) != 4096 {
			t.Fatalf("Big: %d bytes, %v", len(b), err)
		}
	}
	nc, r := burstConn(t, addr)
	body, err := codec.Msgpack.Marshal(nil, Args{A: 4096})
	if err != nil {
		t.Fatal(err)
	}
	const n = 64 // 256 KiB of replies, four times the connection's share
	var out []byte
	for id := uint64(1); id <= n; id++ {
		out = append(out, frame(wire.TypeRequest, id, func(b []byte) []byte {
			b = wire.AppendString(b, wire.KeyMethod, "Arith.Big")
			return wire.AppendString(b, wire.KeyCodec, codec.Msgpack.Name())
		}, body)...)
	}
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
	for id, body := range readBodies(t, nc, r, n, 5*time.Second) {
		var b []byte
		if err := codec.Msgpack.Unmarshal(body, &b); err != nil || len(b) != 4096 {
			t.Fatalf("call %d: %d bytes, %v", id, len(b), err)
		}
	}
	if runs, _ := kiev.InlineCounts(srv); runs < n/2 {
		t.Fatalf("%d calls ran on the reader; want most of the %d sent in one write", runs, n)
	}
}

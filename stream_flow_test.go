package kiev_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/shed"
)

// Tap is a service whose streams the tests steer: Flood sends until it
// fails, Hold reads only when told to, Park waits for its ctx to end.
type Tap struct {
	started chan string   // each handler sends its method's name as it starts
	ended   chan error    // each handler sends why it ended
	read    chan struct{} // Hold reads one message per token
}

func newTap() *Tap {
	return &Tap{started: make(chan string, 100), ended: make(chan error, 100), read: make(chan struct{}, 1000)}
}

type Bytes struct{ B []byte }

// Flood sends n messages of size bytes (forever if n is 0).
func (t *Tap) Flood(ctx context.Context, q Query, out kiev.Out[Bytes]) error {
	t.started <- "Flood"
	b := Bytes{B: bytes.Repeat([]byte{'x'}, q.To)}
	for i := 0; q.From == 0 || i < q.From; i++ {
		if err := out.Send(ctx, b); err != nil {
			t.ended <- err
			return err
		}
	}
	t.ended <- nil
	return nil
}

// Hold reads a message each time it is told to, and echoes its size.
func (t *Tap) Hold(ctx context.Context, in kiev.In[Bytes], out kiev.Out[int]) error {
	t.started <- "Hold"
	for {
		select {
		case <-t.read:
		case <-ctx.Done():
			t.ended <- ctx.Err()
			return ctx.Err()
		}
		b, err := in.Recv(ctx)
		if err == io.EOF {
			t.ended <- nil
			return nil
		}
		if err != nil {
			t.ended <- err
			return err
		}
		if err := out.Send(ctx, len(b.B)); err != nil {
			t.ended <- err
			return err
		}
	}
}

// Park waits for its ctx to end.
func (t *Tap) Park(ctx context.Context, in kiev.In[Bytes], out kiev.Out[Bytes]) error {
	t.started <- "Park"
	<-ctx.Done()
	t.ended <- ctx.Err()
	return ctx.Err()
}

func startTap(t *testing.T, tap *Tap, sopts []kiev.ServerOption, copts ...kiev.DialOption) (*kiev.Server, string, *kiev.Client) {
	t.Helper()
	srv := kiev.NewServer(sopts...)
	if err := srv.Register(tap); err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, srv)
	return srv, addr, dial(t, addr, copts...)
}

func within(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestAStreamThatIsNotReadStopsOnlyItself(t *testing.T) {
	tap := newTap()
	_, _, c := startTap(t, tap, nil)
	ctx := within(t, 20*time.Second)
	stalled, err := c.Stream(ctx, "Tap.Flood", Query{To: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	<-tap.started
	// The stalled stream's sender fills its window and waits; another
	// stream on the same connection, and calls, go on.
	s, err := c.Stream(ctx, "Tap.Flood", Query{From: 5000, To: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := 0
	for {
		var b Bytes
		err := s.Recv(ctx, &b)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d messages: %v", n, err)
		}
		n++
	}
	if n != 5000 {
		t.Fatalf("the second stream delivered %d messages, want 5000", n)
	}
	// The stalled stream is still whole: it delivers what it queued.
	for i := range 100 {
		var b Bytes
		if err := stalled.Recv(ctx, &b); err != nil || len(b.B) != 1<<10 {
			t.Fatalf("stalled stream, message %d: %d bytes, %v", i, len(b.B), err)
		}
	}
}

func TestSendThatTimesOutWaitingForCreditLeavesTheStreamUsable(t *testing.T) {
	tap := newTap()
	_, _, c := startTap(t, tap, nil)
	ctx := within(t, 20*time.Second)
	s, err := c.Stream(ctx, "Tap.Hold", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	<-tap.started
	// Hold reads nothing yet: sends stop once the credit is used.
	sent := 0
	var last error
	for sent < 10000 {
		sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		last = s.Send(sctx, Bytes{B: make([]byte, 1000)})
		cancel()
		if last != nil {
			break
		}
		sent++
	}
	if !errors.Is(last, context.DeadlineExceeded) {
		t.Fatalf("after %d sends, Send = %v, want it to wait for credit until its ctx ends", sent, last)
	}
	if sent < 10 || sent > 200 {
		t.Fatalf("%d messages of 1000 bytes went before the credit ran out, want about 64 KiB's worth", sent)
	}
	// Now Hold reads: every message queued arrives whole, then the next
	// Send succeeds.
	for range sent + 1 {
		tap.read <- struct{}{}
	}
	for i := range sent {
		var n int
		if err := s.Recv(ctx, &n); err != nil || n != 1000 {
			t.Fatalf("echo %d: %d, %v", i, n, err)
		}
	}
	if err := s.Send(ctx, Bytes{B: make([]byte, 7)}); err != nil {
		t.Fatalf("Send after the timeout: %v", err)
	}
	var n int
	if err := s.Recv(ctx, &n); err != nil || n != 7 {
		t.Fatalf("echo after the timeout: %d, %v", n, err)
	}
}

func TestAMessageLargerThanTheWindowArrives(t *testing.T) {
	tap := newTap()
	_, _, c := startTap(t, tap, nil)
	ctx := within(t, 20*time.Second)
	s, err := c.Stream(ctx, "Tap.Flood", Query{From: 3, To: 5 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 3 {
		var b Bytes
		if err := s.Recv(ctx, &b); err != nil || len(b.B) != 5<<20 {
			t.Fatalf("message %d: %d bytes, %v", i, len(b.B), err)
		}
	}
	if err := s.Recv(ctx, new(Bytes)); err != io.EOF {
		t.Fatalf("Recv at the end = %v, want io.EOF", err)
	}
}

func TestClosingAStreamCancelsItsHandler(t *testing.T) {
	for _, how := range []string{"Close", "ctx"} {
		t.Run(how, func(t *testing.T) {
			tap := newTap()
			_, _, c := startTap(t, tap, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := c.Stream(ctx, "Tap.Park", nil)
			if err != nil {
				t.Fatal(err)
			}
			<-tap.started
			if how == "Close" {
				if err := s.Close(); err != nil {
					t.Fatalf("Close = %v", err)
				}
				if err := s.Close(); err != nil {
					t.Fatalf("second Close = %v, want nil", err)
				}
			} else {
				cancel()
			}
			select {
			case err := <-tap.ended:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("handler's ctx ended with %v, want context.Canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the handler's ctx did not end")
			}
			if err := s.Recv(context.Background(), new(Bytes)); err == nil || err == io.EOF {
				t.Fatalf("Recv after %s = %v, want an error", how, err)
			}
		})
	}
}

func TestADroppedStreamIsCanceledAndCounted(t *testing.T) {
	tap := newTap()
	_, _, c := startTap(t, tap, nil)
	ctx := context.Background()
	func() {
		_, err := c.Stream(ctx, "Tap.Park", nil)
		if err != nil {
			t.Fatal(err)
		}
	}()
	<-tap.started
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		select {
		case err := <-tap.ended:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("the dropped stream's handler ended with %v, want context.Canceled", err)
			}
			if n := kiev.StreamsLeaked(c); n != 1 {
				t.Fatalf("leaked streams counted: %d, want 1", n)
			}
			return
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the dropped stream's handler still runs")
		}
	}
}

func TestALostConnectionSaysHowFarThePeerGot(t *testing.T) {
	tap := newTap()
	srv, _, c := startTap(t, tap, nil)
	ctx := within(t, 20*time.Second)
	s, err := c.Stream(ctx, "Tap.Hold", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	<-tap.started
	for range 3 {
		tap.read <- struct{}{}
	}
	for range 5 {
		if err := s.Send(ctx, Bytes{B: []byte("m")}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		var n int
		if err := s.Recv(ctx, &n); err != nil {
			t.Fatal(err)
		}
	}
	srv.Close()
	var err2 error
	for err2 == nil {
		err2 = s.Recv(ctx, new(int))
	}
	var se *kiev.StreamError
	if !errors.As(err2, &se) {
		t.Fatalf("Recv after the server closed = %v, want a *kiev.StreamError", err2)
	}
	if se.Sent != 5 || se.Taken != 3 {
		t.Fatalf("StreamError says %d of %d taken, want 3 of 5: each echo said how many the handler had taken", se.Taken, se.Sent)
	}
	if !errors.Is(err2, kiev.ErrShutdown) {
		t.Fatalf("%v does not match ErrShutdown", err2)
	}
}

func TestShutdownEndsStreamsAfterTheirDrainTime(t *testing.T) {
	tap := newTap()
	srv, _, c := startTap(t, tap, []kiev.ServerOption{kiev.WithStreamDrain(100 * time.Millisecond)})
	ctx := within(t, 20*time.Second)
	s, err := c.Stream(ctx, "Tap.Park", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	<-tap.started
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	err = s.Recv(ctx, new(Bytes))
	if !errors.Is(err, kiev.ErrShutdown) || !strings.Contains(err.Error(), "reopen") {
		t.Fatalf("Recv as the server drains = %v, want ErrShutdown saying to reopen the stream", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
}

func TestAStreamEndsAtItsMaximumAge(t *testing.T) {
	tap := newTap()
	_, _, c := startTap(t, tap, []kiev.ServerOption{kiev.WithMaxStreamAge(200 * time.Millisecond)})
	ctx := within(t, 20*time.Second)
	s, err := c.Stream(ctx, "Tap.Park", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	err = s.Recv(ctx, new(Bytes))
	if !errors.Is(err, kiev.ErrShutdown) || !strings.Contains(err.Error(), "maximum age") {
		t.Fatalf("Recv = %v, want ErrShutdown saying the stream reached its maximum age", err)
	}
	if age := time.Since(start); age < 150*time.Millisecond {
		t.Fatalf("the stream ended after %v, before its maximum age less a tenth", age)
	}
}

func TestStreamsPastTheConnectionsLimitAreRefused(t *testing.T) {
	tap := newTap()
	_, _, c := startTap(t, tap, []kiev.ServerOption{kiev.WithMaxStreams(2)}, kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1}))
	ctx := within(t, 20*time.Second)
	var open []*kiev.Stream
	for range 2 {
		s, err := c.Stream(ctx, "Tap.Park", nil)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, s)
	}
	_, err := c.Stream(ctx, "Tap.Park", nil)
	if !errors.Is(err, kiev.ErrOverloaded) || !strings.Contains(err.Error(), "WithMaxStreams") {
		t.Fatalf("a third stream = %v, want ErrOverloaded naming WithMaxStreams", err)
	}
	open[0].Close()
	<-tap.ended
	// The closed stream's place is free again, once the server has
	// forgotten it.
	var s *kiev.Stream
	for {
		s, err = c.Stream(ctx, "Tap.Park", nil)
		if err == nil || !errors.Is(err, kiev.ErrOverloaded) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Millisecond) // polling the server's count; bounded by ctx
	}
	if err != nil {
		t.Fatalf("a stream after one closed = %v", err)
	}
	s.Close()
	open[1].Close()
}

func TestOpenStreamsHoldNoWorker(t *testing.T) {
	tap := newTap()
	srv := kiev.NewServer(kiev.WithShed(shed.Options{Workers: 2, MaxInFlight: 2}))
	if err := srv.Register(tap); err != nil {
		t.Fatal(err)
	}
	if err := srv.Register(new(Arith)); err != nil {
		t.Fatal(err)
	}
	c := dial(t, startServer(t, srv))
	ctx := within(t, 30*time.Second)
	var streams []*kiev.Stream
	defer func() {
		for _, s := range streams {
			s.Close()
		}
	}()
	// Far more parked streams than the scheduler runs calls at once.
	for i := range 50 {
		s, err := c.Stream(ctx, "Tap.Park", nil)
		if err != nil {
			t.Fatalf("stream %d beside %d parked: %v", i, len(streams), err)
		}
		streams = append(streams, s)
	}
	var r Reply
	if err := c.Call(ctx, "Arith.Add", Args{2, 3}, &r); err != nil || r.C != 5 {
		t.Fatalf("a call beside 50 parked streams on a server running 2 calls at once: %+v, %v", r, err)
	}
}

func TestStreamsRefusedOverUDP(t *testing.T) {
	srv := kiev.NewServer()
	if err := srv.Register(newTap()); err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServePacket(pc)
	defer srv.Close()
	c, err := kiev.Dial("udp://" + pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Stream(within(t, 5*time.Second), "Tap.Park", nil)
	if err == nil || !strings.Contains(err.Error(), "streams need a connection") {
		t.Fatalf("a stream over UDP = %v, want an error that says streams need a connection", err)
	}
}

func TestAStreamOpenPassesTheScheduler(t *testing.T) {
	tap := newTap()
	arith := &Arith{started: make(chan struct{}, 1)}
	srv := kiev.NewServer(kiev.WithShed(shed.Options{Workers: 1, MaxInFlight: 1, QueueSize: 1, MaxWait: 10 * time.Millisecond}))
	if err := srv.Register(tap); err != nil {
		t.Fatal(err)
	}
	if err := srv.Register(arith); err != nil {
		t.Fatal(err)
	}
	c := dial(t, startServer(t, srv), kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1}))
	ctx := within(t, 20*time.Second)
	// The one worker is busy with a call that blocks.
	blocked, cancelBlocked := context.WithCancel(ctx)
	defer cancelBlocked()
	done := make(chan error, 1)
	go func() { done <- c.Call(blocked, "Arith.Block", Args{}, new(Reply)) }()
	<-arith.started
	// Without a deadline, the open may wait MaxWait in the queue, no more.
	open, cancelOpen := context.WithCancel(context.Background())
	defer cancelOpen()
	stop := context.AfterFunc(ctx, cancelOpen) // the test's bound
	defer stop()
	start := time.Now()
	_, err := c.Stream(open, "Tap.Park", nil)
	if !errors.Is(err, kiev.ErrOverloaded) {
		t.Fatalf("a stream opened while the server's one worker is busy = %v, want ErrOverloaded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the refusal took %v", d)
	}
	cancelBlocked()
	<-done
}

func TestStreamsPastTheServersLimitAreRefused(t *testing.T) {
	tap := newTap()
	_, _, c := startTap(t, tap, []kiev.ServerOption{kiev.WithMaxServerStreams(1)}, kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1}))
	ctx := within(t, 20*time.Second)
	s, err := c.Stream(ctx, "Tap.Park", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	<-tap.started
	_, err = c.Stream(ctx, "Tap.Park", nil)
	if !errors.Is(err, kiev.ErrOverloaded) || !strings.Contains(err.Error(), "WithMaxServerStreams") {
		t.Fatalf("a second stream = %v, want ErrOverloaded naming WithMaxServerStreams", err)
	}
}

func TestAnOpenStreamIsNoCallInFlight(t *testing.T) {
	tap := newTap()
	srv := kiev.NewServer(kiev.WithMaxConcurrentCalls(1))
	if err := srv.Register(tap); err != nil {
		t.Fatal(err)
	}
	if err := srv.Register(new(Arith)); err != nil {
		t.Fatal(err)
	}
	c := dial(t, startServer(t, srv), kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1}))
	ctx := within(t, 20*time.Second)
	for range 3 {
		s, err := c.Stream(ctx, "Tap.Park", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
	}
	var r Reply
	if err := c.Call(ctx, "Arith.Add", Args{1, 2}, &r); err != nil || r.C != 3 {
		t.Fatalf("a call beside 3 open streams, with WithMaxConcurrentCalls(1): %+v, %v", r, err)
	}
}

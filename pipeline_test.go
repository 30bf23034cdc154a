package kiev_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/wire"
)

// TestPipelinerThatNeverReads sends 100,000 requests for 64 KiB replies
// on one connection as fast as the server takes them, and reads none of
// the replies: 6.25 GiB if the server made and kept every reply. The
// server stops reading the connection once the replies queued for it,
// and those its calls in flight will make, pass its share of
// WithMaxQueuedBytes; its live heap stays within that share and one
// reply; and it cuts the client within the heartbeat timeout.
func TestPipelinerThatNeverReads(t *testing.T) {
	if raceEnabled {
		t.Skip("measures memory; run without -race (make test does)")
	}
	const (
		calls     = 100_000
		replySize = 64 << 10
		hbTimeout = 2 * time.Second
	)
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), kiev.WithHeartbeat(500*time.Millisecond, hbTimeout))
	srv.Register(&Arith{})
	addr := startServer(t, srv)

	base := liveHeap()
	peakHeap := watchHeap(true)
	nc, err := smallWindowDialer().Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	args, _ := codec.Msgpack.Marshal(nil, Args{A: replySize})
	start := time.Now()
	sent := make(chan int, 1)
	go func() {
		n := 0
		defer func() { sent <- n }()
		if _, err := nc.Write(wire.AppendPreface(nil, wire.Version)); err != nil {
			return
		}
		var batch []byte
		for id := uint64(1); id <= calls; id++ {
			batch = append(batch, frame(wire.TypeRequest, id, func(b []byte) []byte {
				b = wire.AppendString(b, wire.KeyMethod, "Arith.Big")
				return wire.AppendString(b, wire.KeyCodec, "msgpack")
			}, args)...)
			if id%256 == 0 || id == calls {
				nc.SetWriteDeadline(time.Now().Add(3 * hbTimeout))
				if _, err := nc.Write(batch); err != nil {
					return
				}
				n = int(id)
				batch = batch[:0]
			}
		}
	}()

	// The server takes the connection, then cuts it: it is gone from
	// its count.
	deadline := time.Now().Add(3*hbTimeout + 10*time.Second)
	for srv.Status(context.Background()).Connections == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the server never counted the pipelining client's connection")
		}
		time.Sleep(time.Millisecond) // polling the server's own count
	}
	for srv.Status(context.Background()).Connections > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the pipelining client is still connected %v after it began; want it cut within the heartbeat timeout (%v)", time.Since(start).Round(time.Millisecond), hbTimeout)
		}
		time.Sleep(20 * time.Millisecond) // polling the server's own count
	}
	cut := time.Since(start)
	nc.Close()
	written := <-sent
	growth := int64(peakHeap()) - int64(base)
	share := int64(kiev.DefaultMaxQueuedBytes)
	if share > 16<<20 {
		share = 16 << 20 // a connection's share is at most 16 MiB
	}
	// The share (the replies queued, and the room reserved for the
	// calls in flight: their reply and its encoding), the reply that
	// crossed it, and slack for what a measurement taken while calls are
	// answered finds: the answered replies are garbage, not yet freed.
	limit := 2 * share
	if growth > limit {
		t.Errorf("heap grew by %d MiB under one client pipelining %d calls for %d KiB replies and reading none; want within its share (%d MiB) and one reply, under %d MiB", growth>>20, written, replySize>>10, share>>20, limit>>20)
	}
	t.Logf("one client pipelined %d requests for %d KiB replies and read none: live heap grew by at most %d MiB (limit %d MiB); cut %v after it began", written, replySize>>10, growth>>20, limit>>20, cut.Round(time.Millisecond))
}

// A few calls that wait long for their answer (long polls), of a method
// whose replies are unknown, hold up no other call of their connection,
// however small its share: the room they reserve binds only past a
// connection's first few calls in flight.
func TestLongPollsHoldUpNoOtherCall(t *testing.T) {
	const polls = 8
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, polls)}
	// 64 KiB: the smallest share, less than one unknown reply reserves.
	c := dial(t, newArithServer(t, svc, kiev.WithMaxQueuedBytes(64<<10)))
	done := make(chan error, polls)
	for i := range polls {
		go func() {
			var r Reply
			done <- c.Call(context.Background(), "Arith.Block", Args{A: i}, &r)
		}()
	}
	for range polls {
		<-svc.started
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var r Reply
	err := c.Call(ctx, "Arith.Add", Args{1, 2}, &r)
	close(svc.block)
	if err != nil || r.C != 3 {
		t.Fatalf("a call beside %d long polls on a connection with a 64 KiB share: %v, %v; want it answered", polls, r.C, err)
	}
	for range polls {
		if err := <-done; err != nil {
			t.Fatalf("a long poll: %v", err)
		}
	}
}

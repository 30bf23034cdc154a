package transport

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/kievrpc/kiev/internal/wire"
)

// testOwner is a connection's streams with budget bytes, whose link
// queues the frames they send, unwritten.
func testOwner(t *testing.T, budget int) *streamOwner {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	link := NewLink(a, Config{HeartbeatInterval: time.Second, HeartbeatTimeout: 4 * time.Second, MaxFrame: 16 << 20, OnDead: func(error) {}})
	o := new(streamOwner)
	o.init(link, 16<<20, budget, func() int { return MaxQueued })
	return o
}

// fill sends s, as a kiev peer would, every byte its credit allows, in
// messages of 1 KiB, the last one cut where the credit ends.
func fill(t *testing.T, s *Stream) {
	t.Helper()
	for {
		s.mu.Lock()
		room, inPart, left := s.granted-s.recvd, s.part != nil, s.partLeft
		s.mu.Unlock()
		if room == 0 {
			return
		}
		h := wire.Header{}
		n := min(room, 1<<10)
		if inPart {
			n = min(room, left)
		} else {
			if room <= MessageCost {
				return
			}
			n = min(room-MessageCost, 1<<10)
			h.Size, h.HasSize = 1<<10, true
		}
		if err := deliver(s, &h, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
	}
}

func held(o *streamOwner) int64 {
	o.budget.mu.Lock()
	defer o.budget.mu.Unlock()
	return o.budget.used
}

func TestStalledStreamsHoldNoMoreThanTheBudget(t *testing.T) {
	const budget = 4 << 20
	o := testOwner(t, budget)
	var received uint64
	for id := range uint64(1000) {
		s := newStream(o, id+1, 5)
		if err := o.add(s); err != nil {
			t.Fatal(err)
		}
		s.Grant(InitialWindow)
		fill(t, s) // the peer sends all it may; nobody reads
		received += s.recvd
	}
	if received > budget || held(o) > budget {
		t.Fatalf("1000 stalled streams hold %d bytes received (%d granted), over the %d-byte budget", received, held(o), budget)
	}
	// A stream opened now, whose reader waits, still moves.
	s := newStream(o, 2000, 5)
	if err := o.add(s); err != nil {
		t.Fatal(err)
	}
	s.Grant(InitialWindow)
	got := make(chan error, 1)
	go func() {
		m, _, err := s.Recv(context.Background())
		if err == nil && len(*m) != 1<<10 {
			t.Errorf("got %d bytes", len(*m))
		}
		got <- err
	}()
	// The peer sends what the credit allows, as it comes.
	deadline := time.Now().Add(10 * time.Second)
	for {
		fill(t, s)
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
			return
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("a stream whose reader waits got no credit from a budget stalled streams hold")
		}
	}
}

func TestLowPriorityStreamsLeaveTheReserve(t *testing.T) {
	const budget = 1 << 20
	o := testOwner(t, budget)
	// Streams of priority 0 take what they may: they stop short of the
	// 45% kept from them.
	for id := range uint64(200) {
		s := newStream(o, id+1, 0)
		_ = o.add(s)
		s.Grant(InitialWindow)
	}
	if got, most := held(o), int64(budget-budget*9/20); got > most {
		t.Fatalf("priority-0 streams took %d bytes, more than the %d left them", got, most)
	}
	s := newStream(o, 1000, 9)
	_ = o.add(s)
	s.Grant(InitialWindow)
	if s.granted == 0 {
		t.Fatal("a priority-9 stream got no credit where priority-0 streams had taken all theirs")
	}
}

func TestAStreamsEndGivesItsBudgetBack(t *testing.T) {
	o := testOwner(t, 1<<20)
	s := newStream(o, 1, 5)
	_ = o.add(s)
	s.Grant(InitialWindow)
	fill(t, s)
	if held(o) == 0 {
		t.Fatal("nothing held")
	}
	s.Abort(context.Canceled)
	if n := held(o); n != 0 {
		t.Fatalf("%d bytes held after the stream ended", n)
	}
}

func TestStreamsThatCannotSendQueueNoMoreThanTheConnectionsShare(t *testing.T) {
	const share = 1 << 20
	o := testOwner(t, 1<<20)
	o.sendMax = func() int { return share }
	// A peer that grants every stream a huge credit and reads nothing:
	// the link's writer never runs here, so nothing is framed.
	msg := make([]byte, 32<<10)
	var queued int64
	for id := range uint64(100) {
		s := newStream(o, id+1, 5)
		if err := o.add(s); err != nil {
			t.Fatal(err)
		}
		s.credited(1<<40, 0)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
			err := s.Send(ctx, msg)
			cancel()
			if err != nil {
				break
			}
			queued += int64(len(msg))
		}
	}
	// Each stream may queue one message whatever the share says; past
	// that, the share bounds them all.
	if most := int64(share + 100*len(msg)); queued > most || o.sendQueued.Load() != queued {
		t.Fatalf("100 streams queued %d bytes (the connection counts %d); want at most the %d-byte share and a message each, %d", queued, o.sendQueued.Load(), share, most)
	}
	// Once the writer takes the streams' bytes, a waiting sender goes on.
	s, _ := o.get(1)
	done := make(chan error, 1)
	go func() { done <- s.Send(context.Background(), msg) }()
	for id := range uint64(100) {
		other, _ := o.get(id + 1)
		for more := true; more; {
			_, more = other.frames(nil, 1000)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("a Send waiting for the connection's room, once room came: %v", err)
	}
}

package transport

import (
	"io"
	"net"
	"testing"

	"github.com/kievrpc/kiev/internal/wire"
)

// testStream is a stream of a connection whose frames go nowhere,
// granted its initial window: for what a stream does with the chunks its
// reader hands it.
func testStream(t *testing.T) *Stream {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	o := new(streamOwner)
	o.init(NewLink(a, Config{MaxFrame: 1 << 20}), 1<<20, 1<<20, func() int { return MaxQueued })
	s := newStream(o, 1, 5)
	if err := o.add(s); err != nil {
		t.Fatal(err)
	}
	s.Grant(InitialWindow)
	return s
}

// deliver gives s a chunk as its connection's reader does, waking a
// Recv that waits for it at once rather than at the end of a burst.
func deliver(s *Stream, h *wire.Header, body []byte) error {
	wakeRecv, err := s.receive(h, body)
	if wakeRecv {
		wake(s.recvWake)
	}
	return err
}

func TestEmptyMessagesKeepTheirPlaceAmongTheOthers(t *testing.T) {
	s := testStream(t)
	sent := []string{"", "a", "", "", "bc", ""}
	for _, m := range sent {
		h := wire.Header{Size: uint64(len(m)), HasSize: true}
		if err := deliver(s, &h, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	s.peerEnded()
	for i, want := range sent {
		m, _, err := s.Recv(t.Context())
		if err != nil || string(*m) != want {
			t.Fatalf("message %d: %q, %v; want %q", i, *m, err, want)
		}
		PutBuf(m)
	}
	if _, _, err := s.Recv(t.Context()); err != io.EOF {
		t.Fatalf("after the messages Recv = %v, want io.EOF", err)
	}
	if _, taken := s.Sent(); taken != 0 {
		t.Fatalf("Sent reports %d of ours taken, want 0", taken)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if want := 3 + uint64(len(sent))*MessageCost; s.taken != uint64(len(sent)) || s.consumed != want {
		t.Fatalf("taken %d messages, consumed %d bytes of credit; want %d and %d: Consumed counts empty messages too, and each costs MessageCost", s.taken, s.consumed, len(sent), want)
	}
}

package transport

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/wire"
)

// packetHandler is the tests' protocol over a PacketClient: a call
// completes on done.
type packetHandler struct {
	done chan *testCall
	lost chan Loss[*testCall]
}

func (h *packetHandler) Reply(c *testCall, _ *Response)    { h.done <- c }
func (h *packetHandler) Failure(cause error, _ bool) error { return cause }
func (h *packetHandler) Lost(l Loss[*testCall])            { h.lost <- l }

// testRequest is a request of the tests' calls.
func testRequest() *Request { return &Request{Method: "T.Call", Codec: codec.Msgpack} }

// A call whose first datagram is lost is sent again after the
// retransmission timeout, and answered; a call its caller cancels is
// abandoned, and its Cancel reaches the server.
func TestPacketClientRoundTrip(t *testing.T) {
	srv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Skip("no UDP on loopback:", err)
	}
	defer srv.Close()
	canceled := make(chan uint64, 4)
	go func() {
		buf := make([]byte, 1<<16)
		seen := make(map[uint64]bool)
		for {
			n, from, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			f, _, err := wire.ParseDatagram(buf[:n])
			switch {
			case err != nil:
			case f.Type == wire.TypeCancel:
				select {
				case canceled <- f.ID:
				default: // resent: one is enough
				}
			case f.ID == 1 && seen[1]: // answer call 1's second datagram
				b := wire.BeginDatagram(nil, wire.TypeResponse, 1)
				_ = wire.EndHeader(b, wire.PrefaceLen)
				_ = wire.EndFrame(b, wire.PrefaceLen, 1<<16)
				_, _ = srv.WriteToUDPAddrPort(b, from)
			default: // lose the first, and every datagram of call 2
				seen[f.ID] = true
			}
		}
	}()

	var sent, received, retransmits, other atomic.Int64
	var wg sync.WaitGroup
	h := &packetHandler{done: make(chan *testCall, 1), lost: make(chan Loss[*testCall], 1)}
	pc, err := DialPacket[*testCall]("udp4", srv.LocalAddr().String(), PacketConfig{
		InitialRTO: 20 * time.Millisecond, MinRTO: 10 * time.Millisecond, MaxRTO: 50 * time.Millisecond,
		MaxDatagram: 1 << 16, Limit: 1 << 16,
		Counters:   PacketCounters{Sent: &sent, Received: &received, Retransmits: &retransmits, Unexpected: &other, Stale: &other, Malformed: &other},
		Goroutines: &wg,
	}, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()

	call := &testCall{}
	id, err := pc.Add(call)
	if err != nil || id != 1 {
		t.Fatalf("Add = %d, %v; want id 1", id, err)
	}
	if err := pc.RoundTrip(ctx, deadline, id, testRequest(), h.done); err != nil {
		t.Fatalf("RoundTrip: %v", err)
	}
	if retransmits.Load() == 0 || received.Load() != 1 {
		t.Fatalf("%d retransmits, %d received; want some, and the one reply", retransmits.Load(), received.Load())
	}

	call2 := &testCall{}
	id2, err := pc.Add(call2)
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(ctx)
	cancel2() // its first datagram goes, then RoundTrip sees ctx ended
	if err := pc.RoundTrip(ctx2, deadline, id2, testRequest(), h.done); !errors.Is(err, context.Canceled) {
		t.Fatalf("RoundTrip of a canceled call = %v, want context.Canceled", err)
	}
	if got := <-canceled; got != id2 {
		t.Fatalf("Cancel of call %d, want %d", got, id2)
	}

	closed := errors.New("closed")
	pc.Close(closed)
	if l := <-h.lost; l.Err != closed || len(l.Calls) != 0 {
		t.Fatalf("Lost(%v, %d calls); want the close's error, no call", l.Err, len(l.Calls))
	}
	if _, err := pc.Add(&testCall{}); err != closed || !pc.Dead() {
		t.Fatalf("Add on a closed socket = %v, want its error", err)
	}
	wg.Wait()
}

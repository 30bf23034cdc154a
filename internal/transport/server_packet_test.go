package transport

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kievrpc/kiev/internal/codes"
	"github.com/kievrpc/kiev/internal/wire"
)

// rawCodec sends a []byte as it is.
type rawCodec struct{}

func (rawCodec) Name() string                            { return "raw" }
func (rawCodec) Marshal(b []byte, v any) ([]byte, error) { return append(b, v.([]byte)...), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}

// echoCall is a call of echoHandler: the test runs it, through its sink.
type echoCall struct {
	st       CallState
	h        *echoHandler
	sink     Sink
	args     []byte
	canceled chan struct{} // closed by Cancel
	once     sync.Once
}

func (c *echoCall) State() *CallState       { return &c.st }
func (c *echoCall) Name() string            { return "T.Echo" }
func (c *echoCall) Estimate() time.Duration { return 0 }
func (c *echoCall) ReplySize() *ReplySize   { return nil }
func (c *echoCall) Cancel(error)            { c.once.Do(func() { close(c.canceled) }) }
func (c *echoCall) Release()                {}
func (c *echoCall) Submit(context.Context)  { c.h.submitted <- c }
func (c *echoCall) RunInline() bool         { return false }

// reply answers c with v and ends it, as a handler's goroutine does.
func (c *echoCall) reply(t *testing.T, v []byte) {
	t.Helper()
	if err := c.sink.Reply(c, rawCodec{}, v); err != nil {
		t.Fatal(err)
	}
	c.sink.Done(c)
}

// echoHandler makes a echoCall of every Request, and hands the test the
// calls submitted.
type echoHandler struct {
	opened    atomic.Int32
	submitted chan *echoCall
}

func (h *echoHandler) Open(hd *Head, base context.Context, sink Sink) (Call, codes.Code, string) {
	h.opened.Add(1)
	c := &echoCall{h: h, sink: sink, args: append([]byte(nil), hd.Body...), canceled: make(chan struct{})}
	c.st.ID = hd.ID
	return c, 0, ""
}
func (h *echoHandler) Refuse([]byte, string) (codes.Code, string) { return codes.Overloaded, "refused" }

// packetTest is a PacketServer on a loopback socket, served until the
// test ends, and a client socket to call it from. The test fails if the
// server leaves a goroutine behind.
type packetTest struct {
	h      *echoHandler
	cfg    *PacketServerConfig
	ps     *PacketServer
	client net.PacketConn
	served chan error // Serve's error, once it returns
}

func newPacketTest(t *testing.T, edit func(*PacketServerConfig)) *packetTest {
	t.Helper()
	others := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, others) }) // last: after the server's cleanup
	sock, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	client, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		sock.Close()
		t.Fatal(err)
	}
	pt := &packetTest{h: &echoHandler{submitted: make(chan *echoCall, 16)}, client: client, served: make(chan error, 1)}
	pt.cfg = &PacketServerConfig{
		Handler: pt.h, MaxDatagram: 1200, DedupEntries: 100, DedupLinger: time.Minute,
		MaxAmplification: -1, MaxResends: 8, Counters: &PacketServerCounters{},
	}
	if edit != nil {
		edit(pt.cfg)
	}
	pt.ps = NewPacketServer(pt.cfg, sock, context.Background())
	go func() { pt.served <- pt.ps.Serve() }()
	t.Cleanup(func() {
		pt.ps.Abort()
		<-pt.served
		client.Close()
	})
	return pt
}

// send sends the Request of call id, in session 7, with the ack floor
// floor, args and ticket (nil for none).
func (pt *packetTest) send(t *testing.T, id, floor uint64, args, ticket []byte) {
	t.Helper()
	pt.sendAs(t, 7, id, floor, args, ticket)
}

// sendAs sends as send does, in session.
func (pt *packetTest) sendAs(t *testing.T, session, id, floor uint64, args, ticket []byte) {
	t.Helper()
	b := wire.BeginDatagram(nil, wire.TypeRequest, id)
	b = wire.AppendString(b, wire.KeyMethod, "T.Echo")
	b = wire.AppendString(b, wire.KeyCodec, "raw")
	b = wire.AppendUvarint(b, wire.KeySession, session)
	b = wire.AppendUvarint(b, wire.KeyAckFloor, floor)
	if ticket != nil {
		b = wire.AppendField(b, wire.KeyTicket, ticket)
	}
	if err := wire.EndHeader(b, wire.PrefaceLen); err != nil {
		t.Fatal(err)
	}
	b = append(b, args...)
	if err := wire.EndFrame(b, wire.PrefaceLen, maxPayload); err != nil {
		t.Fatal(err)
	}
	if _, err := pt.client.WriteTo(b, pt.ps.io.PC.LocalAddr()); err != nil {
		t.Fatal(err)
	}
}

// answer is a Response the client read.
type answer struct {
	id     uint64
	code   uint64
	msg    string
	ticket []byte
	body   []byte
}

// read reads the next Response; the deadline only bounds a failing test.
func (pt *packetTest) read(t *testing.T) answer {
	t.Helper()
	buf := make([]byte, maxPayload+1)
	_ = pt.client.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, _, err := pt.client.ReadFrom(buf)
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := wire.ParseDatagram(buf[:n])
	if err != nil || f.Type != wire.TypeResponse {
		t.Fatalf("not a Response datagram: %v", err)
	}
	var h wire.Header
	if err := wire.ParseHeader(f.Header, &h); err != nil {
		t.Fatal(err)
	}
	return answer{f.ID, h.ErrCode, string(h.ErrMsg), bytes.Clone(h.Ticket), bytes.Clone(f.Body)}
}

func (pt *packetTest) next(t *testing.T) *echoCall {
	t.Helper()
	select {
	case c := <-pt.h.submitted:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no call submitted")
		return nil
	}
}

// TestPacketServerDuplicate checks that a retransmitted Request of a call
// that is done gets the same reply again, without a second call.
func TestPacketServerDuplicate(t *testing.T) {
	pt := newPacketTest(t, nil)
	pt.send(t, 1, 0, []byte("ping"), nil)
	c := pt.next(t)
	if string(c.args) != "ping" {
		t.Fatalf("args %q, want ping", c.args)
	}
	c.reply(t, []byte("pong"))
	if a := pt.read(t); a.id != 1 || a.code != 0 || string(a.body) != "pong" {
		t.Fatalf("answer %+v, want call 1's pong", a)
	}
	pt.send(t, 1, 0, []byte("ping"), nil)
	if a := pt.read(t); a.id != 1 || string(a.body) != "pong" {
		t.Fatalf("answer to the retransmission %+v, want call 1's pong", a)
	}
	if n := pt.h.opened.Load(); n != 1 {
		t.Errorf("%d calls made, want 1", n)
	}
	if n := pt.cfg.Counters.Duplicates.Load(); n != 1 {
		t.Errorf("Duplicates = %d, want 1", n)
	}
	if n := pt.ps.Cached(); n != 1 {
		t.Errorf("Cached = %d, want 1", n)
	}
}

// TestPacketServerAckFloor checks that a Request whose ack floor passes a
// running call cancels it, and that a late retransmission of it is
// dropped unrun.
func TestPacketServerAckFloor(t *testing.T) {
	pt := newPacketTest(t, nil)
	pt.send(t, 1, 0, nil, nil)
	c1 := pt.next(t)
	pt.send(t, 2, 2, nil, nil)
	c2 := pt.next(t)
	<-c1.canceled
	if !c1.st.CallerGone.Load() {
		t.Error("the call below the ack floor is canceled, but its caller is not gone")
	}
	c1.sink.Done(c1)
	pt.send(t, 1, 2, nil, nil) // late: below the floor
	pt.send(t, 3, 2, nil, nil) // read after it: once it is submitted, call 1 was dropped
	c3 := pt.next(t)
	if n := pt.h.opened.Load(); n != 3 {
		t.Errorf("%d calls made, want 3 (1, 2 and 3)", n)
	}
	if n := pt.cfg.Counters.Duplicates.Load(); n != 1 {
		t.Errorf("Duplicates = %d, want 1", n)
	}
	c2.reply(t, nil)
	c3.reply(t, nil)
}

// TestPacketServerRetry checks proof of address: an answer larger than
// MaxAmplification allows is held for a Retry, whose ticket gets it.
func TestPacketServerRetry(t *testing.T) {
	pt := newPacketTest(t, func(cfg *PacketServerConfig) { cfg.MaxAmplification = 3 })
	args := make([]byte, 100) // earns a Retry, not the reply
	pt.send(t, 1, 0, args, nil)
	big := bytes.Repeat([]byte("x"), 1000)
	pt.next(t).reply(t, big)
	a := pt.read(t)
	if a.id != 1 || a.code != uint64(codes.TooLarge) || a.msg != retryMsg || len(a.ticket) != ticketLen {
		t.Fatalf("answer %+v, want a Retry with a ticket", a)
	}
	pt.send(t, 1, 0, args, a.ticket)
	if a := pt.read(t); a.id != 1 || a.code != 0 || !bytes.Equal(a.body, big) {
		t.Fatalf("answer with the ticket: code %d, %d bytes; want the held reply", a.code, len(a.body))
	}
	if n := pt.cfg.Counters.Retries.Load(); n != 1 {
		t.Errorf("Retries = %d, want 1", n)
	}
}

// TestPacketServerDrain checks that a draining socket refuses new calls
// and closes once its running call is done, and that Serve then returns
// nil.
func TestPacketServerDrain(t *testing.T) {
	pt := newPacketTest(t, nil)
	pt.send(t, 1, 0, nil, nil)
	c := pt.next(t)
	pt.ps.Drain()
	pt.send(t, 2, 0, nil, nil)
	if a := pt.read(t); a.id != 2 || a.code != uint64(codes.Shutdown) {
		t.Fatalf("answer %+v, want call 2 refused with codes.Shutdown", a)
	}
	select {
	case err := <-pt.served:
		t.Fatalf("Serve returned %v with a call running", err)
	default:
	}
	c.reply(t, []byte("done"))
	if a := pt.read(t); a.id != 1 || string(a.body) != "done" {
		t.Fatalf("answer %+v, want call 1's reply", a)
	}
	if err := <-pt.served; err != nil {
		t.Fatalf("Serve returned %v, want nil", err)
	}
	pt.served <- nil // for the cleanup
}

// sweepAt runs the sweeper's pass as if at now.
func (pt *packetTest) sweepAt(now time.Time) {
	pt.ps.mu.Lock()
	pt.ps.sweepAt(now)
	pt.ps.mu.Unlock()
}

// TestPacketServerLateDuplicate sends a duplicate of an answered call
// after the dedup linger, when the server has forgotten the call: it ran
// the handler again. Now the session's answered window knows it: it is
// answered Answered, not run; until the session itself is forgotten,
// SessionLinger after its last datagram.
func TestPacketServerLateDuplicate(t *testing.T) {
	pt := newPacketTest(t, func(cfg *PacketServerConfig) { cfg.SessionLinger = 10 * time.Minute })
	for id := uint64(1); id <= 3; id++ {
		pt.send(t, id, 1, []byte("ping"), nil) // the client's floor stays at 1: say call 1's reply was lost
		pt.next(t).reply(t, []byte("pong"))
		if a := pt.read(t); a.id != id || string(a.body) != "pong" {
			t.Fatalf("answer %+v, want call %d's pong", a, id)
		}
	}
	pt.sweepAt(time.Now().Add(pt.cfg.DedupLinger + time.Second))
	if n := pt.ps.Cached(); n != 0 {
		t.Fatalf("Cached = %d after the linger; want 0", n)
	}
	for _, id := range []uint64{2, 1, 3} {
		pt.send(t, id, 1, []byte("ping"), nil)
		if a := pt.read(t); a.id != id || a.code != uint64(codes.Answered) || a.msg != answeredMsg {
			t.Fatalf("answer to a late duplicate of call %d: %+v; want Answered", id, a)
		}
	}
	if n := pt.h.opened.Load(); n != 3 {
		t.Errorf("%d calls made; want 3: late duplicates must not run", n)
	}
	pt.send(t, 4, 4, []byte("ping"), nil) // a new call runs
	pt.next(t).reply(t, nil)
	pt.read(t)
	if n := pt.h.opened.Load(); n != 4 {
		t.Errorf("%d calls made; want 4", n)
	}
}

// TestPacketServerHostileIDs has one session call ids far ahead of its
// first, and spread over the whole id space. What the server remembers
// of them once they are forgotten is one fixed window: no entry, no
// allocation per id; their late duplicates, and ids below, do not run.
func TestPacketServerHostileIDs(t *testing.T) {
	pt := newPacketTest(t, func(cfg *PacketServerConfig) { cfg.SessionLinger = 10 * time.Minute })
	ids := []uint64{1, 1 << 40, 1<<63 + 12345, ^uint64(0) - 2}
	for _, id := range ids {
		pt.send(t, id, 1, nil, nil)
		pt.next(t).reply(t, nil)
		pt.read(t)
	}
	pt.sweepAt(time.Now().Add(pt.cfg.DedupLinger + time.Second))
	pt.ps.mu.Lock()
	peers, entries := len(pt.ps.peers), pt.ps.entries
	var calls map[uint64]*packetCall
	for _, st := range pt.ps.peers {
		calls = st.calls
	}
	pt.ps.mu.Unlock()
	if peers != 1 || entries != 0 || calls != nil {
		t.Fatalf("after the linger: %d sessions, %d calls remembered, calls map %v; want 1 session, 0 calls, no map", peers, entries, calls)
	}
	for _, id := range append(ids, 5, 1<<50) {
		pt.send(t, id, 1, nil, nil)
		if a := pt.read(t); a.code != uint64(codes.Answered) {
			t.Fatalf("answer to call %d after ids far ahead were answered: %+v; want Answered", id, a)
		}
	}
	if n := pt.h.opened.Load(); n != int32(len(ids)) {
		t.Errorf("%d calls made; want %d", n, len(ids))
	}
	var w answered
	next := uint64(1)
	if allocs := testing.AllocsPerRun(1000, func() { next = next*6364136223846793005 + 1442695040888963407; w.mark(next) }); allocs != 0 {
		t.Errorf("marking random ids allocates %v times each; want 0", allocs)
	}
}

// TestPacketServerSessionsBounded has more sessions answer a call than
// DedupEntries, each forgotten after the dedup linger. The idle sessions
// beyond DedupEntries are forgotten early, and counted; the others are
// kept until SessionLinger, then forgotten too.
func TestPacketServerSessionsBounded(t *testing.T) {
	pt := newPacketTest(t, func(cfg *PacketServerConfig) { cfg.DedupEntries = 4; cfg.SessionLinger = 10 * time.Minute })
	sessions := func() int {
		pt.ps.mu.Lock()
		defer pt.ps.mu.Unlock()
		return len(pt.ps.peers)
	}
	var last time.Time
	for session := uint64(1); session <= 10; session++ {
		pt.sendAs(t, session, 1, 1, nil, nil)
		pt.next(t).reply(t, nil)
		pt.read(t)
		last = time.Now().Add(pt.cfg.DedupLinger + time.Second)
		pt.sweepAt(last)
		if n := sessions(); n > 4 {
			t.Fatalf("%d sessions kept after %d answered; want at most DedupEntries, 4", n, session)
		}
	}
	if n, early := sessions(), pt.cfg.Counters.ForgottenEarly.Load(); n != 4 || early != 6 {
		t.Errorf("%d sessions kept, %d forgotten early; want 4 and 6", n, early)
	}
	pt.sweepAt(last.Add(pt.cfg.SessionLinger))
	if n := sessions(); n != 0 {
		t.Errorf("%d sessions kept after SessionLinger; want 0", n)
	}
}

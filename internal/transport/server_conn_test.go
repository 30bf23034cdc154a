package transport

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/codes"
	"github.com/kievrpc/kiev/internal/wire"
)

// The server's connection, driven by a fake Handler and a client that
// writes frames by hand: what it hands the Handler of each call, and what
// it sends back.

// fakeCall is a call of fakeHandler.
type fakeCall struct {
	st       CallState
	name     string
	canceled chan error // what Cancel was called with
	released bool
	h        *fakeHandler
}

func (c *fakeCall) Submit(context.Context) { c.h.opened <- c }
func (c *fakeCall) RunInline() bool        { return false }

func (c *fakeCall) State() *CallState       { return &c.st }
func (c *fakeCall) Name() string            { return c.name }
func (c *fakeCall) Estimate() time.Duration { return 0 } // never inline
func (c *fakeCall) ReplySize() *ReplySize   { return nil }
func (c *fakeCall) Cancel(err error) {
	select {
	case c.canceled <- err:
	default:
	}
}
func (c *fakeCall) Release() { c.released = true }

// fakeHandler makes a call of every Request, keeping what Open was given,
// and answers it when the test says so.
type fakeHandler struct {
	mu      sync.Mutex
	heads   []Head                                 // copies of what Open was given
	meta    []map[string]string                    // each call's metadata
	sinks   map[uint64]Sink                        // by call id
	calls   map[uint64]*fakeCall                   // by call id
	opened  chan *fakeCall                         // each call submitted
	refused int                                    // calls refused at MaxCalls
	notRun  func(name string) (codes.Code, string) // answer for a name, if not 0
}

func newFakeHandler() *fakeHandler {
	return &fakeHandler{sinks: map[uint64]Sink{}, calls: map[uint64]*fakeCall{}, opened: make(chan *fakeCall, 16)}
}

func (h *fakeHandler) Open(hd *Head, _ context.Context, sink Sink) (Call, codes.Code, string) {
	name := string(hd.Method)
	if h.notRun != nil {
		if code, msg := h.notRun(name); code != 0 {
			return nil, code, msg
		}
	}
	c := &fakeCall{name: name, canceled: make(chan error, 1), h: h}
	c.st.ID = hd.ID
	cp := *hd
	cp.Method, cp.Codec, cp.Body = []byte(name), []byte(string(hd.Codec)), append([]byte(nil), hd.Body...)
	h.mu.Lock()
	h.heads = append(h.heads, cp)
	h.meta = append(h.meta, hd.Metadata("key-id"))
	h.sinks[hd.ID] = sink
	h.calls[hd.ID] = c
	h.mu.Unlock()
	return c, 0, ""
}

func (h *fakeHandler) Refuse(_ []byte, where string) (codes.Code, string) {
	h.mu.Lock()
	h.refused++
	h.mu.Unlock()
	return codes.Overloaded, "refused " + where
}

// answer replies to call c with v, as a handler's return would.
func (h *fakeHandler) answer(t *testing.T, c *fakeCall, v any) {
	t.Helper()
	h.mu.Lock()
	sink := h.sinks[c.st.ID]
	h.mu.Unlock()
	if err := sink.Reply(c, codec.Msgpack, v); err != nil {
		t.Fatal(err)
	}
	sink.Done(c)
}

// serverConnPair serves one end of a loopback connection with a
// ServerConn over h, and returns the client's end, past the handshake.
func serverConnPair(t *testing.T, h *fakeHandler, maxCalls int) (*ServerConn, net.Conn, *wire.Reader) {
	t.Helper()
	local, peer := tcpPair(t)
	var readers sync.WaitGroup
	cfg := &ServerConfig{
		Handler: h, HeartbeatInterval: time.Minute, HeartbeatTimeout: time.Minute,
		MaxFrame: 1 << 20, MaxCalls: maxCalls, Partial: &Budget{Max: 1 << 20},
		MaxQueued: 64 << 20, Conns: new(atomic.Int64),
		Warn:  func(string, ...any) {},
		Watch: &InlineWatch{}, Readers: &readers,
	}
	c := NewServerConn(cfg, peer, context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		c.Serve()
	}()
	t.Cleanup(func() {
		local.Close()
		c.Close(errors.New("the test is over")) // calls it left unanswered end too
		<-served
		readers.Wait()
	})
	if _, err := local.Write(wire.AppendPreface(nil, wire.Version)); err != nil {
		t.Fatal(err)
	}
	r := wire.NewReader(local, ReadBufSize, 1<<20)
	if v, err := wire.ReadPreface(r); err != nil || v != wire.Version {
		t.Fatalf("server's preface: version %d, %v", v, err)
	}
	return c, local, r
}

// request writes a Request frame of method with id, priority 7, a
// timeout of 5s and one metadata pair.
func request(t *testing.T, w net.Conn, id uint64, method string) {
	t.Helper()
	b := wire.BeginFrame(nil, wire.TypeRequest, id)
	b = wire.AppendString(b, wire.KeyMethod, method)
	b = wire.AppendString(b, wire.KeyCodec, "msgpack")
	b = wire.AppendUvarint(b, wire.KeyTimeout, uint64(5*time.Second/time.Microsecond))
	b = wire.AppendField(b, wire.KeyPriority, []byte{7})
	b = wire.AppendMeta(b, "trace", "abc")
	if err := wire.EndHeader(b, 0); err != nil {
		t.Fatal(err)
	}
	b = append(b, 0xc0) // msgpack nil
	if err := wire.EndFrame(b, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
}

// response reads the next Response frame, and its header.
func response(t *testing.T, r *wire.Reader) (wire.Frame, wire.Header) {
	t.Helper()
	for {
		f, err := r.Next()
		if err != nil {
			t.Fatalf("reading a Response: %v", err)
		}
		if f.Type != wire.TypeResponse {
			continue
		}
		var h wire.Header
		if err := wire.ParseHeader(f.Header, &h); err != nil {
			t.Fatal(err)
		}
		return f, h
	}
}

func TestServerConnHandsTheHandlerWhatTheRequestSays(t *testing.T) {
	h := newFakeHandler()
	_, w, r := serverConnPair(t, h, 0)
	before := time.Now()
	request(t, w, 1, "Arith.Add")
	c := <-h.opened
	hd := h.heads[0]
	if string(hd.Method) != "Arith.Add" || string(hd.Codec) != "msgpack" || hd.ID != 1 {
		t.Errorf("Open got method %q, codec %q, id %d", hd.Method, hd.Codec, hd.ID)
	}
	if !hd.HasPriority || hd.Priority != 7 {
		t.Errorf("Open got priority %d (set %v), want 7", hd.Priority, hd.HasPriority)
	}
	if left := hd.Deadline.Sub(before); left < 4*time.Second || left > 6*time.Second {
		t.Errorf("Open got a deadline %v from now, want about 5s", left)
	}
	if !hd.Conn || hd.Addr == nil {
		t.Errorf("Open got origin %+v; want a stream with the peer's address", hd.Origin)
	}
	if got := h.meta[0]; len(got) != 1 || got["trace"] != "abc" {
		t.Errorf("metadata %v, want trace: abc", got)
	}
	h.answer(t, c, 42)
	f, rh := response(t, r)
	var got int
	if err := codec.Msgpack.Unmarshal(f.Body, &got); err != nil || f.ID != 1 || rh.ErrCode != 0 || got != 42 {
		t.Fatalf("Response id %d, code %d, body %d (%v); want id 1, a reply of 42", f.ID, rh.ErrCode, got, err)
	}
}

func TestServerConnAnswersWhatTheHandlerRefuses(t *testing.T) {
	h := newFakeHandler()
	h.notRun = func(name string) (codes.Code, string) {
		if name == "No.Such" {
			return codes.NotFound, "no such method"
		}
		return 0, ""
	}
	_, w, r := serverConnPair(t, h, 0)
	request(t, w, 3, "No.Such")
	f, rh := response(t, r)
	if f.ID != 3 || rh.ErrCode != uint64(codes.NotFound) || string(rh.ErrMsg) != "no such method" {
		t.Fatalf("Response id %d, code %d %q; want id 3, NotFound", f.ID, rh.ErrCode, rh.ErrMsg)
	}
}

func TestServerConnMaxCalls(t *testing.T) {
	h := newFakeHandler()
	_, w, r := serverConnPair(t, h, 1)
	request(t, w, 1, "Slow.Call")
	first := <-h.opened
	request(t, w, 2, "Slow.Call") // past the limit of 1
	f, rh := response(t, r)
	if f.ID != 2 || rh.ErrCode != uint64(codes.Overloaded) || !strings.Contains(string(rh.ErrMsg), "on this connection") {
		t.Fatalf("Response id %d, code %d %q; want id 2 refused on this connection", f.ID, rh.ErrCode, rh.ErrMsg)
	}
	h.answer(t, first, 1)
	if f, _ := response(t, r); f.ID != 1 {
		t.Fatalf("Response id %d, want 1", f.ID)
	}
	request(t, w, 3, "Slow.Call") // the first is answered: room again
	third := <-h.opened
	h.answer(t, third, 3)
	if f, rh := response(t, r); f.ID != 3 || rh.ErrCode != 0 {
		t.Fatalf("Response id %d, code %d; want a reply to 3", f.ID, rh.ErrCode)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refused != 1 {
		t.Errorf("Refuse called %d times, want 1", h.refused)
	}
	if len(h.heads) != 2 {
		t.Errorf("Open called %d times, want 2: a call refused at the limit must not be opened (its args copied or decompressed)", len(h.heads))
	}
}

func TestServerConnCancel(t *testing.T) {
	h := newFakeHandler()
	_, w, _ := serverConnPair(t, h, 0)
	request(t, w, 5, "Slow.Call")
	c := <-h.opened
	b := wire.BeginFrame(nil, wire.TypeCancel, 5)
	_ = wire.EndFrame(b, 0, 1<<20)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := <-c.canceled; !errors.Is(err, context.Canceled) {
		t.Fatalf("Cancel(%v), want context.Canceled", err)
	}
	if !c.st.CallerGone.Load() {
		t.Error("a canceled call's caller is not marked gone: its answer would still be sent")
	}
}

func TestServerConnDuplicateIDIsAProtocolError(t *testing.T) {
	h := newFakeHandler()
	_, w, r := serverConnPair(t, h, 0)
	request(t, w, 9, "Slow.Call")
	c := <-h.opened
	request(t, w, 9, "Slow.Call")
	if err := <-c.canceled; err == nil {
		t.Fatal("the first call of id 9 was not canceled as the connection closed")
	}
	for {
		if _, err := r.Next(); err != nil {
			return // closed, as it must be
		}
	}
}

func TestServerConnDrain(t *testing.T) {
	h := newFakeHandler()
	sc, w, r := serverConnPair(t, h, 0)
	request(t, w, 4, "Slow.Call")
	c := <-h.opened
	sc.Drain()
	f, err := r.Next()
	if err != nil || f.Type != wire.TypeGoAway {
		t.Fatalf("frame type %d (%v), want GoAway", f.Type, err)
	}
	h.answer(t, c, 1) // the call in flight still answers
	f, _ = response(t, r)
	if f.ID != 4 {
		t.Fatalf("Response id %d, want 4", f.ID)
	}
	f, err = r.Next()
	var gh wire.Header
	if err == nil {
		err = wire.ParseHeader(f.Header, &gh)
	}
	if err != nil || f.Type != wire.TypeGoAway || !gh.HasLastID || gh.LastID != 4 {
		t.Fatalf("frame type %d, LastID %d (set %v), %v; want a last GoAway saying 4", f.Type, gh.LastID, gh.HasLastID, err)
	}
}

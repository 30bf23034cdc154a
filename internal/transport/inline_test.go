package transport

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/codes"
	"github.com/kievrpc/kiev/internal/wire"
)

// The inline path: which calls a connection runs on its reader, and the
// watchdog that takes a reader lent to a slow call over.

// inlineCall is a call of inlineHandler, of a method whose usual run
// time is est.
type inlineCall struct {
	st   CallState
	est  time.Duration
	sink Sink
	h    *inlineHandler
}

func (c *inlineCall) State() *CallState       { return &c.st }
func (c *inlineCall) Name() string            { return "T.Inline" }
func (c *inlineCall) Estimate() time.Duration { return c.est }
func (c *inlineCall) ReplySize() *ReplySize   { return nil }
func (c *inlineCall) Cancel(error)            {}
func (c *inlineCall) Release()                {}
func (c *inlineCall) Submit(context.Context)  { c.h.submitted <- c }
func (c *inlineCall) RunInline() bool {
	c.h.inlined.Add(1)
	if c.h.hold != nil {
		<-c.h.hold
	}
	c.run()
	return true
}

// run answers c with its id, as its handler would.
func (c *inlineCall) run() {
	_ = c.sink.Reply(c, codec.Msgpack, c.st.ID)
	c.sink.Done(c)
}

// inlineHandler makes calls whose estimate is the method's name's
// ("Fast.Call": a microsecond, "Slow.Call": a second, else unknown);
// their RunInline runs them, first waiting on hold if it is set, and
// their Submit hands them to the test.
type inlineHandler struct {
	hold      chan struct{} // RunInline waits on it, if not nil
	inlined   atomic.Int32
	submitted chan *inlineCall
}

func (h *inlineHandler) Open(hd *Head, _ context.Context, sink Sink) (Call, codes.Code, string) {
	c := &inlineCall{sink: sink, h: h}
	c.st.ID = hd.ID
	switch string(hd.Method) {
	case "Fast.Call":
		c.est = time.Microsecond
	case "Slow.Call":
		c.est = time.Second
	}
	return c, codes.OK, ""
}
func (h *inlineHandler) Refuse([]byte, string) (codes.Code, string) { return codes.Overloaded, "" }

// inlinePair serves a connection over h, and returns its client's end.
func inlinePair(t *testing.T, h *inlineHandler) (*ServerConfig, func(uint64, string), func() uint64) {
	t.Helper()
	local, peer := tcpPair(t)
	var readers sync.WaitGroup
	cfg := &ServerConfig{
		Handler: h, HeartbeatInterval: time.Minute, HeartbeatTimeout: time.Minute,
		MaxFrame: 1 << 20, Partial: &Budget{Max: 1 << 20},
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
		c.Close(errors.New("the test is over"))
		<-served
		readers.Wait()
	})
	if _, err := local.Write(wire.AppendPreface(nil, wire.Version)); err != nil {
		t.Fatal(err)
	}
	r := wire.NewReader(local, ReadBufSize, 1<<20)
	if _, err := wire.ReadPreface(r); err != nil {
		t.Fatal(err)
	}
	send := func(id uint64, method string) { request(t, local, id, method) }
	answer := func() uint64 {
		f, h := response(t, r)
		if h.ErrCode != 0 {
			t.Fatalf("call %d failed: %d %s", f.ID, h.ErrCode, h.ErrMsg)
		}
		return f.ID
	}
	return cfg, send, answer
}

func TestQuickCallAloneRunsOnTheReader(t *testing.T) {
	h := &inlineHandler{submitted: make(chan *inlineCall, 4)}
	cfg, send, answer := inlinePair(t, h)
	// The watch counts a call once it has run, which is after its reply
	// is sent; the reader reads the second call only after counting the
	// first, so once the second is answered the first is counted.
	for id := uint64(1); id <= 2; id++ {
		send(id, "Fast.Call")
		if got := answer(); got != id {
			t.Fatalf("answered %d, want %d", got, id)
		}
	}
	if runs, _ := cfg.Watch.Counts(); runs < 1 || h.inlined.Load() != 2 || len(h.submitted) != 0 {
		t.Errorf("%d calls ran on the reader (the watch counts %d), %d were submitted; want both on the reader", h.inlined.Load(), runs, len(h.submitted))
	}
}

func TestSlowOrUnknownCallIsSubmitted(t *testing.T) {
	h := &inlineHandler{submitted: make(chan *inlineCall, 4)}
	_, send, answer := inlinePair(t, h)
	for i, method := range []string{"Slow.Call", "New.Call"} {
		send(uint64(i+1), method)
		(<-h.submitted).run()
		if id := answer(); id != uint64(i+1) {
			t.Fatalf("answered %d, want %d", id, i+1)
		}
	}
	if n := h.inlined.Load(); n != 0 {
		t.Errorf("%d calls ran on the reader; a slow call, and one whose cost is unknown, must go to a worker", n)
	}
}

// TestWatchdogTakesAStuckReaderOver runs a quick method's call that is
// slow this once on the reader: the watchdog gives the reading to a new
// goroutine, which reads and answers the next call meanwhile.
func TestWatchdogTakesAStuckReaderOver(t *testing.T) {
	h := &inlineHandler{hold: make(chan struct{}), submitted: make(chan *inlineCall, 4)}
	cfg, send, answer := inlinePair(t, h)
	send(1, "Fast.Call") // held in RunInline
	send(2, "New.Call")  // read only once the reader is taken over
	c := <-h.submitted
	c.run()
	if id := answer(); id != 2 {
		t.Fatalf("answered %d first, want 2, while 1 holds the old reader", id)
	}
	if _, takeovers := cfg.Watch.Counts(); takeovers != 1 {
		t.Errorf("%d takeovers, want 1", takeovers)
	}
	close(h.hold)
	if id := answer(); id != 1 {
		t.Fatalf("answered %d, want 1", id)
	}
}

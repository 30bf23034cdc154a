package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/kievrpc/kiev/internal/wire"
)

// testCall is a call of the tests' client.
type testCall struct{ id uint64 }

// connHandler records what a ClientConn hands its protocol.
type connHandler struct {
	replies chan string // the body of each Response
	goAway  chan struct{}
	lost    chan Loss[*testCall]
}

func (h *connHandler) Reply(c *testCall, r *Response) {
	h.replies <- string(r.Body)
}
func (h *connHandler) Settings(AlgSet)                   {}
func (h *connHandler) GoAway()                           { h.goAway <- struct{}{} }
func (h *connHandler) Failure(cause error, _ bool) error { return cause }
func (h *connHandler) Lost(l Loss[*testCall])            { h.lost <- l }

// frame returns a frame of type t and id, with the fields of f and body.
func frame(t wire.Type, id uint64, f func([]byte) []byte, body string) []byte {
	b := wire.BeginFrame(nil, t, id)
	if f != nil {
		b = f(b)
	}
	_ = wire.EndHeader(b, 0)
	b = append(b, body...)
	_ = wire.EndFrame(b, 0, 1<<20)
	return b
}

// A connection's life, against a server that drains: a call answered, one
// abandoned (its Cancel reaches the server), a call refused once the
// server sent GoAway, and at the end of the stream, the call left pending
// handed to Lost as unread, since the last GoAway said the server read no
// Request past the first.
func TestClientConnDrain(t *testing.T) {
	cli, srv := net.Pipe()
	proceed := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- drainingServer(srv, proceed) }()

	h := &connHandler{replies: make(chan string, 1), goAway: make(chan struct{}, 2), lost: make(chan Loss[*testCall], 1)}
	var wg sync.WaitGroup
	cfg := ConnConfig{HeartbeatInterval: time.Minute, HeartbeatTimeout: time.Minute, MaxFrame: 1 << 20, Goroutines: &wg}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc, err := DialConn[*testCall](ctx, cli, cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 3; id++ {
		if got := cc.NextID(); got != id {
			t.Fatalf("NextID = %d, want %d", got, id)
		}
		alone, err := cc.Add(id, &testCall{id})
		if err != nil || alone != (id == 1) {
			t.Fatalf("Add(%d) = %v, %v; want alone only for the first call", id, alone, err)
		}
		if err := cc.Write(id, frame(wire.TypeRequest, id, nil, ""), alone); err != nil {
			t.Fatalf("Write(%d): %v", id, err)
		}
	}
	if !cc.Abandon(3, context.Canceled) || cc.Abandon(3, context.Canceled) {
		t.Fatal("Abandon takes a pending call once")
	}
	if got := <-h.replies; got != "one" {
		t.Fatalf("reply %q, want one", got)
	}
	<-h.goAway
	if !cc.Draining() || cc.Dead() {
		t.Fatalf("after GoAway: draining %v, dead %v; want draining, not dead", cc.Draining(), cc.Dead())
	}
	if _, err := cc.Add(4, &testCall{4}); !errors.Is(err, ErrDraining) {
		t.Fatalf("Add while draining = %v, want ErrDraining", err)
	}
	close(proceed)
	l := <-h.lost
	if !errors.Is(l.Cause, io.EOF) || !l.Draining || len(l.Calls) != 1 || l.Calls[2] == nil {
		t.Fatalf("Lost(cause %v, draining %v, calls %v); want EOF, draining, call 2", l.Cause, l.Draining, l.Calls)
	}
	if !l.Unread(2) || l.Unread(1) {
		t.Fatal("Unread: want true for call 2 only, past the last GoAway's LastID 1")
	}
	if !cc.Dead() || cc.Err() == nil {
		t.Fatal("the connection is not dead after its stream ended")
	}
	if _, err := cc.Add(5, &testCall{5}); err == nil || errors.Is(err, ErrDraining) {
		t.Fatalf("Add on a dead connection = %v, want its failure", err)
	}
	wg.Wait()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// drainingServer serves TestClientConnDrain on nc: it reads the three
// Requests and the Cancel of the third, answers the first, sends GoAway,
// and once told to proceed, a last GoAway saying it read Request 1, and
// closes the stream.
func drainingServer(nc net.Conn, proceed <-chan struct{}) error {
	defer nc.Close()
	r := wire.NewReader(nc, ReadBufSize, 1<<20)
	if _, err := wire.ReadPreface(r); err != nil {
		return err
	}
	if _, err := nc.Write(wire.AppendPreface(nil, wire.Version)); err != nil {
		return err
	}
	want := []struct {
		t  wire.Type
		id uint64
	}{{wire.TypeRequest, 1}, {wire.TypeRequest, 2}, {wire.TypeRequest, 3}, {wire.TypeCancel, 3}}
	for _, w := range want {
		f, err := r.Next()
		if err != nil {
			return err
		}
		if f.Type != w.t || f.ID != w.id {
			return errors.New("the server read frames out of order")
		}
	}
	codec := func(b []byte) []byte { return wire.AppendString(b, wire.KeyCodec, "raw") }
	lastID := func(b []byte) []byte { return wire.AppendUvarint(b, wire.KeyLastID, 1) }
	if _, err := nc.Write(append(frame(wire.TypeResponse, 1, codec, "one"), frame(wire.TypeGoAway, 0, nil, "")...)); err != nil {
		return err
	}
	<-proceed
	_, err := nc.Write(frame(wire.TypeGoAway, 0, lastID, ""))
	return err
}

package kiev_test

import (
	"context"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/codec"
)

// gated is msgpack whose decoding of a large body waits for gate to
// close, saying on entered that it waits: a codec as slow as a large
// reply can be.
type gated struct{ entered, gate chan struct{} }

func (gated) Name() string                            { return "gated" }
func (gated) Marshal(b []byte, v any) ([]byte, error) { return codec.Msgpack.Marshal(b, v) }
func (g gated) Unmarshal(data []byte, v any) error {
	if len(data) >= 32<<10 {
		g.entered <- struct{}{}
		<-g.gate
	}
	return codec.Msgpack.Unmarshal(data, v)
}

// A large reply is decoded by the goroutine that waits for it, not by the
// connection's reader: while its decoding is held, a small call on the
// same connection is answered.
func TestLargeReplyDecodingHoldsNoOtherReply(t *testing.T) {
	g := gated{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	c := dial(t, newArithServer(t, nil, kiev.WithCodecs(g)), kiev.WithCodec(g))
	big := make(chan error, 1)
	go func() {
		var reply []byte
		err := c.Call(context.Background(), "Arith.Big", Args{A: 64 << 10}, &reply)
		if err == nil && len(reply) != 64<<10 {
			t.Errorf("the large reply has %d bytes; want %d", len(reply), 64<<10)
		}
		big <- err
	}()
	<-g.entered // its decoding has begun, and waits
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var r Reply
	err := c.Call(ctx, "Arith.Add", Args{1, 2}, &r)
	close(g.gate)
	if err != nil || r.C != 3 {
		t.Fatalf("a small call while a large reply was being decoded: %v, %v; want it answered (the decoding held the connection's reader)", r.C, err)
	}
	if err := <-big; err != nil {
		t.Fatalf("the large call: %v", err)
	}
}

// The same over UDP: a large reply is decoded by its caller, not by the
// socket's reader, so a small call on the same socket is answered while
// the large one's decoding is held.
func TestLargeDatagramReplyDecodingHoldsNoOtherReply(t *testing.T) {
	g := gated{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	big := kiev.WithPacket(kiev.Packet{MaxDatagram: 60000})
	_, target := newUDPArith(t, nil, kiev.WithCodecs(g), big)
	c := dial(t, target, kiev.WithCodec(g), kiev.WithPacket(kiev.Packet{MaxDatagram: 60000}))
	done := make(chan error, 1)
	go func() {
		var reply []byte
		err := c.Call(context.Background(), "Arith.Big", Args{A: 40 << 10}, &reply)
		if err == nil && len(reply) != 40<<10 {
			t.Errorf("the large reply has %d bytes; want %d", len(reply), 40<<10)
		}
		done <- err
	}()
	<-g.entered
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var r Reply
	err := c.Call(ctx, "Arith.Add", Args{1, 2}, &r)
	close(g.gate)
	if err != nil || r.C != 3 {
		t.Fatalf("a small call while a large reply was being decoded: %v, %v; want it answered (the decoding held the socket's reader)", r.C, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the large call: %v", err)
	}
}

// The same for Client.Go on a client that sends its calls without a
// goroutine of their own (one server, no retries, no throttle): the large
// reply is decoded off the connection's reader.
func TestLargeAsyncReplyDecodingHoldsNoOtherReply(t *testing.T) {
	g := gated{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	c := dial(t, newArithServer(t, nil, kiev.WithCodecs(g)), kiev.WithCodec(g),
		kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1}), kiev.WithThrottle(kiev.Throttle{Disabled: true}))
	var reply []byte
	big := c.Go(context.Background(), "Arith.Big", Args{A: 64 << 10}, &reply, nil)
	<-g.entered
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var r Reply
	err := c.Call(ctx, "Arith.Add", Args{1, 2}, &r)
	close(g.gate)
	if err != nil || r.C != 3 {
		t.Fatalf("a small call while a large async reply was being decoded: %v, %v; want it answered (the decoding held the connection's reader)", r.C, err)
	}
	if call := <-big.Done; call.Error != nil || len(reply) != 64<<10 {
		t.Fatalf("the large call: %v, %d bytes; want %d", call.Error, len(reply), 64<<10)
	}
}

package kiev_test

import (
	"context"
	"fmt"
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

// holdsNoOtherReply starts a large call with big, which must return the
// large call's end; once g says its decoding has begun and waits, a small
// call on c must be answered, and then, the decoding released, the large
// call must end well.
func holdsNoOtherReply(t *testing.T, g gated, c *kiev.Client, where string, big func() <-chan error) {
	t.Helper()
	done := big()
	<-g.entered // its decoding has begun, and waits
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var r Reply
	err := c.Call(ctx, "Arith.Add", Args{1, 2}, &r)
	close(g.gate)
	if err != nil || r.C != 3 {
		t.Fatalf("a small call while a large reply was being decoded: %v, %v; want it answered (the decoding held the %s)", r.C, err, where)
	}
	if err := <-done; err != nil {
		t.Fatalf("the large call: %v", err)
	}
}

// bigCall calls Arith.Big for n bytes on c, and checks the reply's size.
func bigCall(t *testing.T, c *kiev.Client, n int) <-chan error {
	done := make(chan error, 1)
	go func() {
		var reply []byte
		err := c.Call(context.Background(), "Arith.Big", Args{A: n}, &reply)
		if err == nil && len(reply) != n {
			err = fmt.Errorf("the large reply has %d bytes; want %d", len(reply), n)
		}
		done <- err
	}()
	return done
}

// A large reply is decoded by the goroutine that waits for it, not by the
// connection's reader: while its decoding is held, a small call on the
// same connection is answered.
func TestLargeReplyDecodingHoldsNoOtherReply(t *testing.T) {
	g := gated{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	c := dial(t, newArithServer(t, nil, kiev.WithCodecs(g)), kiev.WithCodec(g))
	holdsNoOtherReply(t, g, c, "connection's reader", func() <-chan error { return bigCall(t, c, 64<<10) })
}

// The same over UDP: a large reply is decoded by its caller, not by the
// socket's reader.
func TestLargeDatagramReplyDecodingHoldsNoOtherReply(t *testing.T) {
	g := gated{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	_, target := newUDPArith(t, nil, kiev.WithCodecs(g), kiev.WithPacket(kiev.Packet{MaxDatagram: 60000}))
	c := dial(t, target, kiev.WithCodec(g), kiev.WithPacket(kiev.Packet{MaxDatagram: 60000}))
	holdsNoOtherReply(t, g, c, "socket's reader", func() <-chan error { return bigCall(t, c, 40<<10) })
}

// The same for Client.Go on a client that sends its calls without a
// goroutine of their own (one server, no retries, no throttle): the large
// reply is decoded off the connection's reader.
func TestLargeAsyncReplyDecodingHoldsNoOtherReply(t *testing.T) {
	g := gated{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	c := dial(t, newArithServer(t, nil, kiev.WithCodecs(g)), kiev.WithCodec(g),
		kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1}), kiev.WithThrottle(kiev.Throttle{Disabled: true}))
	holdsNoOtherReply(t, g, c, "connection's reader", func() <-chan error {
		done := make(chan error, 1)
		var reply []byte
		call := c.Go(context.Background(), "Arith.Big", Args{A: 64 << 10}, &reply, make(chan *kiev.Call, 1))
		go func() {
			err := (<-call.Done).Error
			if err == nil && len(reply) != 64<<10 {
				err = fmt.Errorf("the large reply has %d bytes; want %d", len(reply), 64<<10)
			}
			done <- err
		}()
		return done
	})
}

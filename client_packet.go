package kiev

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kievrpc/kiev/internal/transport"
)

// packetTransport is a Client's UDP socket to one server: a
// transport.PacketClient, which frames (and signs, with WithPacketKey),
// sends and retransmits its calls' requests and matches replies to calls,
// and this package's side of it, which decodes their replies and says
// what the socket's failure means to them.
//
// Its handler methods (Reply, Failure, Lost) are called by the socket's
// goroutines, which start before sock is set: they do not use sock.
type packetTransport struct {
	ep   *endpoint
	sock *transport.PacketClient[*Call]
}

// dialPacket opens ep's socket.
func dialPacket(ep *endpoint) (*packetTransport, error) {
	p, n := &ep.c.opts.packet, &ep.c.packetStats
	t := &packetTransport{ep: ep}
	sock, err := transport.DialPacket[*Call](ep.inst.Network, ep.inst.Address, transport.PacketConfig{
		InitialRTO: p.InitialRTO, MinRTO: p.MinRTO, MaxRTO: p.MaxRTO,
		MaxDatagram: MaxDatagram,
		Limit:       p.MaxDatagram,
		Key:         ep.c.opts.packetKey,
		Counters: transport.PacketCounters{
			Sent: &n.sent, Received: &n.received, Retransmits: &n.retransmits,
			Unexpected: &n.unexpected, Stale: &n.stale, Malformed: &n.malformed,
		},
		Goroutines: &ep.c.wg,
	}, t)
	if err != nil {
		return nil, err
	}
	t.sock = sock
	return t, nil
}

func (t *packetTransport) usable() bool    { return !t.sock.Dead() }
func (t *packetTransport) connected() bool { return false }
func (t *packetTransport) failure() error  { return t.sock.Err() }

func (t *packetTransport) close(err error, graceful bool) {
	if graceful {
		t.sock.CloseWhenIdle(err)
	} else {
		t.sock.Close(err)
	}
}

// send makes call pending on the socket; wait sends it.
func (t *packetTransport) send(ctx context.Context, call *Call, async bool) error {
	id, err := t.sock.Add(call)
	if err != nil {
		return notSent{err}
	}
	call.id = id
	return nil
}

// wait makes call over the socket, within ctx's deadline, or
// Packet.Timeout if it has none, and returns its error.
func (t *packetTransport) wait(ctx context.Context, call *Call) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(t.ep.c.opts.packet.Timeout)
	}
	var rq transport.Request
	request(&rq, ctx, deadline, call)
	if err := t.sock.RoundTrip(ctx, deadline, call.id, &rq, call.signal); err != nil {
		return &callError{call.ServiceMethod, err}
	}
	return decodeHandedOver(call, nil)
}

// Reply decodes a reply into its call, and completes it; or, for a large
// reply, hands a copy of the body to the caller to decode (wait), as a
// connection does: a call over UDP always has a goroutine that waits.
func (t *packetTransport) Reply(call *Call, r *transport.Response) {
	if !handOver(call, r) {
		call.Error = decodeReply(call, r, nil)
	}
	call.complete()
}

// Failure is the error the calls of a socket that closed of cause fail
// with: one that matches ErrShutdown.
func (t *packetTransport) Failure(cause error, _ bool) error {
	if errors.Is(cause, ErrShutdown) {
		return cause
	}
	return fmt.Errorf("%w: %w", ErrShutdown, cause)
}

// Lost fails the calls that were pending on the socket.
func (t *packetTransport) Lost(l transport.Loss[*Call]) {
	for _, call := range l.Calls {
		call.Error = &callError{call.ServiceMethod, l.Err}
		call.complete()
	}
}

// PacketStats reports what the client's UDP sockets saw.
func (c *Client) PacketStats() PacketStats {
	return c.packetStats.snapshot()
}

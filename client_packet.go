package kiev

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/kievrpc/kiev/internal/transport"
	"github.com/kievrpc/kiev/internal/wire"
)

// packetClient is a client's UDP socket to one server: any number of
// calls share it, each its own datagrams. It owns two goroutines: the
// reader, which matches replies to calls by id, and the canceler, which
// resends the Cancels of abandoned calls. Each call's goroutine
// retransmits its own request.
type packetClient struct {
	c       *Client
	io      transport.PacketIO
	server  netip.AddrPort
	session uint64        // random, so a restarted client is a new one to servers
	stop    chan struct{} // closed by close; the canceler returns
	kick    chan struct{} // wakes the canceler for a new Cancel to resend

	mu       sync.Mutex               // guards following
	next     uint64                   // the next call's id
	floor    uint64                   // every call with a lower id is done
	pending  transport.Pending[*Call] // calls awaiting their Response; why the socket closed or retires
	resends  []cancelResend           // Cancels to send again
	srtt     time.Duration
	rttvar   time.Duration
	measured bool
	ticket   []byte        // the server's last ticket (see Packet.MaxAmplification); nil until one comes
	ticketed chan struct{} // closed, and made anew, when a ticket comes
}

// cancelSends is how many times in all a client sends the Cancel of a
// call it gave up on: datagrams get lost, and a lost Cancel leaves the
// handler running to its deadline, but the server never says it got one.
const cancelSends = 4

// cancelResend is a Cancel the canceler sends again at next, then at
// doubling gaps, left more times, while the call's deadline is ahead
// (past it, the server ends the call itself).
type cancelResend struct {
	id       uint64
	next     time.Time
	gap      time.Duration
	left     int
	deadline time.Time
}

// newPacketClient opens a socket for calls to addr.
func newPacketClient(c *Client, network, addr string) (*packetClient, error) {
	ua, err := net.ResolveUDPAddr(network, addr)
	if err != nil {
		return nil, err
	}
	server := ua.AddrPort()
	server = netip.AddrPortFrom(server.Addr().Unmap(), server.Port())
	local := "udp6"
	if server.Addr().Is4() {
		local = "udp4"
	}
	conn, err := net.ListenUDP(local, nil)
	if err != nil {
		return nil, err
	}
	pk := &packetClient{
		c: c, io: transport.NewPacketIO(conn), server: server,
		stop: make(chan struct{}), kick: make(chan struct{}, 1),
		next: 1, floor: 1,
		ticketed: make(chan struct{}),
	}
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	pk.session = binary.BigEndian.Uint64(seed[:]) | 1 // never 0, which means none
	c.wg.Go(pk.readLoop)
	c.wg.Go(pk.cancelLoop)
	return pk, nil
}

// rto returns the retransmission timeout for a new call (RFC 6298).
func (pk *packetClient) rto() time.Duration {
	p := &pk.c.opts.packet
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if !pk.measured {
		return p.InitialRTO
	}
	return min(max(pk.srtt+max(time.Millisecond, 4*pk.rttvar), p.MinRTO), p.MaxRTO)
}

// sample feeds the round trip of a call answered without retransmission
// (Karn's rule) to the estimator.
func (pk *packetClient) sample(rtt time.Duration) {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if !pk.measured {
		pk.srtt, pk.rttvar, pk.measured = rtt, rtt/2, true
		return
	}
	d := pk.srtt - rtt
	if d < 0 {
		d = -d
	}
	pk.rttvar = (3*pk.rttvar + d) / 4
	pk.srtt = (7*pk.srtt + rtt) / 8
}

func (pk *packetClient) send(b []byte) {
	if pk.io.Write(b, transport.PeerKey{AP: pk.server}, nil) == nil {
		pk.c.packetStats.sent.Add(1)
	}
}

// take removes and returns the pending call with id.
func (pk *packetClient) take(id uint64) *Call {
	pk.mu.Lock()
	call, _, retired := pk.pending.Take(id)
	if id == pk.floor {
		for pk.floor < pk.next && !pk.pending.Has(pk.floor) {
			pk.floor++
		}
	}
	pk.mu.Unlock()
	if retired != nil {
		pk.close(retired)
	}
	return call
}

func (pk *packetClient) readLoop() {
	buf := make([]byte, MaxDatagram+1)
	stats := &pk.c.packetStats
	var h wire.Header
	for {
		n, from, _, err := pk.io.Read(buf)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			pk.close(fmt.Errorf("%w: UDP socket to %s: %w", ErrShutdown, pk.server, err))
			return
		}
		stats.received.Add(1)
		if from.AP != pk.server {
			stats.unexpected.Add(1)
			continue
		}
		f, _, err := wire.ParseDatagram(buf[:n])
		if err != nil || f.Type != wire.TypeResponse || wire.ParseHeader(f.Header, &h) != nil {
			stats.malformed.Add(1)
			continue
		}
		if h.Ticket != nil {
			// A Retry: the server holds the answer until the request
			// comes again with the ticket. The calls waiting resend.
			pk.mu.Lock()
			pk.ticket = append([]byte(nil), h.Ticket...)
			close(pk.ticketed)
			pk.ticketed = make(chan struct{})
			pk.mu.Unlock()
			continue
		}
		call := pk.take(f.ID)
		if call == nil {
			stats.stale.Add(1)
			continue
		}
		call.Error = decodeReply(call, &f, &h, nil)
		call.complete()
	}
}

// close closes the socket and fails the calls pending with err.
func (pk *packetClient) close(err error) {
	pk.mu.Lock()
	pending, first := pk.pending.Fail(err)
	if !first {
		pk.mu.Unlock()
		return
	}
	pk.resends = nil
	pk.mu.Unlock()
	close(pk.stop)
	pk.io.PC.Close()
	for _, call := range pending {
		call.Error = &callError{call.ServiceMethod, err}
		call.complete()
	}
}

// closeWhenIdle closes the socket once the calls pending have ended.
func (pk *packetClient) closeWhenIdle(err error) {
	pk.mu.Lock()
	idle := pk.pending.Retire(err)
	pk.mu.Unlock()
	if idle {
		pk.close(err)
	}
}

// packetRoundTrip makes one call over UDP: it sends the request, resends
// it each time the retransmission timeout passes, doubling the timeout,
// and returns when the reply comes or ctx ends. A call with no deadline
// gets Packet.Timeout.
func (c *Client) packetRoundTrip(ctx context.Context, ep *endpoint, call *Call) error {
	pk, err := ep.packet()
	if err != nil {
		return notSent{&callError{call.ServiceMethod, fmt.Errorf("%w: %w", ErrUnavailable, err)}}
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(c.opts.packet.Timeout)
	}
	if call.codec == nil { // else set by its maker, as NewMethod does
		call.codec = c.opts.codec
	}
	// The id is taken and the call made pending together, so that the
	// ack floor never passes a call about to be sent.
	pk.mu.Lock()
	id, floor, ticket, ticketed := pk.next, pk.floor, pk.ticket, pk.ticketed
	if err := pk.pending.Add(id, call); err != nil {
		pk.mu.Unlock()
		return notSent{&callError{call.ServiceMethod, err}}
	}
	pk.next++
	pk.mu.Unlock()

	buf := transport.GetBuf(0)
	defer transport.PutBuf(buf)
	encode := func() ([]byte, error) {
		b := wire.AppendPreface((*buf)[:0], wire.Version)
		auth := c.opts.packetKey
		b, err := encodeRequest(b, wire.PrefaceLen, ctx, deadline, id, call, MaxDatagram, pk.session, floor, ticket, auth, nil)
		if err == nil && auth != nil {
			err = auth.signPacket(b)
		}
		*buf = b
		if err == nil && len(b) > c.opts.packet.MaxDatagram {
			err = fmt.Errorf("%w: the request is %d bytes, over the %d-byte datagram limit; send less, raise Packet.MaxDatagram on both sides (on loopback or in a datacenter), or call over TCP", ErrTooLarge, len(b), c.opts.packet.MaxDatagram)
		}
		return b, err
	}
	b, err := encode()
	if err != nil {
		pk.take(id)
		return &callError{call.ServiceMethod, err}
	}

	start := time.Now()
	rto := pk.rto()
	pk.send(b)
	// One timer serves both the retransmissions and, if ctx has none, the
	// deadline.
	timer := getTimer(min(rto, time.Until(deadline)))
	defer putTimer(timer)
	retransmitted := false
	for {
		select {
		case <-call.signal:
			if !retransmitted {
				pk.sample(time.Since(start))
			}
			return call.Error
		case <-timer.C:
			left := time.Until(deadline)
			if left <= 0 {
				return pk.abandon(id, call, context.DeadlineExceeded, deadline)
			}
			retransmitted = true
			c.packetStats.retransmits.Add(1)
			pk.send(b)
			rto = min(2*rto, c.opts.packet.MaxRTO)
			timer.Reset(min(rto, left))
		case <-ticketed:
			// The server held an answer for a ticket: send the request
			// again at once, with it.
			pk.mu.Lock()
			ticket, ticketed, floor = pk.ticket, pk.ticketed, pk.floor
			pk.mu.Unlock()
			if b, err = encode(); err != nil {
				return pk.abandon(id, call, err, deadline)
			}
			pk.send(b)
		case <-ctx.Done():
			return pk.abandon(id, call, ctx.Err(), deadline)
		}
	}
}

// abandon gives up on call, which ended with err, and tells the server
// if the caller canceled it: at once, and again a few times until the
// call's deadline, in case the Cancel is lost.
func (pk *packetClient) abandon(id uint64, call *Call, err error, deadline time.Time) error {
	if pk.take(id) == nil {
		<-call.signal // the reply is being decoded right now
		return call.Error
	}
	if errors.Is(err, context.Canceled) {
		pk.sendCancel(id)
		pk.resendCancel(id, deadline)
	}
	return &callError{call.ServiceMethod, err}
}

// sendCancel sends the Cancel of call id. It carries the session, since
// the server knows calls by address, session and id.
func (pk *packetClient) sendCancel(id uint64) {
	var tmp [wire.DatagramOverhead + 2 + binary.MaxVarintLen64 + 128]byte
	b := wire.BeginDatagram(tmp[:0], wire.TypeCancel, id)
	b = wire.AppendUvarint(b, wire.KeySession, pk.session)
	auth := pk.c.opts.packetKey
	if auth != nil {
		b = auth.appendAuth(b, time.Now())
	}
	if wire.EndHeader(b, wire.PrefaceLen) != nil || wire.EndFrame(b, wire.PrefaceLen, MaxDatagram) != nil {
		return
	}
	if auth != nil && auth.signPacket(b) != nil {
		return
	}
	pk.send(b)
}

// resendCancel has the canceler send the Cancel of call id again, after
// the retransmission timeout and then at doubling gaps, until it has been
// sent cancelSends times or the call's deadline comes.
func (pk *packetClient) resendCancel(id uint64, deadline time.Time) {
	gap := pk.rto()
	next := time.Now().Add(gap)
	if !next.Before(deadline) {
		return
	}
	pk.mu.Lock()
	if pk.pending.Err() != nil {
		pk.mu.Unlock()
		return
	}
	pk.resends = append(pk.resends, cancelResend{id: id, next: next, gap: gap, left: cancelSends - 1, deadline: deadline})
	pk.mu.Unlock()
	select {
	case pk.kick <- struct{}{}:
	default: // the canceler is already due to look
	}
}

// cancelLoop is the canceler: it sends the Cancels in pk.resends as they
// fall due, until the socket closes.
func (pk *packetClient) cancelLoop() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var due []uint64
	for {
		select {
		case <-pk.stop:
			return
		case <-pk.kick:
		case <-timer.C:
		}
		now := time.Now()
		var wake time.Time
		due = due[:0]
		pk.mu.Lock()
		kept := pk.resends[:0]
		for _, r := range pk.resends {
			if !now.Before(r.next) {
				due = append(due, r.id)
				r.left--
				r.gap = min(2*r.gap, pk.c.opts.packet.MaxRTO)
				r.next = now.Add(r.gap)
			}
			if r.left == 0 || !r.next.Before(r.deadline) {
				continue // sent enough, or the server's deadline ends the call
			}
			kept = append(kept, r)
			if wake.IsZero() || r.next.Before(wake) {
				wake = r.next
			}
		}
		pk.resends = kept
		pk.mu.Unlock()
		for _, id := range due {
			pk.sendCancel(id)
		}
		if !wake.IsZero() {
			timer.Reset(wake.Sub(now))
		}
	}
}

var timerPool sync.Pool

// getTimer returns a running timer that fires after d.
func getTimer(d time.Duration) *time.Timer {
	if t, ok := timerPool.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// putTimer stops t and keeps it for reuse. Since Go 1.23 a stopped timer's
// channel holds no stale value, so Reset after Get is safe.
func putTimer(t *time.Timer) {
	t.Stop()
	timerPool.Put(t)
}

// PacketStats reports what the client's UDP sockets saw.
func (c *Client) PacketStats() PacketStats {
	return c.packetStats.snapshot()
}

package transport

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/internal/wire"
)

// PacketClient is a client's UDP socket to one server: any number of
// calls share it, each its own datagrams. It owns two goroutines: the
// reader, which hands each reply to its call's ClientHandler.Reply, and the
// canceler, which resends the Cancels of abandoned calls. Each call's
// goroutine sends its own request, and retransmits it (RoundTrip).
type PacketClient[C any] struct {
	h       ClientHandler[C]
	cfg     PacketConfig
	io      PacketIO
	server  netip.AddrPort
	session uint64        // random, so a restarted client is a new one to servers
	stop    chan struct{} // closed by fail; the canceler returns
	dead    atomic.Bool   // it closed: it takes no more calls
	kick    chan struct{} // wakes the canceler for a new Cancel to resend

	mu       sync.Mutex     // guards following
	next     uint64         // the next call's id
	floor    uint64         // every call with a lower id is done
	pending  Pending[C]     // calls awaiting their Response; why the socket closed or retires
	resends  []cancelResend // Cancels to send again
	srtt     time.Duration
	rttvar   time.Duration
	measured bool
	ticket   []byte        // the server's last ticket (see kiev.Packet.MaxAmplification); nil until one comes
	ticketed chan struct{} // closed, and made anew, when a ticket comes
}

// PacketConfig is how a PacketClient behaves.
type PacketConfig struct {
	// InitialRTO is the retransmission timeout before any round trip is
	// measured; then it follows them (RFC 6298), within MinRTO and
	// MaxRTO, and doubles at each retransmission of a call.
	InitialRTO, MinRTO, MaxRTO time.Duration
	// MaxDatagram is the largest datagram the reader takes.
	MaxDatagram int
	// Limit is the largest request datagram the socket sends
	// (Packet.MaxDatagram); a larger request fails with ErrTooLarge.
	Limit int
	// Key, if not nil, signs the socket's requests and Cancels
	// (WithPacketKey).
	Key *PacketKey
	// Counters are where the socket counts what it saw.
	Counters PacketCounters
	// Goroutines counts the socket's two goroutines; the client waits on
	// it as it closes.
	Goroutines *sync.WaitGroup
}

// PacketCounters are the counters, its owner's, a PacketClient adds to.
type PacketCounters struct {
	Sent        *atomic.Int64 // datagrams sent, retransmissions included
	Received    *atomic.Int64 // datagrams received, dropped ones included
	Retransmits *atomic.Int64 // requests sent again after their timeout
	Unexpected  *atomic.Int64 // datagrams from an address other than the server's
	Stale       *atomic.Int64 // replies to no call in flight
	Malformed   *atomic.Int64 // datagrams that are not a Response
}

// Stamp is what the socket puts in a request datagram: the call's id,
// the socket's session and ack floor, and the ticket the server gave it,
// if any.
type Stamp struct {
	ID, Session, Floor uint64
	Ticket             []byte
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

// DialPacket opens a socket for calls to addr, on network (udp, udp4 or
// udp6), and starts its goroutines.
func DialPacket[C any](network, addr string, cfg PacketConfig, h ClientHandler[C]) (*PacketClient[C], error) {
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
	pc := newPacketClient(cfg, h)
	pc.io, pc.server = NewPacketIO(conn), server
	cfg.Goroutines.Go(pc.readLoop)
	cfg.Goroutines.Go(pc.cancelLoop)
	return pc, nil
}

// newPacketClient makes a socket's state, without the socket.
func newPacketClient[C any](cfg PacketConfig, h ClientHandler[C]) *PacketClient[C] {
	pc := &PacketClient[C]{
		h: h, cfg: cfg,
		stop: make(chan struct{}), kick: make(chan struct{}, 1),
		next: 1, floor: 1,
		ticketed: make(chan struct{}),
	}
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	pc.session = binary.BigEndian.Uint64(seed[:]) | 1 // never 0, which means none
	return pc
}

// Dead reports whether the socket closed: it takes no more calls.
func (pc *PacketClient[C]) Dead() bool { return pc.dead.Load() }

// Err is why the socket closed, or nil.
func (pc *PacketClient[C]) Err() error {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.pending.Err()
}

// LocalAddr is the socket's own address.
func (pc *PacketClient[C]) LocalAddr() net.Addr { return pc.io.PC.LocalAddr() }

// rto returns the retransmission timeout for a new call (RFC 6298).
func (pc *PacketClient[C]) rto() time.Duration {
	p := &pc.cfg
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if !pc.measured {
		return p.InitialRTO
	}
	return min(max(pc.srtt+max(time.Millisecond, 4*pc.rttvar), p.MinRTO), p.MaxRTO)
}

// sample feeds the round trip of a call answered without retransmission
// (Karn's rule) to the estimator.
func (pc *PacketClient[C]) sample(rtt time.Duration) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if !pc.measured {
		pc.srtt, pc.rttvar, pc.measured = rtt, rtt/2, true
		return
	}
	d := pc.srtt - rtt
	if d < 0 {
		d = -d
	}
	pc.rttvar = (3*pc.rttvar + d) / 4
	pc.srtt = (7*pc.srtt + rtt) / 8
}

func (pc *PacketClient[C]) send(b []byte) {
	if pc.io.Write(b, PeerKey{AP: pc.server}, nil) == nil {
		pc.cfg.Counters.Sent.Add(1)
	}
}

// Add makes call pending, under the id it returns, for RoundTrip to send:
// the id is taken and the call made pending together, so that the ack
// floor never passes a call about to be sent. It fails, the call not
// added, with why the socket takes no call (it closed, or retires).
func (pc *PacketClient[C]) Add(call C) (id uint64, err error) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	id = pc.next
	if err := pc.pending.Add(id, call); err != nil {
		return 0, err
	}
	pc.next++
	return id, nil
}

// take removes and returns the pending call with id, if it is there.
func (pc *PacketClient[C]) take(id uint64) (call C, ok bool) {
	pc.mu.Lock()
	call, ok, retired := pc.pending.Take(id)
	if id == pc.floor {
		for pc.floor < pc.next && !pc.pending.Has(pc.floor) {
			pc.floor++
		}
	}
	pc.mu.Unlock()
	if retired != nil {
		pc.fail(retired)
	}
	return call, ok
}

// RoundTrip makes the call of id, which Add made pending, over the
// socket: it sends the request rq, built into a datagram here and signed
// with the socket's key, resends it each time the retransmission
// timeout passes, doubling the timeout, and again at once with a ticket
// when the server asks for one. It returns nil once done yields the call,
// which the handler completed (with its reply, or as the socket failed);
// or, the call no longer pending, the error that ended it first: the
// request's (its args do not encode, or it is too large), ctx's, or
// context.DeadlineExceeded once deadline passes.
func (pc *PacketClient[C]) RoundTrip(ctx context.Context, deadline time.Time, id uint64, rq *Request, done <-chan C) error {
	buf := GetBuf(0)
	defer PutBuf(buf)
	pc.mu.Lock()
	s := Stamp{ID: id, Session: pc.session, Floor: pc.floor, Ticket: pc.ticket}
	ticketed := pc.ticketed
	pc.mu.Unlock()
	b, err := AppendDatagram((*buf)[:0], rq, &s, pc.cfg.Key, pc.cfg.MaxDatagram, pc.cfg.Limit)
	*buf = b
	if err != nil {
		pc.take(id)
		return err
	}

	start := time.Now()
	rto := pc.rto()
	pc.send(b)
	// One timer serves both the retransmissions and, if ctx has none, the
	// deadline.
	timer := getTimer(min(rto, time.Until(deadline)))
	defer putTimer(timer)
	retransmitted := false
	for {
		select {
		case <-done:
			if !retransmitted {
				pc.sample(time.Since(start))
			}
			return nil
		case <-timer.C:
			left := time.Until(deadline)
			if left <= 0 {
				return pc.abandon(id, done, context.DeadlineExceeded, deadline)
			}
			retransmitted = true
			pc.cfg.Counters.Retransmits.Add(1)
			pc.send(b)
			rto = min(2*rto, pc.cfg.MaxRTO)
			timer.Reset(min(rto, left))
		case <-ticketed:
			// The server held an answer for a ticket: send the request
			// again at once, with it.
			pc.mu.Lock()
			s.Ticket, s.Floor, ticketed = pc.ticket, pc.floor, pc.ticketed
			pc.mu.Unlock()
			b, err = AppendDatagram((*buf)[:0], rq, &s, pc.cfg.Key, pc.cfg.MaxDatagram, pc.cfg.Limit)
			*buf = b
			if err != nil {
				return pc.abandon(id, done, err, deadline)
			}
			pc.send(b)
		case <-ctx.Done():
			return pc.abandon(id, done, ctx.Err(), deadline)
		}
	}
}

// abandon gives up on the call of id, which ended with err, and tells the
// server if the caller canceled it: at once, and again a few times until
// the call's deadline, in case the Cancel is lost. It returns nil if the
// call was taken first, once done yields it, and err otherwise.
func (pc *PacketClient[C]) abandon(id uint64, done <-chan C, err error, deadline time.Time) error {
	if _, ok := pc.take(id); !ok {
		<-done // the reply is being decoded right now
		return nil
	}
	if errors.Is(err, context.Canceled) {
		pc.sendCancel(id)
		pc.resendCancel(id, deadline)
	}
	return err
}

// sendCancel sends the Cancel of call id.
func (pc *PacketClient[C]) sendCancel(id uint64) {
	if b := CancelDatagram(id, pc.session, pc.cfg.Key, pc.cfg.MaxDatagram); b != nil {
		pc.send(b)
	}
}

// resendCancel has the canceler send the Cancel of call id again, after
// the retransmission timeout and then at doubling gaps, until it has been
// sent cancelSends times or the call's deadline comes.
func (pc *PacketClient[C]) resendCancel(id uint64, deadline time.Time) {
	gap := pc.rto()
	next := time.Now().Add(gap)
	if !next.Before(deadline) {
		return
	}
	pc.mu.Lock()
	if pc.pending.Err() != nil {
		pc.mu.Unlock()
		return
	}
	pc.resends = append(pc.resends, cancelResend{id: id, next: next, gap: gap, left: cancelSends - 1, deadline: deadline})
	pc.mu.Unlock()
	select {
	case pc.kick <- struct{}{}:
	default: // the canceler is already due to look
	}
}

// cancelLoop is the canceler: it sends the Cancels in pc.resends as they
// fall due, until the socket closes.
func (pc *PacketClient[C]) cancelLoop() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var due []uint64
	for {
		select {
		case <-pc.stop:
			return
		case <-pc.kick:
		case <-timer.C:
		}
		now := time.Now()
		var wake time.Time
		due = due[:0]
		pc.mu.Lock()
		kept := pc.resends[:0]
		for _, r := range pc.resends {
			if !now.Before(r.next) {
				due = append(due, r.id)
				r.left--
				r.gap = min(2*r.gap, pc.cfg.MaxRTO)
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
		pc.resends = kept
		pc.mu.Unlock()
		for _, id := range due {
			pc.sendCancel(id)
		}
		if !wake.IsZero() {
			timer.Reset(wake.Sub(now))
		}
	}
}

func (pc *PacketClient[C]) readLoop() {
	buf := make([]byte, pc.cfg.MaxDatagram+1)
	n := &pc.cfg.Counters
	var f wire.Frame // with h and resp, lives across datagrams: see ClientConn.readLoop
	var h wire.Header
	var resp Response
	for {
		size, from, _, err := pc.io.Read(buf)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			pc.fail(fmt.Errorf("UDP socket to %s: %w", pc.server, err))
			return
		}
		n.Received.Add(1)
		if from.AP != pc.server {
			n.Unexpected.Add(1)
			continue
		}
		f, _, err = wire.ParseDatagram(buf[:size])
		if err != nil || f.Type != wire.TypeResponse || wire.ParseHeader(f.Header, &h) != nil {
			n.Malformed.Add(1)
			continue
		}
		if h.Ticket != nil {
			// A Retry: the server holds the answer until the request
			// comes again with the ticket. The calls waiting resend.
			pc.mu.Lock()
			pc.ticket = append([]byte(nil), h.Ticket...)
			close(pc.ticketed)
			pc.ticketed = make(chan struct{})
			pc.mu.Unlock()
			continue
		}
		call, ok := pc.take(f.ID)
		if !ok {
			n.Stale.Add(1)
			continue
		}
		resp.read(&f, &h)
		pc.h.Reply(call, &resp)
	}
}

// Close closes the socket at once; its calls fail with err.
func (pc *PacketClient[C]) Close(err error) { pc.fail(err) }

// CloseWhenIdle closes the socket with err once the calls pending have
// ended; new calls fail at once with err.
func (pc *PacketClient[C]) CloseWhenIdle(err error) {
	pc.mu.Lock()
	idle := pc.pending.Retire(err)
	pc.mu.Unlock()
	if idle {
		pc.fail(err)
	}
}

// fail closes the socket once, of cause, and hands the calls pending to
// ClientHandler.Lost.
func (pc *PacketClient[C]) fail(cause error) {
	err := pc.h.Failure(cause, false)
	pc.mu.Lock()
	pending, first := pc.pending.Fail(err)
	if !first {
		pc.mu.Unlock()
		return
	}
	pc.resends = nil
	pc.dead.Store(true)
	pc.mu.Unlock()
	close(pc.stop)
	pc.io.PC.Close()
	pc.h.Lost(Loss[C]{Cause: cause, Err: err, Calls: pending})
}

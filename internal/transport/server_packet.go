package transport

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/codes"
	"github.com/kievrpc/kiev/internal/wire"
	"github.com/kievrpc/kiev/shed"
)

// maxPayload is the largest UDP payload over IPv4 (kiev.MaxDatagram): the
// largest datagram a socket reads, and an error answer's bound before its
// amplification bound.
const maxPayload = 65507

// PacketServerConfig is what a server's packet sockets share: its
// settings (kiev.Packet's, filled), and the ServerHandler they hand their calls
// to. It must not change once a socket uses it.
type PacketServerConfig struct {
	Handler ServerHandler

	// MaxDatagram is the largest reply datagram (Packet.MaxDatagram); a
	// reply over it fails, and the call answers with an error instead.
	MaxDatagram int
	// DedupEntries bounds the calls the duplicate cache holds;
	// DedupLinger is how long a call is remembered after it is done and
	// after its last datagram arrived.
	DedupEntries int
	DedupLinger  time.Duration
	// SessionLinger is how long a session's answered window outlives its
	// last datagram, unless more than DedupEntries sessions are kept.
	SessionLinger time.Duration
	// MaxAmplification is how many times the bytes of its request an
	// answer to an address not shown to receive may take; not above 0:
	// no bound.
	MaxAmplification int
	// MaxResends bounds the times the answer of one call is sent again
	// (kiev.MaxReplyResends).
	MaxResends int
	// MaxCalls bounds the calls unanswered from one client address
	// (WithMaxConcurrentCalls); 0: no bound.
	MaxCalls int
	// Keys, if not nil, are the keys the signatures of datagrams are
	// checked with (WithPacketKeys): a datagram without a good one is
	// refused.
	Keys *PacketKeys
	// Unserved, if not nil, is the start of the names of methods not
	// served over datagrams: a call of one is refused with codes.NotFound
	// and UnservedMsg, before it is made (kiev.Reflection, unless
	// Packet.ServeReflection).
	Unserved    []byte
	UnservedMsg string
	// Counters is where the sockets count what they saw.
	Counters *PacketServerCounters
}

// PacketServerCounters count what a server's packet sockets saw (the
// server side of kiev.PacketStats). They are updated with atomics.
type PacketServerCounters struct {
	Sent     atomic.Int64 // datagrams sent, answers sent again included
	Received atomic.Int64 // datagrams received, dropped ones included
	// Duplicates counts retransmitted requests: answered from the cache,
	// ignored while the call runs, dropped below the ack floor, or
	// answered Answered once forgotten.
	Duplicates atomic.Int64
	CacheFull  atomic.Int64 // requests refused because the duplicate cache was full
	Retries    atomic.Int64 // answers held for an address not yet shown to receive
	// Dropped counts requests refused unsigned, unserved, while draining,
	// or at MaxCalls.
	Dropped            atomic.Int64
	SessionlessCancels atomic.Int64 // Cancel datagrams without a Session, which name no call
	// ForgottenEarly counts idle sessions forgotten before SessionLinger,
	// because more than DedupEntries sessions were kept.
	ForgottenEarly atomic.Int64
	Malformed      atomic.Int64 // datagrams that are not a Request or a Cancel
}

// PacketServer serves one packet socket. It owns two goroutines: the
// reader (the caller of Serve) and the sweeper of the duplicate cache;
// and while it drains, one that closes the socket once its calls are
// done. Calls run on the scheduler's workers. Its methods are safe for
// concurrent use.
type PacketServer struct {
	cfg    *PacketServerConfig
	io     PacketIO
	base   context.Context // parent of every handler ctx
	secret [32]byte        // keys the tickets (see ticket); set by NewPacketServer, then only read

	mu       sync.Mutex // guards the fields below
	peers    map[sessionKey]*peerState
	entries  int             // calls remembered, over all peers
	unproven int             // of those, calls of addresses not shown to receive
	running  int             // calls not done
	byPeer   map[PeerKey]int // calls not answered, by client address (MaxCalls)
	draining bool            // refuse new calls; close once running is 0
	closed   bool
	idle     *sync.Cond // signalled when running reaches 0

	stopped   chan struct{} // closed by close
	closeOnce sync.Once
}

// sessionKey identifies a client socket: its address and the random
// session id it sends (0 for clients that send none).
type sessionKey struct {
	peer    PeerKey
	session uint64
}

// peerState is what the server remembers of one client session. Its
// fields are guarded by its PacketServer's mu.
type peerState struct {
	floor uint64                 // the client has seen the end of every call below this id
	calls map[uint64]*packetCall // calls at or above floor, by id; nil if none
	done  answered               // calls answered and forgotten: never run again
	last  time.Time              // when the last datagram of the session came
	keep  time.Time              // a signed session's floor is kept until its last request goes stale
}

// packetCall is one call in the duplicate cache, and its Sink. The fields
// before answer are set before the call is made, and only read after;
// answer and those after it are guarded by its PacketServer's mu.
type packetCall struct {
	ps      *PacketServer
	st      *peerState
	id      uint64
	peer    PeerKey
	addr    net.Addr  // the peer, for sockets other than UDP
	session uint64    // the client's session, for a Retry's ticket
	allow   int       // bytes the reply may take to an address not shown to receive; -1: any
	keep    time.Time // a signed call is remembered until its request goes stale

	answer  []byte     // the answer datagram, once sent
	code    codes.Code // the answer's error code, codes.OK for a reply
	counted bool       // in ps.byPeer: neither answered nor done
	resends int        // times the reply was sent again (MaxResends)
	expires time.Time  // when it may be forgotten, once done; zero while running
	sc      Call       // the call, while it is not done
	gone    bool       // abandoned while it was opened: cancel it once it is
}

// signer is what a datagram's signature says (Keys): the key its
// session is known by, the key id and until when it is fresh, or why it
// is refused.
type signer struct {
	key   sessionKey // by client address, or for a signed datagram by key id
	id    string     // the key id; "" if unsigned
	until time.Time  // when the signed datagram goes stale
	err   error
}

// verify checks the signature of datagram b, whose header is h.
func (a *signer) verify(ks *PacketKeys, b []byte, h *wire.Header, now time.Time) {
	a.id, a.until, a.err = ks.verify(b, h, now)
	if a.err == nil {
		// Known by the key, not the address: a replay from elsewhere
		// finds the call it repeats.
		a.key.peer = PeerKey{Other: "\x00key " + a.id}
	}
}

// NewPacketServer returns the server of the packet socket pc, not yet
// serving; its calls' contexts take their values from base.
func NewPacketServer(cfg *PacketServerConfig, pc net.PacketConn, base context.Context) *PacketServer {
	ps := &PacketServer{
		cfg:     cfg,
		io:      NewPacketIO(pc),
		base:    base,
		peers:   make(map[sessionKey]*peerState),
		byPeer:  make(map[PeerKey]int),
		stopped: make(chan struct{}),
	}
	_, _ = rand.Read(ps.secret[:]) // never fails (crypto/rand)
	return ps
}

// Serve reads datagrams until the socket fails or is closed, then closes
// it and waits for the sweeper. It returns the socket's error, or nil if
// Drain or Abort closed it.
func (ps *PacketServer) Serve() error {
	var sweeper sync.WaitGroup
	sweeper.Go(ps.sweep)
	err := ps.readLoop()
	ps.close()
	sweeper.Wait()
	return err
}

// Cached reports the calls the duplicate cache holds.
func (ps *PacketServer) Cached() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.entries
}

func (ps *PacketServer) readLoop() error {
	buf := make([]byte, maxPayload+1)
	var (
		h  wire.Header
		hd Head // here, not in request: Open's pointer to it escapes
	)
	stats := ps.cfg.Counters
	for {
		n, peer, addr, err := ps.io.Read(buf)
		if err != nil {
			select {
			case <-ps.stopped:
				return nil
			default:
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return err
		}
		stats.Received.Add(1)
		f, _, err := wire.ParseDatagram(buf[:n])
		if err != nil || f.Type != wire.TypeRequest && f.Type != wire.TypeCancel {
			stats.Malformed.Add(1)
			continue
		}
		if wire.ParseHeader(f.Header, &h) != nil {
			stats.Malformed.Add(1)
			continue
		}
		a := signer{key: sessionKey{peer, h.Session}}
		if ps.cfg.Keys != nil {
			a.verify(ps.cfg.Keys, buf[:n], &h, time.Now())
		}
		if f.Type == wire.TypeCancel {
			if h.Session == 0 {
				// Older kiev clients sent Cancel without the Session
				// every call is known by: it names no call.
				stats.SessionlessCancels.Add(1)
				continue
			}
			if a.err == nil {
				ps.cancel(a.key, f.ID)
			}
			continue
		}
		ps.request(&f, &h, &hd, peer, addr, n, &a)
	}
}

// request starts a call, or answers a retransmission from the cache; hd
// is where it reads the call's Head.
func (ps *PacketServer) request(f *wire.Frame, h *wire.Header, hd *Head, peer PeerKey, addr net.Addr, n int, a *signer) {
	stats := ps.cfg.Counters
	now := time.Now()
	linger := ps.cfg.DedupLinger
	proven := h.Ticket != nil && ps.validTicket(h.Ticket, peer, h.Session, now)
	allow := -1 // what the answer may take: see MaxAmplification
	if f := ps.cfg.MaxAmplification; f > 0 && !proven {
		allow = f * n
	}
	if a.err != nil {
		stats.Dropped.Add(1)
		ps.replyError(f.ID, peer, addr, codes.Unauthenticated, a.err.Error(), allow, h.Session)
		return
	}
	ps.mu.Lock()
	st := ps.session(a.key, now, h.AckFloor)
	if a.until.After(st.keep) {
		st.keep = a.until
	}
	if f.ID < st.floor {
		// A retransmission, delayed in the network, of a call whose end
		// the client has seen: never run it again.
		ps.mu.Unlock()
		stats.Duplicates.Add(1)
		return
	}
	pc := st.calls[f.ID]
	if pc == nil && st.done.has(f.ID) {
		// A call answered and forgotten after the linger: the client
		// waits for it only if it lost every datagram since. Never run
		// it again; say that its reply is gone.
		ps.mu.Unlock()
		stats.Duplicates.Add(1)
		ps.replyError(f.ID, peer, addr, codes.Answered, answeredMsg, allow, h.Session)
		return
	}
	if pc != nil {
		reply, code := pc.answer, pc.code
		if !pc.expires.IsZero() {
			// The client has not seen the reply: keep it while the
			// client keeps asking, and a signed call while it is fresh.
			pc.expires = now.Add(linger)
			if pc.keep.After(pc.expires) {
				pc.expires = pc.keep
			}
		}
		if reply != nil {
			if pc.resends >= ps.cfg.MaxResends {
				reply = nil
			} else {
				pc.resends++
			}
		}
		ps.mu.Unlock()
		stats.Duplicates.Add(1)
		if reply != nil {
			ps.sendWithin(reply, code, allow, f.ID, h.Session, peer, addr)
		}
		return
	}
	if ps.cfg.Unserved != nil && bytes.HasPrefix(h.Method, ps.cfg.Unserved) {
		ps.mu.Unlock()
		stats.Dropped.Add(1)
		ps.replyError(f.ID, peer, addr, codes.NotFound, ps.cfg.UnservedMsg, allow, h.Session)
		return
	}
	switch {
	case ps.draining || ps.closed:
		ps.mu.Unlock()
		stats.Dropped.Add(1)
		ps.replyError(f.ID, peer, addr, codes.Shutdown, "kiev: server is shutting down; retry on another server", allow, h.Session)
		return
	case ps.entries >= ps.cfg.DedupEntries:
		ps.mu.Unlock()
		stats.CacheFull.Add(1)
		ps.replyError(f.ID, peer, addr, codes.Overloaded, "kiev: the server's duplicate-request cache is full; retry later or on another server", allow, h.Session)
		return
	case allow >= 0 && 2*ps.unproven >= ps.cfg.DedupEntries:
		// Calls of addresses not shown to receive, which a flood with
		// spoofed sources makes, take at most half the cache: the rest
		// is kept for clients that showed they receive. A client that
		// did not yet gets a ticket.
		ps.mu.Unlock()
		stats.CacheFull.Add(1)
		ps.sendRetry(f.ID, h.Session, peer, addr, allow, codes.Overloaded)
		return
	}
	if ps.cfg.MaxCalls > 0 && ps.byPeer[peer] >= ps.cfg.MaxCalls {
		// A client address is a UDP client's connection: its sessions
		// are the client's to choose. Refused before the call is opened.
		ps.mu.Unlock()
		stats.Dropped.Add(1)
		code, msg := ps.cfg.Handler.Refuse(h.Method, "from this address")
		ps.replyError(f.ID, peer, addr, code, msg, allow, h.Session)
		return
	}
	if h.Compression != 0 {
		ps.mu.Unlock()
		ps.replyError(f.ID, peer, addr, codes.BadRequest, ErrCompressedDatagram.Error(), allow, h.Session)
		return
	}
	// The call's place is taken under mu, so that its retransmissions
	// find it; it is opened outside, as nothing calls up under a lock.
	pc = &packetCall{ps: ps, st: st, id: f.ID, peer: peer, addr: addr, session: h.Session, allow: allow, keep: a.until}
	if st.calls == nil {
		st.calls = make(map[uint64]*packetCall)
	}
	st.calls[f.ID] = pc
	ps.entries++
	if !pc.proven() {
		ps.unproven++
	}
	ps.running++
	ps.byPeer[peer]++
	pc.counted = true
	ps.mu.Unlock()
	if addr == nil {
		addr = peer.Addr()
	}
	hd.Read(f, h)
	hd.Origin = Origin{Addr: addr, KeyID: a.id}
	sc, code, msg := ps.cfg.Handler.Open(hd, ps.base, pc)
	if sc == nil {
		pc.unopen()
		ps.replyError(f.ID, peer, pc.addr, code, msg, allow, h.Session)
		return
	}
	ps.mu.Lock()
	gone := pc.gone
	if !gone {
		pc.sc = sc
	}
	ps.mu.Unlock()
	if gone {
		// Abandoned while it was opened: below the session's new ack
		// floor, canceled, or the socket aborted.
		sc.State().CallerGone.Store(true)
		sc.Cancel(context.Canceled)
	}
	sc.Submit(ps.base)
}

// session returns the state of a client session, made if new, after
// forgetting the calls below its new ack floor. The client waits for none
// of those calls, so the ones still running are canceled, which ends the
// handler of a call whose Cancel was lost as soon as the client's next
// request comes. REQUIRES ps.mu is held.
func (ps *PacketServer) session(k sessionKey, now time.Time, floor uint64) *peerState {
	st := ps.peers[k]
	if st == nil {
		st = &peerState{}
		ps.peers[k] = st
	}
	st.last = now
	if k.session != 0 && floor > st.floor {
		st.floor = floor
		st.done.advance(floor)
		for id, pc := range st.calls {
			if id >= floor {
				continue
			}
			if pc.sc != nil {
				// Cancel takes only the call's own lock, so it may
				// run under ps.mu. The call finishes as any canceled
				// call does; its retransmissions are known stale by
				// the floor.
				pc.sc.State().CallerGone.Store(true)
				pc.sc.Cancel(context.Canceled)
			} else {
				pc.gone = true // being opened
			}
			ps.forget(st, id)
		}
	}
	return st
}

// forget drops a call from the cache. REQUIRES ps.mu is held.
func (ps *PacketServer) forget(st *peerState, id uint64) {
	if pc := st.calls[id]; pc != nil && !pc.proven() {
		ps.unproven--
	}
	delete(st.calls, id)
	ps.entries--
}

// cancel cancels the call a client gave up on.
func (ps *PacketServer) cancel(k sessionKey, id uint64) {
	var sc Call
	ps.mu.Lock()
	if st := ps.peers[k]; st != nil {
		if pc := st.calls[id]; pc != nil {
			sc = pc.sc
			pc.gone = sc == nil && pc.expires.IsZero() // being opened
		}
	}
	ps.mu.Unlock()
	if sc != nil {
		sc.State().CallerGone.Store(true)
		sc.Cancel(context.Canceled)
	}
}

// replyError answers a request with an error, within allow bytes (-1:
// any), or else with a Retry.
func (ps *PacketServer) replyError(id uint64, peer PeerKey, addr net.Addr, code codes.Code, msg string, allow int, session uint64) {
	buf := GetBuf(0)
	defer PutBuf(buf)
	b := AppendError(wire.AppendPreface((*buf)[:0], wire.Version), id, code, msg, false)
	*buf = b
	if wire.EndFrame(b, wire.PrefaceLen, maxPayload) == nil {
		ps.sendWithin(b, code, allow, id, session, peer, addr)
	}
}

func (ps *PacketServer) send(b []byte, peer PeerKey, addr net.Addr) {
	if ps.io.Write(b, peer, addr) == nil {
		ps.cfg.Counters.Sent.Add(1)
	}
}

// proven reports whether the call's address has shown it receives (or
// the server bounds no answer): its answer may take any size.
func (pc *packetCall) proven() bool { return pc.allow < 0 }

// Reply, Fail, Done and Backlogged make a packetCall the Sink of its
// call.
func (pc *packetCall) Reply(_ Call, cd codec.Codec, v any) error {
	buf := GetBuf(0)
	defer PutBuf(buf)
	b, err := AppendResponse(wire.AppendPreface((*buf)[:0], wire.Version), pc.id, cd, v)
	*buf = b
	if err != nil {
		return err
	}
	return pc.send(b, codes.OK)
}

func (pc *packetCall) Fail(_ Call, code codes.Code, msg string, limited bool) error {
	buf := GetBuf(0)
	defer PutBuf(buf)
	b := AppendError(wire.AppendPreface((*buf)[:0], wire.Version), pc.id, code, msg, limited)
	*buf = b
	return pc.send(b, code)
}

// send sends the datagram b, a Response after the preface of error code
// code (codes.OK for a reply), and keeps it to answer the call's
// retransmissions.
func (pc *packetCall) send(b []byte, code codes.Code) error {
	limit := pc.ps.cfg.MaxDatagram
	if err := wire.EndFrame(b, wire.PrefaceLen, limit-wire.PrefaceLen-4); err != nil {
		return fmt.Errorf("%d bytes, over the %d-byte datagram limit; return less, raise Packet.MaxDatagram on both sides, or call over TCP", len(b), limit)
	}
	reply := append([]byte(nil), b...)
	pc.ps.mu.Lock()
	pc.answer, pc.code = reply, code
	pc.uncount()
	pc.ps.mu.Unlock()
	pc.ps.sendWithin(reply, code, pc.allow, pc.id, pc.session, pc.peer, pc.addr)
	return nil
}

// uncount takes an answered (or done) call out of its address's count
// against MaxCalls: the client, which may have its answer, may send the
// next already. REQUIRES ps.mu is held.
func (pc *packetCall) uncount() {
	if !pc.counted {
		return
	}
	pc.counted = false
	ps := pc.ps
	if ps.byPeer[pc.peer]--; ps.byPeer[pc.peer] == 0 {
		delete(ps.byPeer, pc.peer)
	}
}

// unopen gives up the place of a call that could not be opened: its
// retransmissions are answered as it was, by opening them again.
func (pc *packetCall) unopen() {
	ps := pc.ps
	ps.mu.Lock()
	if pc.st.calls[pc.id] == pc {
		ps.forget(pc.st, pc.id)
	}
	ps.running--
	pc.uncount()
	if ps.running == 0 && ps.idle != nil {
		ps.idle.Broadcast()
	}
	ps.mu.Unlock()
}

// Backlogged: a datagram reply is sent at once or lost, never queued.
func (pc *packetCall) Backlogged() (int, bool) { return 0, false }

// Stream: a datagram opens no stream.
func (pc *packetCall) Stream(Call) HandlerStream { return nil }

// Flow: a socket's calls are not shared fairly by address.
func (pc *packetCall) Flow() *shed.Flow { return nil }

func (pc *packetCall) Done(Call) {
	ps := pc.ps
	expires := time.Now().Add(ps.cfg.DedupLinger)
	if pc.keep.After(expires) {
		expires = pc.keep
	}
	ps.mu.Lock()
	pc.expires = expires
	pc.sc = nil
	ps.running--
	pc.uncount() // if not answered: the caller is gone, or its deadline passed
	if ps.running == 0 && ps.idle != nil {
		ps.idle.Broadcast()
	}
	ps.mu.Unlock()
}

// answeredMsg is the answer to a request of a call answered and
// forgotten (codes.Answered).
const answeredMsg = "kiev: this call was answered already, and its reply is no longer kept (Packet.DedupLinger); it did not run again"

// sweep forgets done calls past their time, marking them answered in
// their session's window, and sessions past theirs, until the socket
// closes.
func (ps *PacketServer) sweep() {
	tick := time.NewTicker(min(ps.cfg.DedupLinger/4, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ps.stopped:
			return
		case now := <-tick.C:
			ps.mu.Lock()
			ps.sweepAt(now)
			ps.mu.Unlock()
		}
	}
}

// sweepAt forgets what is past its time at now. A session with no call
// left is kept SessionLinger after its last datagram, for its answered
// window, or DedupLinger while more than DedupEntries sessions are kept.
// REQUIRES ps.mu is held.
func (ps *PacketServer) sweepAt(now time.Time) {
	for k, st := range ps.peers {
		for id, pc := range st.calls {
			if !pc.expires.IsZero() && now.After(pc.expires) {
				ps.forget(st, id)
				st.done.mark(id)
			}
		}
		if len(st.calls) != 0 {
			continue
		}
		st.calls = nil
		idle := now.Sub(st.last)
		switch {
		case idle <= ps.cfg.DedupLinger || now.Before(st.keep):
		case idle > ps.cfg.SessionLinger || !st.done.any():
			delete(ps.peers, k)
		case len(ps.peers) > ps.cfg.DedupEntries:
			delete(ps.peers, k)
			ps.cfg.Counters.ForgottenEarly.Add(1)
		}
	}
}

// Drain refuses new calls and closes the socket once the running ones
// have replied.
func (ps *PacketServer) Drain() {
	ps.mu.Lock()
	ps.draining = true
	idle := ps.running == 0
	ps.mu.Unlock()
	if idle {
		ps.close()
		return
	}
	go func() {
		ps.waitCalls()
		ps.close()
	}()
}

// waitCalls waits until no call is running.
func (ps *PacketServer) waitCalls() {
	ps.mu.Lock()
	if ps.idle == nil {
		ps.idle = sync.NewCond(&ps.mu)
	}
	for ps.running > 0 {
		ps.idle.Wait()
	}
	ps.mu.Unlock()
}

// close closes the socket; the reader returns.
func (ps *PacketServer) close() {
	ps.closeOnce.Do(func() {
		ps.mu.Lock()
		ps.closed = true
		ps.mu.Unlock()
		close(ps.stopped)
		ps.io.PC.Close()
	})
}

// Abort closes the socket at once and cancels the calls running.
func (ps *PacketServer) Abort() {
	ps.close()
	ps.mu.Lock()
	var running []Call
	for _, st := range ps.peers {
		for _, pc := range st.calls {
			if pc.sc != nil {
				running = append(running, pc.sc)
			} else if pc.expires.IsZero() {
				pc.gone = true // being opened
			}
		}
	}
	ps.mu.Unlock()
	for _, sc := range running {
		sc.State().CallerGone.Store(true)
		sc.Cancel(context.Canceled)
	}
}

package kiev

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/transport"
	"github.com/kievrpc/kiev/internal/wire"
)

// ServePacket serves calls arriving as datagrams on pc, usually a UDP
// socket, with the same services, codecs, metadata, priorities, overload
// scheduler and interceptors as Serve. Each request and each reply is one
// datagram (see PROTOCOL.md).
//
// Calls run at most once. The server remembers each call by the client's
// address, the client socket's random session id and the call's id: a
// retransmitted request whose call is running is ignored, and one whose
// call is done gets the same reply again, without running the handler.
// Every request also carries the client's ack floor, the id below which
// the client has seen every call end; the server forgets those calls at
// once, cancels the handlers of those still running (nobody waits for
// them), and drops any late retransmission of them unrun, so under steady
// traffic it holds little more than the calls in flight. A Cancel the
// client sends when its caller gives up cancels the handler's ctx; one
// without the client's session id names no call and is dropped
// (PacketStats.SessionlessCancels counts them). A call the
// client says nothing more about is forgotten Packet.DedupLinger after it
// is done and after its last datagram arrived, which is safe because a
// client retransmits at most MaxRTO apart (1s against 2s, by default).
// The memory is bounded by Packet.DedupEntries and never forgets a call
// early: when it is full, new calls are refused at once with ErrOverloaded
// rather than risk running a handler twice (PacketStats.CacheFull counts
// them).
//
// A reply larger than Packet.MaxDatagram is replaced by an ErrTooLarge
// error. Datagrams that are not kiev requests are dropped and counted
// (see Server.PacketStats), costing no allocation. ServePacket returns
// ErrServerClosed after Shutdown or Close, and closes pc when it returns.
func (s *Server) ServePacket(pc net.PacketConn) error {
	if err := s.checkCertEntry("ServePacket (UDP)"); err != nil {
		pc.Close()
		return err
	}
	ps := &packetServer{
		srv:     s,
		io:      transport.NewPacketIO(pc),
		peers:   make(map[sessionKey]*peerState),
		byPeer:  make(map[transport.PeerKey]int),
		stopped: make(chan struct{}),
	}
	_, _ = rand.Read(ps.secret[:]) // never fails (crypto/rand)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		pc.Close()
		return ErrServerClosed
	}
	s.packets[ps] = struct{}{}
	s.connWG.Add(1)
	s.mu.Unlock()
	s.startAdmin()
	defer s.connWG.Done()
	s.publish(pc, pc.LocalAddr())
	s.logServing("", pc.LocalAddr())
	defer func() {
		s.unpublish(context.Background(), pc)
		s.mu.Lock()
		delete(s.packets, ps)
		s.mu.Unlock()
	}()

	ps.base = context.Background()
	var sweeper sync.WaitGroup
	sweeper.Go(ps.sweep)
	err := ps.readLoop()
	ps.close()
	sweeper.Wait()
	if s.isClosed() {
		return ErrServerClosed
	}
	return err
}

// PacketStats sums what the server's packet sockets saw.
func (s *Server) PacketStats() PacketStats {
	st := s.packetStats.snapshot()
	s.mu.Lock()
	for ps := range s.packets {
		ps.mu.Lock()
		st.Cached += int64(ps.entries)
		ps.mu.Unlock()
	}
	s.mu.Unlock()
	return st
}

// packetServer serves one packet socket. It owns two goroutines: the
// reader (the caller of ServePacket) and the sweeper of the duplicate
// cache; calls run on the scheduler's workers.
type packetServer struct {
	srv  *Server
	io   transport.PacketIO
	base context.Context

	mu       sync.Mutex // guards the fields below
	secret   [32]byte   // keys the tickets (see ticket)
	peers    map[sessionKey]*peerState
	entries  int                       // calls remembered, over all peers
	unproven int                       // of those, calls of addresses not shown to receive
	running  int                       // calls not done
	byPeer   map[transport.PeerKey]int // calls not answered, by client address (WithMaxConcurrentCalls)
	draining bool                      // refuse new calls; close once running is 0
	closed   bool
	idle     *sync.Cond // signalled when running reaches 0

	stopped   chan struct{} // closed by close
	closeOnce sync.Once
}

// sessionKey identifies a client socket: its address and the random
// session id it sends (0 for clients that send none).
type sessionKey struct {
	peer    transport.PeerKey
	session uint64
}

// peerState is what the server remembers of one client session.
type peerState struct {
	floor uint64                 // the client has seen the end of every call below this id
	calls map[uint64]*packetCall // calls at or above floor, by id
	last  time.Time              // when the last datagram of the session came
	keep  time.Time              // a signed session's floor is kept until its last request goes stale
}

// packetCall is one call in the duplicate cache, and its transport.Sink.
type packetCall struct {
	ps      *packetServer
	st      *peerState
	id      uint64
	peer    transport.PeerKey
	addr    net.Addr  // the peer, for sockets other than UDP
	answer  []byte    // the answer datagram, once sent
	code    Code      // the answer's error code, CodeOK for a reply
	counted bool      // in ps.byPeer: neither answered nor done
	resends int       // times the reply was sent again (MaxReplyResends)
	session uint64    // the client's session, for a Retry's ticket
	allow   int       // bytes the reply may take to an address not shown to receive; -1: any
	keep    time.Time // a signed call is remembered until its request goes stale
	expires time.Time // when it may be forgotten, once done; zero while running
	sc      *serverCall
}

func (ps *packetServer) readLoop() error {
	buf := make([]byte, MaxDatagram+1)
	var h wire.Header
	stats := &ps.srv.packetStats
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
		stats.received.Add(1)
		f, _, err := wire.ParseDatagram(buf[:n])
		if err != nil || f.Type != wire.TypeRequest && f.Type != wire.TypeCancel {
			stats.malformed.Add(1)
			continue
		}
		if wire.ParseHeader(f.Header, &h) != nil {
			stats.malformed.Add(1)
			continue
		}
		a := signer{key: sessionKey{peer, h.Session}}
		if ps.srv.opts.packetKeys != nil {
			a.verify(ps.srv, buf[:n], &h, time.Now())
		}
		if f.Type == wire.TypeCancel {
			if h.Session == 0 {
				// Older kiev clients sent Cancel without the Session
				// every call is known by: it names no call.
				stats.sessionlessCancels.Add(1)
				continue
			}
			if a.err == nil {
				ps.cancel(a.key, f.ID)
			}
			continue
		}
		ps.request(&f, &h, peer, addr, n, &a)
	}
}

// request starts a call, or answers a retransmission from the cache.
func (ps *packetServer) request(f *wire.Frame, h *wire.Header, peer transport.PeerKey, addr net.Addr, n int, a *signer) {
	stats := &ps.srv.packetStats
	now := time.Now()
	linger := ps.srv.opts.packet.DedupLinger
	proven := h.Ticket != nil && ps.validTicket(h.Ticket, peer, h.Session, now)
	allow := -1 // what the answer may take: see Packet.MaxAmplification
	if f := ps.srv.opts.packet.MaxAmplification; f > 0 && !proven {
		allow = f * n
	}
	if a.err != nil {
		stats.dropped.Add(1)
		ps.replyError(f.ID, peer, addr, CodeUnauthenticated, a.err.Error(), allow, h.Session)
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
		stats.duplicates.Add(1)
		return
	}
	if pc := st.calls[f.ID]; pc != nil {
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
			if pc.resends >= MaxReplyResends {
				reply = nil
			} else {
				pc.resends++
			}
		}
		ps.mu.Unlock()
		stats.duplicates.Add(1)
		if reply != nil {
			ps.sendWithin(reply, code, allow, f.ID, h.Session, peer, addr)
		}
		return
	}
	if bytes.HasPrefix(h.Method, []byte(ReflectionService+".")) && !ps.srv.opts.packet.ServeReflection {
		ps.mu.Unlock()
		stats.dropped.Add(1)
		ps.replyError(f.ID, peer, addr, CodeNotFound, "kiev: kiev.Reflection is not served over UDP (Packet.ServeReflection); call it over TCP", allow, h.Session)
		return
	}
	switch {
	case ps.draining || ps.closed:
		ps.mu.Unlock()
		stats.dropped.Add(1)
		ps.replyError(f.ID, peer, addr, CodeShutdown, "kiev: server is shutting down; retry on another server", allow, h.Session)
		return
	case ps.entries >= ps.srv.opts.packet.DedupEntries:
		ps.mu.Unlock()
		stats.cacheFull.Add(1)
		ps.replyError(f.ID, peer, addr, CodeOverloaded, "kiev: the server's duplicate-request cache is full; retry later or on another server", allow, h.Session)
		return
	case allow >= 0 && 2*ps.unproven >= ps.srv.opts.packet.DedupEntries:
		// Calls of addresses not shown to receive, which a flood with
		// spoofed sources makes, take at most half the cache: the rest
		// is kept for clients that showed they receive. A client that
		// did not yet gets a ticket.
		ps.mu.Unlock()
		stats.cacheFull.Add(1)
		ps.sendRetry(f.ID, h.Session, peer, addr, allow, CodeOverloaded)
		return
	}
	pc := &packetCall{ps: ps, st: st, id: f.ID, peer: peer, addr: addr, session: h.Session, allow: allow, keep: a.until}
	if addr == nil {
		addr = peer.Addr()
	}
	var hd transport.Head
	hd.Read(f, h, transport.Origin{Addr: addr, KeyID: a.id})
	sc, code, msg := ps.srv.open(&hd, ps.base, pc)
	if sc == nil {
		ps.mu.Unlock()
		ps.replyError(f.ID, peer, pc.addr, code, msg, allow, h.Session)
		return
	}
	if ps.srv.opts.maxCalls > 0 && ps.byPeer[peer] >= ps.srv.opts.maxCalls {
		// A client address is a UDP client's connection: its sessions
		// are the client's to choose.
		ps.mu.Unlock()
		sc.Release()
		stats.dropped.Add(1)
		code, msg := ps.srv.refuseAtLimit(sc.m, "from this address")
		ps.replyError(f.ID, peer, pc.addr, code, msg, allow, h.Session)
		return
	}
	pc.sc = sc
	st.calls[f.ID] = pc
	ps.entries++
	if !pc.proven() {
		ps.unproven++
	}
	ps.running++
	ps.byPeer[peer]++
	pc.counted = true
	ps.mu.Unlock()
	ps.srv.submit(sc, ps.base)
}

// session returns the state of a client session, made if new, after
// forgetting the calls below its new ack floor; ps.mu is held. The client
// waits for none of those calls, so the ones still running are canceled,
// which ends the handler of a call whose Cancel was lost as soon as the
// client's next request comes.
func (ps *packetServer) session(k sessionKey, now time.Time, floor uint64) *peerState {
	st := ps.peers[k]
	if st == nil {
		st = &peerState{calls: make(map[uint64]*packetCall)}
		ps.peers[k] = st
	}
	st.last = now
	if k.session != 0 && floor > st.floor {
		st.floor = floor
		for id, pc := range st.calls {
			if id >= floor {
				continue
			}
			if pc.sc != nil {
				// cancel takes only the call's own lock, so it may
				// run under ps.mu. The call finishes as any canceled
				// call does; its retransmissions are known stale by
				// the floor.
				pc.sc.st.CallerGone.Store(true)
				pc.sc.ctx.cancel(context.Canceled)
			}
			ps.forget(st, id)
		}
	}
	return st
}

// forget drops a call from the cache; ps.mu is held.
func (ps *packetServer) forget(st *peerState, id uint64) {
	if pc := st.calls[id]; pc != nil && !pc.proven() {
		ps.unproven--
	}
	delete(st.calls, id)
	ps.entries--
}

// cancel cancels the call a client gave up on.
func (ps *packetServer) cancel(k sessionKey, id uint64) {
	var sc *serverCall
	ps.mu.Lock()
	if st := ps.peers[k]; st != nil {
		if pc := st.calls[id]; pc != nil {
			sc = pc.sc
		}
	}
	ps.mu.Unlock()
	if sc != nil {
		sc.st.CallerGone.Store(true)
		sc.ctx.cancel(context.Canceled)
	}
}

// replyError answers a request with an error, within allow bytes (-1:
// any), or else with a Retry.
func (ps *packetServer) replyError(id uint64, peer transport.PeerKey, addr net.Addr, code Code, msg string, allow int, session uint64) {
	buf := transport.GetBuf(0)
	defer transport.PutBuf(buf)
	b := transport.AppendError(wire.AppendPreface((*buf)[:0], wire.Version), id, uint32(code), msg, false)
	*buf = b
	if wire.EndFrame(b, wire.PrefaceLen, MaxDatagram) == nil {
		ps.sendWithin(b, code, allow, id, session, peer, addr)
	}
}

func (ps *packetServer) send(b []byte, peer transport.PeerKey, addr net.Addr) {
	if ps.io.Write(b, peer, addr) == nil {
		ps.srv.packetStats.sent.Add(1)
	}
}

// proven reports whether the call's address has shown it receives (or
// the server bounds no answer): its answer may take any size.
func (pc *packetCall) proven() bool { return pc.allow < 0 }

// Reply, Fail, Done and Backlogged make a packetCall the transport.Sink of
// its call.
func (pc *packetCall) Reply(_ transport.Call, cd codec.Codec, v any) error {
	buf := transport.GetBuf(0)
	defer transport.PutBuf(buf)
	b, err := transport.AppendResponse(wire.AppendPreface((*buf)[:0], wire.Version), pc.id, cd, v)
	*buf = b
	if err != nil {
		return err
	}
	return pc.send(b, CodeOK)
}

func (pc *packetCall) Fail(_ transport.Call, code uint32, msg string, limited bool) error {
	buf := transport.GetBuf(0)
	defer transport.PutBuf(buf)
	b := transport.AppendError(wire.AppendPreface((*buf)[:0], wire.Version), pc.id, code, msg, limited)
	*buf = b
	return pc.send(b, Code(code))
}

// send sends the datagram b, a Response after the preface of error code
// code (CodeOK for a reply), and keeps it to answer the call's
// retransmissions.
func (pc *packetCall) send(b []byte, code Code) error {
	limit := pc.ps.srv.opts.packet.MaxDatagram
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
// against WithMaxConcurrentCalls: the client, which may have its answer,
// may send the next already. ps.mu is held.
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

// backlogged: a datagram reply is sent at once or lost, never queued.
func (pc *packetCall) Backlogged() (int, bool) { return 0, false }

func (pc *packetCall) Done(transport.Call) {
	ps := pc.ps
	expires := time.Now().Add(ps.srv.opts.packet.DedupLinger)
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

// sweep forgets done calls past their time, until the socket closes.
func (ps *packetServer) sweep() {
	tick := time.NewTicker(min(ps.srv.opts.packet.DedupLinger/4, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ps.stopped:
			return
		case now := <-tick.C:
			linger := ps.srv.opts.packet.DedupLinger
			ps.mu.Lock()
			for k, st := range ps.peers {
				for id, pc := range st.calls {
					if !pc.expires.IsZero() && now.After(pc.expires) {
						ps.forget(st, id)
					}
				}
				if len(st.calls) == 0 && now.Sub(st.last) > linger && now.After(st.keep) {
					delete(ps.peers, k)
				}
			}
			ps.mu.Unlock()
		}
	}
}

// drain refuses new calls and closes the socket once the running ones
// have replied.
func (ps *packetServer) drain() {
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
func (ps *packetServer) waitCalls() {
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
func (ps *packetServer) close() {
	ps.closeOnce.Do(func() {
		ps.mu.Lock()
		ps.closed = true
		ps.mu.Unlock()
		close(ps.stopped)
		ps.io.PC.Close()
	})
}

// abort closes the socket at once and cancels the calls running.
func (ps *packetServer) abort() {
	ps.close()
	ps.mu.Lock()
	var running []*serverCall
	for _, st := range ps.peers {
		for _, pc := range st.calls {
			if pc.sc != nil {
				running = append(running, pc.sc)
			}
		}
	}
	ps.mu.Unlock()
	for _, sc := range running {
		sc.st.CallerGone.Store(true)
		sc.ctx.cancel(context.Canceled)
	}
}

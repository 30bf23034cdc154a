package kiev

import (
	"context"
	"net"

	"github.com/kievrpc/kiev/internal/transport"
	"github.com/kievrpc/kiev/reflection"
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
// Once it forgets a call, the server still knows it was answered: each
// session keeps a floor and a window of 1024 ids above it (as an IPsec
// anti-replay window does), fixed in size, so a duplicate arriving after
// the linger is answered ErrAnswered and never runs again. This holds
// for Packet.SessionLinger (2 minutes) after the session's last datagram;
// and, as ids far ahead move the window up, a call the server first sees
// after one 1024 ids later was forgotten is refused ErrAnswered unrun. It
// does not hold across a restart of the server, which forgets every
// session, nor for a session forgotten early because more than
// DedupEntries sessions are kept (PacketStats.ForgottenEarly counts
// them): a late duplicate of their calls runs again. Signed calls
// (WithPacketKeys) are refused once stale instead, whenever they come.
//
// A server with TokenAuth and no WithPacketKeys refuses to serve UDP, as
// the token would travel in clear and a captured request could be
// replayed from any address: ServePacket returns an error that says so,
// unless WithoutPacketKeysForTokenAuth opts in. A server whose WithTLS
// requires client certificates refuses too, unless
// WithoutClientCertsOutsideTLS opts in.
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
	if err := s.checkTokenEntry(); err != nil {
		pc.Close()
		return err
	}
	ps := transport.NewPacketServer(s.packetConfig(), pc, context.Background())
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
	defer s.doneServing()
	defer s.connWG.Done()
	s.publish(pc, pc.LocalAddr())
	s.logServing("", pc.LocalAddr())
	defer func() {
		s.unpublish(context.Background(), pc)
		s.mu.Lock()
		delete(s.packets, ps)
		s.mu.Unlock()
	}()

	err := ps.Serve()
	if s.isClosed() {
		return ErrServerClosed
	}
	return err
}

// packetConfig is what a packet socket of the server is served with: its
// Packet settings, its limits, and what package transport leaves to the
// server, the signatures (WithPacketKeys) and the refusal of
// kiev.Reflection (Packet.ServeReflection).
func (s *Server) packetConfig() *transport.PacketServerConfig {
	p := &s.opts.packet
	cfg := &transport.PacketServerConfig{
		Handler:          (*plumbing)(s),
		MaxDatagram:      p.MaxDatagram,
		DedupEntries:     p.DedupEntries,
		DedupLinger:      p.DedupLinger,
		SessionLinger:    p.SessionLinger,
		MaxAmplification: p.MaxAmplification,
		MaxResends:       MaxReplyResends,
		MaxCalls:         s.opts.maxCalls,
		Counters:         &s.packetStats,
	}
	if s.opts.packetKeys != nil {
		cfg.Keys = &transport.PacketKeys{Lookup: s.opts.packetKeys, Skew: p.AuthSkew}
	}
	if !p.ServeReflection {
		cfg.Unserved = []byte(reflection.ServiceName + ".")
		cfg.UnservedMsg = "kiev: kiev.Reflection is not served over UDP (Packet.ServeReflection); call it over TCP"
	}
	return cfg
}

// PacketStats sums what the server's packet sockets saw.
func (s *Server) PacketStats() PacketStats {
	c := &s.packetStats
	st := PacketStats{
		Sent: c.Sent.Load(), Received: c.Received.Load(),
		Duplicates: c.Duplicates.Load(), CacheFull: c.CacheFull.Load(), Dropped: c.Dropped.Load(),
		SessionlessCancels: c.SessionlessCancels.Load(), Malformed: c.Malformed.Load(), Retries: c.Retries.Load(),
		ForgottenEarly: c.ForgottenEarly.Load(),
	}
	s.mu.Lock()
	for ps := range s.packets {
		st.Cached += int64(ps.Cached())
	}
	s.mu.Unlock()
	return st
}

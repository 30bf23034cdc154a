package kiev

import (
	"sync/atomic"
	"time"
)

// Packet configures RPC over UDP (see Server.ServePacket and Dial of
// "udp://host:port"), on both sides. Every zero field means its default.
type Packet struct {
	// MaxDatagram is the largest datagram kiev sends: a client's request,
	// a server's reply (default 1200 bytes, which crosses the internet
	// unfragmented). A request over it fails with ErrTooLarge before it is
	// sent; a reply over it is replaced by an ErrTooLarge error. On
	// loopback or in a datacenter raise it on both sides, up to 65507.
	MaxDatagram int

	// InitialRTO is the retransmission timeout of a client's first calls,
	// before it has measured a round trip (default 200ms). After that the
	// timeout follows the measured round trips as TCP's does (RFC 6298),
	// within MinRTO (default 10ms) and MaxRTO (default 1s), and doubles
	// at each retransmission of a call. Keep MaxRTO below the servers'
	// DedupLinger.
	InitialRTO, MinRTO, MaxRTO time.Duration

	// Timeout is the deadline a client gives calls whose ctx has none
	// (default 10s), since a call over UDP retransmits until its deadline.
	Timeout time.Duration

	// DedupEntries bounds the server's duplicate-request cache (default
	// 262144 calls). DedupLinger is how long the server remembers a call
	// after it is done and after its last datagram arrived (default 2s);
	// it must exceed the clients' MaxRTO. See Server.ServePacket.
	DedupEntries int
	DedupLinger  time.Duration

	// SessionLinger is how long a server remembers which calls of a
	// client session it answered, after the session's last datagram
	// (default 2 minutes, the longest a datagram is taken to live in the
	// network, as TCP takes it): a duplicate of an answered call arriving
	// in that time is answered ErrAnswered, not run again, however long
	// after DedupLinger it comes. What a session's answered calls cost is
	// fixed (a floor and a window of 1024 call ids); past DedupEntries
	// sessions, idle ones are forgotten sooner (PacketStats.ForgottenEarly
	// counts them). See Server.ServePacket.
	SessionLinger time.Duration

	// MaxAmplification is how many times the bytes of its request a
	// server sends back to a client address that has not shown it
	// receives there (default 3, as QUIC allows; negative: no bound). A
	// reply larger than that is held, and the server answers with a
	// small Retry that carries a ticket bound to the address; a kiev
	// client sends the request again at once with it, and gets the held
	// reply. So a datagram with a spoofed source cannot make the server
	// send its victim much more than the spoofer sent. Clients older
	// than the ticket see the Retry as ErrOverloaded: during a rollout
	// to such clients, call over TCP or set MaxAmplification to -1.
	MaxAmplification int

	// AuthSkew is how far the time of a signed datagram (WithPacketKeys)
	// may be from the server's clock, either way (default 30s). A signed
	// request is accepted from its time less AuthSkew until its time plus
	// its call's timeout plus AuthSkew, and remembered until then.
	AuthSkew time.Duration

	// ServeReflection makes a server answer kiev.Reflection (reflection.ServiceName)
	// over UDP too. It is off by default: over UDP anyone who can spoof a
	// source address can have its long answer sent to a victim, a small
	// datagram returning many times its size. The kiev command's describe
	// works over TCP.
	ServeReflection bool
}

// MaxReplyResends bounds how many times a server sends the cached reply
// of one call again, for retransmissions of its request: a client that
// lost the reply that often has lost the network, and a replayed request
// cannot make the server send a reply without end.
const MaxReplyResends = 8

// Defaults for Packet.
const (
	DefaultMaxDatagram   = 1200
	MaxDatagram          = 65507 // the largest UDP payload over IPv4
	DefaultInitialRTO    = 200 * time.Millisecond
	DefaultMinRTO        = 10 * time.Millisecond
	DefaultMaxRTO        = time.Second
	DefaultPacketTimeout = 10 * time.Second
	DefaultDedupEntries  = 1 << 18
	DefaultDedupLinger   = 2 * time.Second
	DefaultSessionLinger = 2 * time.Minute

	DefaultMaxAmplification = 3
)

func (p *Packet) fill() {
	if p.MaxDatagram <= 0 {
		p.MaxDatagram = DefaultMaxDatagram
	}
	p.MaxDatagram = min(p.MaxDatagram, MaxDatagram)
	if p.InitialRTO <= 0 {
		p.InitialRTO = DefaultInitialRTO
	}
	if p.MinRTO <= 0 {
		p.MinRTO = DefaultMinRTO
	}
	if p.MaxRTO <= 0 {
		p.MaxRTO = DefaultMaxRTO
	}
	p.MaxRTO = max(p.MaxRTO, p.MinRTO)
	if p.Timeout <= 0 {
		p.Timeout = DefaultPacketTimeout
	}
	if p.DedupEntries <= 0 {
		p.DedupEntries = DefaultDedupEntries
	}
	if p.DedupLinger <= 0 {
		p.DedupLinger = DefaultDedupLinger
	}
	if p.SessionLinger <= 0 {
		p.SessionLinger = DefaultSessionLinger
	}
	p.SessionLinger = max(p.SessionLinger, p.DedupLinger)
	if p.AuthSkew <= 0 {
		p.AuthSkew = DefaultPacketAuthSkew
	}
	if p.MaxAmplification == 0 {
		p.MaxAmplification = DefaultMaxAmplification
	}
}

type packetOption Packet

func (o packetOption) applyServer(so *serverOptions) { so.packet = Packet(o) }
func (o packetOption) applyDial(do *dialOptions)     { do.packet = Packet(o) }

// PacketStats counts what a UDP socket saw. Servers report theirs with
// Server.PacketStats, clients with Client.PacketStats.
type PacketStats struct {
	Sent     int64 // datagrams sent, retransmissions included
	Received int64 // datagrams received, dropped ones included

	// Client side.
	Retransmits int64 // requests sent again after their timeout
	Unexpected  int64 // datagrams from an address other than the server's, dropped
	Stale       int64 // replies to no call in flight (late, duplicated), dropped

	// Server side.
	Duplicates int64 // retransmitted requests: answered from the cache, ignored while the call runs, or answered ErrAnswered once forgotten
	CacheFull  int64 // requests refused with ErrOverloaded because the duplicate cache was full
	Retries    int64 // replies held for an address not yet shown to receive, answered with a ticket (MaxAmplification)
	// Dropped counts requests refused unrun, but for a full cache:
	// while draining, unsigned where WithPacketKeys requires a
	// signature, for a service not served over UDP (kiev.Reflection
	// without Packet.ServeReflection), or at WithMaxConcurrentCalls.
	Dropped int64
	Cached  int64 // calls the duplicate cache holds now

	// SessionlessCancels counts Cancel datagrams without a Session
	// field, as kiev clients sent them before the field was added to
	// Cancel. The server knows calls by address, session and id, so such
	// a Cancel names no call: it is dropped, and the handler runs on
	// until it returns or its deadline passes.
	SessionlessCancels int64

	// ForgottenEarly counts idle client sessions the server forgot
	// before Packet.SessionLinger, because more than Packet.DedupEntries
	// sessions were kept: a late duplicate of one of their calls could
	// run again.
	ForgottenEarly int64

	// Both sides.
	Malformed int64 // datagrams that are not kiev's, or not the expected frame type, dropped
}

// packetCounters are a client's PacketStats, updated with atomics. A
// server's are package transport's (transport.PacketServerCounters).
type packetCounters struct {
	sent, received, retransmits, unexpected, stale, malformed atomic.Int64
}

func (c *packetCounters) snapshot() PacketStats {
	return PacketStats{
		Sent: c.sent.Load(), Received: c.received.Load(),
		Retransmits: c.retransmits.Load(), Unexpected: c.unexpected.Load(), Stale: c.stale.Load(),
		Malformed: c.malformed.Load(),
	}
}

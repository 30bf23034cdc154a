package transport

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"net"
	"time"

	"github.com/kievrpc/kiev/internal/codes"
	"github.com/kievrpc/kiev/internal/wire"
)

// Proof of address (PROTOCOL.md, Datagrams): a server sends an address
// that has not shown it receives at most Packet.MaxAmplification times
// the bytes of its request, and holds a larger answer for a Retry with a
// ticket, which the client sends back to show it receives.

// sendWithin sends the answer b, of error code code (codes.OK for a reply),
// to call id if it takes no more than allow bytes (-1: any), and a Retry
// instead if it does.
func (ps *PacketServer) sendWithin(b []byte, code codes.Code, allow int, id, session uint64, peer PeerKey, addr net.Addr) {
	if allow < 0 || len(b) <= allow {
		ps.send(b, peer, addr)
		return
	}
	ps.sendRetry(id, session, peer, addr, allow, code)
}

// retryMsg is what a client older than the ticket reads in a Retry. It is
// short: a Retry must fit in the bytes a small request earns.
const retryMsg = "kiev: answer held until this address shows it receives (Packet.MaxAmplification); resend with the ticket"

// sendRetry answers call id with a Retry: a Response that carries a ticket
// for the client's address and session, and for clients that do not know
// tickets, an error that says why. Its code is the held answer's, so that
// such a client acts on it as on the answer: it retries elsewhere a call
// refused unrun (Overloaded, Shutdown), and fails one that ran, or that
// no server would run, with the code it ended with; a held reply, whose
// call ran and must not run again, is codes.TooLarge. A call refused for
// the duplicate-request cache, held nowhere, is codes.Overloaded. The Retry
// is sent only if it takes no more than allow bytes.
func (ps *PacketServer) sendRetry(id, session uint64, peer PeerKey, addr net.Addr, allow int, code codes.Code) {
	msg := retryMsg
	if code == codes.OK {
		code = codes.TooLarge
	}
	buf := GetBuf(0)
	defer PutBuf(buf)
	b := wire.AppendPreface((*buf)[:0], wire.Version)
	start := len(b)
	b = wire.BeginFrame(b, wire.TypeResponse, id)
	b = wire.AppendUvarint(b, wire.KeyErrCode, uint64(code))
	b = wire.AppendString(b, wire.KeyErrMsg, msg)
	b = wire.AppendField(b, wire.KeyTicket, ps.ticket(peer, session, ticketPeriodOf(time.Now())))
	_ = wire.EndHeader(b, start)
	*buf = b
	if wire.EndFrame(b, wire.PrefaceLen, maxPayload) != nil || allow >= 0 && len(b) > allow {
		return // a request too small to earn even a Retry
	}
	ps.cfg.Counters.Retries.Add(1)
	ps.send(b, peer, addr)
}

// ticketPeriod is how long a ticket is good for: it is accepted in the
// period it was made in and the next.
const ticketPeriod = 5 * time.Minute

func ticketPeriodOf(t time.Time) int64 { return t.Unix() / int64(ticketPeriod/time.Second) }

// ticket is the proof, for a period, that the client socket with session
// receives datagrams at peer: a MAC of them under the server's secret,
// which only a client that received it can send back.
func (ps *PacketServer) ticket(peer PeerKey, session uint64, period int64) []byte {
	m := hmac.New(sha256.New, ps.secret[:])
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(period))
	binary.BigEndian.PutUint64(b[8:], session)
	m.Write(b[:])
	if peer.Other != "" {
		m.Write([]byte(peer.Other))
	} else {
		ab, _ := peer.AP.MarshalBinary()
		m.Write(ab)
	}
	return m.Sum(nil)[:ticketLen]
}

const ticketLen = 16

// validTicket reports whether t is a ticket of this server for peer and
// session, of now's period or the one before.
func (ps *PacketServer) validTicket(t []byte, peer PeerKey, session uint64, now time.Time) bool {
	if len(t) != ticketLen {
		return false
	}
	p := ticketPeriodOf(now)
	return hmac.Equal(t, ps.ticket(peer, session, p)) || hmac.Equal(t, ps.ticket(peer, session, p-1))
}

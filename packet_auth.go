package kiev

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"time"

	"github.com/kievrpc/kiev/internal/wire"
)

// This file holds the signatures of datagrams (WithPacketKey,
// WithPacketKeys). A token sent as metadata, as TokenAuth checks it, is
// in clear in every datagram: anyone who sees one can replay the request,
// or send others with the token. A signed datagram instead carries the id
// of a key both sides hold, the time it was signed, and an HMAC-SHA256
// under the key of the whole datagram; the server accepts it only while
// it is fresh, and remembers each signed call until then, whatever
// address it comes from, so that a replay never runs its handler again.

// DefaultPacketAuthSkew is the default of Packet.AuthSkew.
const DefaultPacketAuthSkew = 30 * time.Second

// PacketKeyMetadata is the metadata key under which a handler of a signed
// datagram call finds the id of the key that signed it; the server sets
// it, whatever the caller sent under it.
const PacketKeyMetadata = "kiev-packet-key"

type packetKey struct {
	id  string
	key []byte
}

// appendAuth appends the signature fields of k to a datagram's header,
// the MAC zeroed: signPacket fills it once the datagram is whole. It must
// be the header's last field.
func (k *packetKey) appendAuth(b []byte, now time.Time) []byte {
	b = wire.AppendString(b, wire.KeyAuthID, k.id)
	b = wire.AppendUvarint(b, wire.KeyAuthTime, uint64(now.UnixMilli()))
	var zero [wire.AuthMACLen]byte
	return wire.AppendField(b, wire.KeyAuthMAC, zero[:])
}

// signPacket fills the MAC of the whole datagram b, whose header ends with
// the fields of appendAuth.
func (k *packetKey) signPacket(b []byte) error {
	f, _, err := wire.ParseDatagram(b)
	if err != nil {
		return err
	}
	var h wire.Header
	if err := wire.ParseHeader(f.Header, &h); err != nil {
		return err
	}
	if len(h.AuthMAC) != wire.AuthMACLen {
		return errors.New("kiev: the datagram has no room for its signature")
	}
	m := hmac.New(sha256.New, k.key)
	m.Write(b)
	m.Sum(h.AuthMAC[:0]) // h.AuthMAC aliases b
	return nil
}

// errUnsigned is why a keyed server refuses a datagram.
var errUnsigned = errors.New("kiev: unauthenticated: the datagram's signature is missing, of an unknown key, wrong or stale; sign with WithPacketKey, with a key the server knows, and keep the clocks within the server's Packet.AuthSkew")

// verifyPacket checks the signature of datagram b, whose header h is, at
// now, against the server's keys; it zeroes the MAC in b. It returns the
// key id and how long the datagram stays fresh.
func (s *Server) verifyPacket(b []byte, h *wire.Header, now time.Time) (id string, until time.Time, err error) {
	if h.AuthID == nil || len(h.AuthMAC) != wire.AuthMACLen {
		return "", time.Time{}, errUnsigned
	}
	key, ok := s.opts.packetKeys(string(h.AuthID))
	if !ok {
		return "", time.Time{}, errUnsigned
	}
	signed := time.UnixMilli(int64(min(h.AuthTime, 1<<62)))
	life := time.Duration(0)
	if h.HasTimeout {
		life = time.Duration(min(h.Timeout, wire.MaxTimeoutMicros)) * time.Microsecond
	}
	skew := s.opts.packet.AuthSkew
	until = signed.Add(life + skew)
	if now.Before(signed.Add(-skew)) || now.After(until) {
		return "", time.Time{}, errUnsigned
	}
	var sent [wire.AuthMACLen]byte
	copy(sent[:], h.AuthMAC)
	clear(h.AuthMAC)
	m := hmac.New(sha256.New, key)
	m.Write(b)
	if !hmac.Equal(m.Sum(nil), sent[:]) {
		return "", time.Time{}, errUnsigned
	}
	return string(h.AuthID), until, nil
}

package transport

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"time"

	"github.com/kievrpc/kiev/internal/wire"
)

// The signatures of datagrams (kiev.WithPacketKey, kiev.WithPacketKeys).
// A signed datagram carries the id of a key both sides hold, the time it
// was signed, and an HMAC-SHA256 under the key of the whole datagram; the
// server accepts it only while it is fresh, and remembers each signed
// call until then, whatever address it comes from, so that a replay never
// runs its handler again.

// PacketKey is a key a client signs its datagrams with.
type PacketKey struct {
	ID  string
	Key []byte
}

// appendAuth appends the signature fields of k to a datagram's header,
// the MAC zeroed: sign fills it once the datagram is whole. It must be
// the header's last field.
func (k *PacketKey) appendAuth(b []byte, now time.Time) []byte {
	b = wire.AppendString(b, wire.KeyAuthID, k.ID)
	b = wire.AppendUvarint(b, wire.KeyAuthTime, uint64(now.UnixMilli()))
	var zero [wire.AuthMACLen]byte
	return wire.AppendField(b, wire.KeyAuthMAC, zero[:])
}

// sign fills the MAC of the whole datagram b, whose header ends with the
// fields of appendAuth.
func (k *PacketKey) sign(b []byte) error {
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
	m := hmac.New(sha256.New, k.Key)
	m.Write(b)
	m.Sum(h.AuthMAC[:0]) // h.AuthMAC aliases b
	return nil
}

// CancelDatagram returns the Cancel datagram of call id, signed with key
// if not nil, or nil if it cannot make one. It carries the session, since
// the server knows calls by address, session and id.
func CancelDatagram(id, session uint64, key *PacketKey, maxDatagram int) []byte {
	b := make([]byte, 0, wire.DatagramOverhead+2+10+128)
	b = wire.BeginDatagram(b, wire.TypeCancel, id)
	b = wire.AppendUvarint(b, wire.KeySession, session)
	if key != nil {
		b = key.appendAuth(b, time.Now())
	}
	if wire.EndHeader(b, wire.PrefaceLen) != nil || wire.EndFrame(b, wire.PrefaceLen, maxDatagram) != nil {
		return nil
	}
	if key != nil && key.sign(b) != nil {
		return nil
	}
	return b
}

// errUnsigned is why a keyed server refuses a datagram.
var errUnsigned = errors.New("kiev: unauthenticated: the datagram's signature is missing, of an unknown key, wrong or stale; sign with WithPacketKey, with a key the server knows, and keep the clocks within the server's Packet.AuthSkew")

// PacketKeys are the keys a server checks the signatures of datagrams
// with (kiev.WithPacketKeys).
type PacketKeys struct {
	// Lookup returns the key of an id, or false for none.
	Lookup func(id string) ([]byte, bool)
	// Skew is how far the signer's clock may be from the server's
	// (Packet.AuthSkew).
	Skew time.Duration
}

// verify checks the signature of datagram b, whose header h is, at now,
// against the keys; it zeroes the MAC in b. It returns the key id and how
// long the datagram stays fresh.
func (ks *PacketKeys) verify(b []byte, h *wire.Header, now time.Time) (id string, until time.Time, err error) {
	if h.AuthID == nil || len(h.AuthMAC) != wire.AuthMACLen {
		return "", time.Time{}, errUnsigned
	}
	key, ok := ks.Lookup(string(h.AuthID))
	if !ok {
		return "", time.Time{}, errUnsigned
	}
	signed := time.UnixMilli(int64(min(h.AuthTime, 1<<62)))
	life := time.Duration(0)
	if h.HasTimeout {
		life = time.Duration(min(h.Timeout, wire.MaxTimeoutMicros)) * time.Microsecond
	}
	until = signed.Add(life + ks.Skew)
	if now.Before(signed.Add(-ks.Skew)) || now.After(until) {
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

package kiev

import "time"

// The signatures of datagrams (WithPacketKey, WithPacketKeys), which
// internal/transport makes and checks. A token sent as metadata, as TokenAuth checks it, is
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

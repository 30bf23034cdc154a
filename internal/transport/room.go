package transport

import "sync/atomic"

// A server's connection reads no more calls while what it holds for its
// client passes its share of WithMaxQueuedBytes (ServerConfig.Share):
// the replies queued for the client, and the room its calls in flight
// will need, each reserved when its Request is read and given back when
// it is answered. A call's reservation is its args, twice the reply its
// method has recently made (the reply and its encoding), and callOverhead
// for the rest. So a client that pipelines calls and reads none of the
// replies holds about its share, however fast it sends; a client that
// reads its replies meets only backpressure (its calls wait in its
// socket), never an error.

// callOverhead is what a call in flight holds beyond its args and reply:
// the call, its context and its decoded args.
const callOverhead = 1 << 10

// unknownReply is the reply reserved for a call whose method has not yet
// answered a call: as large as a read buffer, so that before the first
// answer a connection takes in a few hundred calls at most (at its
// largest share), rather than thousands whose replies are unknown.
const unknownReply = ReadBufSize

// minHeldCalls is how many calls a connection may always have in flight,
// whatever room they reserve, as long as its queued replies are within
// its share: a call that waits long for its answer (a long poll), of a
// method whose replies are unknown or large, then holds up no other call
// of its connection, however small the connection's share. The replies
// they make pass the share only as far as BacklogError lets them, and
// the scheduler's workers bound how many are made at once.
const minHeldCalls = 16

// MaxUnanswered is how many calls one connection may have read and not
// yet answered before its reader waits for one to be answered, whatever
// their size: HTTP/2 servers cap a connection's streams in the same way.
// The client's further calls wait in its socket meanwhile; streams do not
// count (WithMaxStreams bounds them).
const MaxUnanswered = 4096

// Held is what a connection's calls in flight hold: the room reserved
// for them, in bytes, and how many they are, in one word, so that taking
// a call and answering it cost one atomic add each.
type Held struct{ v atomic.Int64 }

// heldCall is one call in a Held's word; the bytes are below it.
const heldCall = 1 << 40

// Load returns the bytes reserved and the count of calls.
func (h *Held) Load() (bytes int64, calls int) {
	v := h.v.Load()
	return v & (heldCall - 1), int(v / heldCall)
}

func (h *Held) add(bytes int64, calls int64) { h.v.Add(bytes + calls*heldCall) }

// ReplySize is what a method's replies have recently been, encoded: the
// room a connection reserves for each of its calls in flight. It rises
// at once to a larger reply, and falls to a reply an eighth or more
// smaller, halfway; replies of about the same size write nothing, so
// that the calls of a busy method share it cheaply. Its methods are safe
// for concurrent use.
type ReplySize struct{ v atomic.Int64 }

// Observe records a reply of n bytes.
func (r *ReplySize) Observe(n int) {
	old, v := r.v.Load(), int64(n)
	switch {
	case v > old:
		r.v.CompareAndSwap(old, v)
	case old-v > old/8:
		r.v.CompareAndSwap(old, (old+v)/2)
	}
}

// Expect is the reply to reserve room for: unknownReply before the first.
func (r *ReplySize) Expect() int {
	if v := r.v.Load(); v > 0 {
		return int(v)
	}
	return unknownReply
}

// reserve reserves room for the call st of a Request whose args are
// argBytes, expecting a reply of its method's usual size, and its
// encoding (both live while it is answered).
func (c *ServerConn) reserve(st *CallState, sizes *ReplySize, argBytes int) {
	n := int64(callOverhead + argBytes)
	if sizes != nil {
		n += 2 * int64(sizes.Expect())
	}
	st.reserved, st.sizes = n, sizes
	c.held.add(n, 1)
}

// unreserve gives back the room reserved for st, once it is answered (a
// reply of replyBytes; 0 for none), and wakes the reader if it waits for
// room.
func (c *ServerConn) unreserve(st *CallState, replyBytes int) {
	if replyBytes > 0 && st.sizes != nil {
		st.sizes.Observe(replyBytes)
	}
	c.held.add(-st.reserved, -1)
	st.reserved = 0
	c.link.Wake()
}

// Package transport is kiev's transport layer: it owns the wire. It
// builds and parses every frame and datagram (through package wire,
// beneath it, which it alone imports), compresses and decompresses
// bodies, signs and checks datagrams, and runs the state machines of the
// server's and the client's connections and sockets. Package kiev above
// it is the API and the protocol-agnostic plumbing (making a call, the
// scheduler, interceptors, the method, metrics and logs).
//
// Calls go one way. Package kiev calls the transport; the transport
// calls back only through the small interfaces package kiev hands it
// when it builds it, and never while it holds a lock of its own.
//
// The server's fronts are siblings behind one small interface (call.go).
// Each reads a call into a Head, refuses it first if the server drains
// or the caller has WithMaxConcurrentCalls in flight (asking Refuse for
// the answer), decompresses its args, and only then hands it to package
// kiev's ServerHandler: Open makes the call, package kiev's own value
// behind the Call interface, and the front then runs it on its reader
// (Call.RunInline) or submits it to the scheduler (Call.Submit), its
// choice; nothing is ever cast back to package kiev's type. The call's answer comes back through the front's Sink, as a
// value and a codec to encode, or an error code and message; the front
// frames it, and over a connection compresses it as the client's
// Settings and Request allow.
//
//   - ServerConn serves one client connection (TCP, TLS or Unix): the
//     handshake, Settings, calls by id, Cancel, Ping, WithMaxConcurrentCalls,
//     backpressure on a client that does not read, drain with its
//     GoAways, and calls run on the reader while that is cheaper than a
//     hand-off (inline.go).
//   - PacketServer serves one packet socket: its duplicate cache by
//     session and ack floor, tickets and Retry (packet_ticket.go),
//     signatures (packet_auth.go), the amplification bound, and its
//     counters.
//   - HTTPFront serves calls as JSON over HTTP, and through net/http/fcgi
//     over FastCGI.
//
// The client's:
//
//   - ClientConn is a client's connection (TCP, TLS or Unix): the
//     handshake, calls sent and matched to their Responses by id, pings,
//     the server's Settings and GoAway, abandoning a call (Cancel), and
//     the connection's death, which fails the calls pending, as not read
//     those a drained server never read.
//   - PacketClient is a client's UDP socket: its session and ack floor,
//     each call's retransmission on a timeout that follows the measured
//     round trip (RFC 6298), tickets, and the Cancels, signed, resent for
//     abandoned calls.
//   - Both are generic over the client's call. Package kiev fills in a
//     Request for each call, which AppendRequest and AppendDatagram frame
//     (request.go): a connection's as the call is written, a socket's
//     each time its datagram is sent (RoundTrip takes the Request, so
//     nothing calls up to encode a retransmission). The transports hand
//     each Response back parsed, through a small ClientHandler (which a
//     connection extends as ConnHandler, for Settings and GoAway), and
//     ask it what a failure means to the calls.
//
// Beneath both:
//
//   - Link is the writing half of a TCP (or TLS, or Unix) connection: one
//     writer goroutine that coalesces frames into few syscalls, writes a
//     lone call's frame inline, holds a burst's replies, runs the
//     heartbeat and cuts a peer that is silent or does not read.
//   - Compressor compresses and decompresses bodies (compress.go), each
//     decompression bounded by the frame limit.
//   - Budget bounds the bytes a server's readers hold for large frames in
//     progress.
//   - PacketIO reads and writes datagrams, by address, without
//     allocating on a UDP socket.
//   - GetBuf and PutBuf pool the buffers frames are built in.
//   - Pending is a client's table of calls awaiting their answers, the
//     one ClientConn and PacketClient both use.
//
// Codes are internal/codes' Code, the one type every layer uses.
package transport

// Package transport is kiev's transport layer: the state machines of the
// server's and the client's connections and sockets, and what moves their
// frames and datagrams. Package kiev above it is the API and the
// protocol-agnostic plumbing (making a call, the scheduler, interceptors,
// the method, metrics and logs); package wire beneath it frames the
// bytes.
//
// The server's fronts are siblings behind one small interface (call.go):
// each reads a call into a Head and hands it to package kiev's ServerHandler,
// which makes and runs it; the call's answer comes back through the
// front's Sink, as a value to encode or an error code and message.
//
//   - ServerConn serves one client connection (TCP, TLS or Unix): the
//     handshake, Settings, calls by id, Cancel, Ping, WithMaxConcurrentCalls,
//     backpressure on a client that does not read, drain with its
//     GoAways, and calls run on the reader while that is cheaper than a
//     hand-off (inline.go).
//   - PacketServer serves one packet socket: its duplicate cache by
//     session and ack floor, tickets and Retry (packet_ticket.go), the
//     amplification bound, and its counters.
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
//     round trip (RFC 6298), tickets, and the Cancels resent for
//     abandoned calls.
//   - Both are generic over the client's call, and ask the protocol
//     above them (package kiev) through a small ClientHandler, which each
//     extends (ConnHandler, PacketHandler): to encode a request, to
//     decode a Response into its call, and what a failure means to the
//     calls. That protocol drives them through its own interface, one
//     value per endpoint (kiev's clientTransport).
//
// Beneath both:
//
//   - Link is the writing half of a TCP (or TLS, or Unix) connection: one
//     writer goroutine that coalesces frames into few syscalls, writes a
//     lone call's frame inline, holds a burst's replies, runs the
//     heartbeat and cuts a peer that is silent or does not read.
//   - Budget bounds the bytes a server's readers hold for large frames in
//     progress.
//   - PacketIO reads and writes datagrams, by address, without
//     allocating on a UDP socket.
//   - GetBuf and PutBuf pool the buffers frames are built in.
//   - Pending is a client's table of calls awaiting their answers, the
//     one ClientConn and PacketClient both use.
package transport

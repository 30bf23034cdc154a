// Package transport is kiev's transport layer: what moves a connection's
// frames and a socket's datagrams, and the client's state machines over
// them. The server's connections and sockets are still in package kiev
// (server_conn.go and server_packet.go).
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
//     above them (package kiev) through a small Handler, which each
//     extends (ConnHandler, PacketHandler): to encode a request, to
//     decode a Response into its call, and what a failure means to the
//     calls. That protocol drives them through its own interface, one
//     value per endpoint (kiev's clientTransport).
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
//
// Framing itself is package wire's.
package transport

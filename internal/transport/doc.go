// Package transport is kiev's transport layer: what moves a connection's
// frames and a socket's datagrams, and the server's state machines over
// them. The client's connections and sockets are still in package kiev
// (client_conn.go and client_packet.go).
//
//   - ServerConn serves one client connection of a server, and
//     PacketServer one packet socket: its duplicate cache, tickets
//     (packet_ticket.go) and counters. Both hand their calls to package
//     kiev's Handler and take their answers through a Sink (call.go).
//   - Link is the writing half of a TCP (or TLS, or Unix) connection: one
//     writer goroutine that coalesces frames into few syscalls, writes a
//     lone call's frame inline, holds a burst's replies, runs the
//     heartbeat and cuts a peer that is silent or does not read.
//   - Budget bounds the bytes a server's readers hold for large frames in
//     progress.
//   - PacketIO reads and writes datagrams, by address, without
//     allocating on a UDP socket.
//   - GetBuf and PutBuf pool the buffers frames are built in.
//   - Pending is a client's table of calls awaiting their answers, shared
//     by its TCP connections and UDP sockets.
//
// Framing itself is package wire's.
package transport

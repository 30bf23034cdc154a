package main

import (
	"net"

	"golang.org/x/sys/unix"
)

// tcpBytes returns the bytes a TCP connection has carried, both ways, as
// the kernel counts them (TCP_INFO: bytes acknowledged by the peer, and
// bytes received): the payload, without TCP and IP headers.
func tcpBytes(c *net.TCPConn) (uint64, bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var ierr error
	if err := raw.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || ierr != nil {
		return 0, false
	}
	return info.Bytes_acked + info.Bytes_received, true
}

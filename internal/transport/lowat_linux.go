package transport

import "syscall"

// tcpNotSentLowat is Linux's TCP_NOTSENT_LOWAT.
const tcpNotSentLowat = 25

// setNotSentLowat bounds the bytes the kernel holds unsent on fd at n:
// the socket is writable again only below it.
func setNotSentLowat(fd uintptr, n int) {
	_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpNotSentLowat, n)
}

package transport

import (
	"net"
	"net/netip"
)

// udpConn is what kiev needs of a UDP socket to read and write without
// allocating an address per datagram; *net.UDPConn has it.
type udpConn interface {
	net.PacketConn
	ReadFromUDPAddrPort(b []byte) (int, netip.AddrPort, error)
	WriteToUDPAddrPort(b []byte, addr netip.AddrPort) (int, error)
}

// PacketIO reads and writes datagrams on pc, by netip.AddrPort where pc
// allows it and by net.Addr otherwise.
type PacketIO struct {
	PC  net.PacketConn // the socket
	udp udpConn        // nil if PC is not one
}

// NewPacketIO returns the PacketIO of pc.
func NewPacketIO(pc net.PacketConn) PacketIO {
	u, _ := pc.(udpConn)
	return PacketIO{PC: pc, udp: u}
}

// PeerKey identifies a peer address without allocating for UDP.
type PeerKey struct {
	AP    netip.AddrPort // a UDP peer, its address unmapped from IPv6
	Other string         // a peer of a socket other than UDP, by its address's String
}

// Addr returns the peer's address as a net.Addr.
func (k PeerKey) Addr() net.Addr {
	if k.Other != "" {
		return StringAddr(k.Other)
	}
	return UDPAddr(k.AP)
}

// UDPAddr is a UDP peer address that costs one allocation as a net.Addr,
// where *net.UDPAddr costs two.
type UDPAddr netip.AddrPort

func (a UDPAddr) Network() string { return "udp" }
func (a UDPAddr) String() string  { return netip.AddrPort(a).String() }

// StringAddr is the address of a datagram peer known only by its string.
type StringAddr string

func (a StringAddr) Network() string { return "udp" }
func (a StringAddr) String() string  { return string(a) }

// Read reads a datagram into b, and returns its length, its sender, and
// for sockets other than UDP, the sender's net.Addr.
func (io PacketIO) Read(b []byte) (int, PeerKey, net.Addr, error) {
	if io.udp != nil {
		n, ap, err := io.udp.ReadFromUDPAddrPort(b)
		return n, PeerKey{AP: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}, nil, err
	}
	n, a, err := io.PC.ReadFrom(b)
	if err != nil {
		return n, PeerKey{}, nil, err
	}
	if ua, ok := a.(*net.UDPAddr); ok {
		ap := ua.AddrPort()
		return n, PeerKey{AP: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}, a, nil
	}
	return n, PeerKey{Other: a.String()}, a, nil
}

// Write sends the datagram b to the peer to, or toAddr if not nil.
func (io PacketIO) Write(b []byte, to PeerKey, toAddr net.Addr) error {
	var err error
	switch {
	case io.udp != nil && to.Other == "":
		_, err = io.udp.WriteToUDPAddrPort(b, to.AP)
	case toAddr != nil:
		_, err = io.PC.WriteTo(b, toAddr)
	default:
		_, err = io.PC.WriteTo(b, to.Addr())
	}
	return err
}

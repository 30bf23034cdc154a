package wire

import (
	"encoding/binary"
	"errors"
)

// Datagrams: over UDP, each datagram carries exactly one frame, preceded
// by the 5-byte preface (Magic and the sender's version), so that every
// datagram can be checked on its own:
//
//	magic   "KIEV"
//	version uint8, the sender's protocol version, 1 or more
//	frame   one frame, length prefix included; the length must account
//	        for exactly the rest of the datagram
//
// Only Request, Response and Cancel frames travel in datagrams. A datagram
// that fails these checks is dropped whole.

// DatagramOverhead is the bytes a datagram adds to its frame's header and
// body: the preface and the frame's fixed part.
const DatagramOverhead = PrefaceLen + HeaderSize

// Errors ParseDatagram returns. Each is a reason to drop the datagram.
var (
	ErrDatagramMagic  = errors.New("kiev/wire: datagram does not start with the kiev magic")
	ErrDatagramLength = errors.New("kiev/wire: datagram length does not match its frame's")
)

// BeginDatagram appends the preface and the fixed part of a frame; finish
// the frame with EndHeader and EndFrame at offset start+PrefaceLen, where
// start is len(b) on entry.
func BeginDatagram(b []byte, t Type, id uint64) []byte {
	b = AppendPreface(b, Version)
	return BeginFrame(b, t, id)
}

// ParseDatagram checks a datagram and returns its frame and the version
// its sender speaks. The frame aliases p.
func ParseDatagram(p []byte) (Frame, uint8, error) {
	if len(p) < PrefaceLen+lenSize || string(p[:len(Magic)]) != Magic {
		return Frame{}, 0, ErrDatagramMagic
	}
	v := p[len(Magic)]
	if v == 0 {
		return Frame{}, 0, ErrBadVersion
	}
	p = p[PrefaceLen:]
	if n := binary.BigEndian.Uint32(p); uint64(n) != uint64(len(p)-lenSize) {
		return Frame{}, 0, ErrDatagramLength
	}
	// The checks of Parse, without its formatted errors: a flood of bad
	// datagrams must not allocate.
	p = p[lenSize:]
	if len(p) < fixedSize || fixedSize+int(binary.BigEndian.Uint16(p[10:12])) > len(p) {
		return Frame{}, 0, ErrMalformed
	}
	f, err := Parse(p)
	return f, v, err
}

package codec

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Reading scalars in place. Each accepts exactly the wire types that the
// library's Decoder method of the same name accepts (DecodeInt64 and so
// on, in decode_number.go, decode_string.go and decode_slice.go), with
// the same conversions, and reads a type code, or a one-byte integer or
// length, through d.r.ReadByte, as the library does, so that the check of
// where codes may be read applies alike.

// peekCode is the library's PeekCode.
func (d *msgpackDecoder) peekCode() (byte, error) {
	c, err := d.r.ReadByte()
	if err == nil {
		d.r.pos--
	}
	return c, err
}

// number reads the integer whose code is c, as the library's int and uint
// do: fixints and signed widths sign-extended, unsigned ones
// zero-extended. ok is false if c is no integer.
func (d *msgpackDecoder) number(c byte) (n uint64, ok bool, err error) {
	if msgpcode.IsFixedNum(c) {
		return uint64(int8(c)), true, nil
	}
	switch c {
	case msgpcode.Uint8, msgpcode.Int8:
		v, err := d.r.ReadByte()
		if c == msgpcode.Int8 {
			return uint64(int8(v)), true, err
		}
		return uint64(v), true, err
	case msgpcode.Uint16, msgpcode.Int16:
		n, err := d.r.bigEndian(2)
		if c == msgpcode.Int16 {
			n = uint64(int16(n))
		}
		return n, true, err
	case msgpcode.Uint32, msgpcode.Int32:
		n, err := d.r.bigEndian(4)
		if c == msgpcode.Int32 {
			n = uint64(int32(n))
		}
		return n, true, err
	case msgpcode.Uint64, msgpcode.Int64:
		n, err := d.r.bigEndian(8)
		return n, true, err
	}
	return 0, false, nil
}

// integer is the library's int (and, but for the type, uint): nil is 0.
func (d *msgpackDecoder) integer(c byte, what string) (uint64, error) {
	if c == msgpcode.Nil {
		return 0, nil
	}
	n, ok, err := d.number(c)
	if !ok {
		return 0, fmt.Errorf("msgpack: invalid code=%x decoding %s", c, what)
	}
	return n, err
}

func (d *msgpackDecoder) int64() (int64, error) {
	c, err := d.r.ReadByte()
	if err != nil {
		return 0, err
	}
	n, err := d.integer(c, "int64")
	return int64(n), err
}

func (d *msgpackDecoder) uint64() (uint64, error) {
	c, err := d.r.ReadByte()
	if err != nil {
		return 0, err
	}
	return d.integer(c, "uint64")
}

func (d *msgpackDecoder) bool() (bool, error) {
	c, err := d.r.ReadByte()
	if err != nil {
		return false, err
	}
	switch c {
	case msgpcode.Nil, msgpcode.False:
		return false, nil
	case msgpcode.True:
		return true, nil
	}
	return false, fmt.Errorf("msgpack: invalid code=%x decoding bool", c)
}

// float32 also takes an integer, converted, as the library's does.
func (d *msgpackDecoder) float32() (float32, error) {
	c, err := d.r.ReadByte()
	if err != nil {
		return 0, err
	}
	if c == msgpcode.Float {
		n, err := d.r.bigEndian(4)
		return math.Float32frombits(uint32(n)), err
	}
	n, err := d.integer(c, "float32")
	return float32(int64(n)), err
}

// float64 also takes a float32 and an integer, converted.
func (d *msgpackDecoder) float64() (float64, error) {
	c, err := d.r.ReadByte()
	if err != nil {
		return 0, err
	}
	switch c {
	case msgpcode.Float:
		n, err := d.r.bigEndian(4)
		return float64(math.Float32frombits(uint32(n))), err
	case msgpcode.Double:
		n, err := d.r.bigEndian(8)
		return math.Float64frombits(n), err
	}
	n, err := d.integer(c, "float64")
	return float64(int64(n)), err
}

// bytesLen is the library's DecodeBytesLen: a str, a bin, or nil (-1).
func (d *msgpackDecoder) bytesLen() (int, error) {
	c, err := d.r.ReadByte()
	if err != nil {
		return 0, err
	}
	if c == msgpcode.Nil {
		return -1, nil
	}
	if msgpcode.IsFixedString(c) {
		return int(c & msgpcode.FixedStrMask), nil
	}
	switch c {
	case msgpcode.Str8, msgpcode.Bin8:
		n, err := d.r.ReadByte()
		return int(n), err
	case msgpcode.Str16, msgpcode.Bin16:
		n, err := d.r.bigEndian(2)
		return int(n), err
	case msgpcode.Str32, msgpcode.Bin32:
		n, err := d.r.bigEndian(4)
		return int(n), err
	}
	return 0, fmt.Errorf("msgpack: invalid code=%x decoding string/bytes length", c)
}

// string is the library's DecodeString: nil and "" are "".
func (d *msgpackDecoder) string() (string, error) {
	n, err := d.bytesLen()
	if err != nil || n <= 0 {
		return "", err
	}
	b, err := d.r.next(n)
	return string(b), err
}

// mapLen is the library's DecodeMapLen: nil is -1. Unlike it, mapLen
// takes no extension for a map: plan.decode calls it only on a map's code
// or nil.
func (d *msgpackDecoder) mapLen() (int, error) {
	return d.containerLen(msgpcode.FixedMapLow, msgpcode.Map16, msgpcode.Map32, "map")
}

// arrayLen is the library's DecodeArrayLen: nil is -1.
func (d *msgpackDecoder) arrayLen() (int, error) {
	return d.containerLen(msgpcode.FixedArrayLow, msgpcode.Array16, msgpcode.Array32, "array")
}

// containerLen reads the length of a map or an array: nil (-1), a fixed
// code (fixed and the length in its low four bits), or a 16- or 32-bit
// length after c16 or c32.
func (d *msgpackDecoder) containerLen(fixed, c16, c32 byte, what string) (int, error) {
	c, err := d.r.ReadByte()
	if err != nil {
		return 0, err
	}
	switch {
	case c == msgpcode.Nil:
		return -1, nil
	case c&0xf0 == fixed: // fixmap 0x80-0x8f, fixarray 0x90-0x9f
		return int(c & 0x0f), nil
	case c == c16:
		n, err := d.r.bigEndian(2)
		return int(n), err
	case c == c32:
		n, err := d.r.bigEndian(4)
		return int(n), err
	}
	return 0, fmt.Errorf("msgpack: invalid code=%x decoding %s length", c, what)
}

// decodeBytes is the library's Decode into a []byte (bytesPtr and readN
// in decode_string.go and decode.go): nil makes it nil; a slice with room
// is reused, from its start; otherwise the bytes go into a new slice,
// filled by one append from the input, so that a large payload is copied
// once and never zeroed first.
func decodeBytes(d *msgpackDecoder, p unsafe.Pointer) error {
	ptr := (*[]byte)(p)
	n, err := d.bytesLen()
	if err != nil {
		return err
	}
	if n == -1 {
		*ptr = nil
		return nil
	}
	src, err := d.r.next(n)
	if err != nil {
		return err
	}
	b := *ptr
	switch {
	case b == nil && n == 0:
		*ptr = []byte{}
	case n <= cap(b):
		*ptr = b[:copy(b[:n], src)]
	default:
		*ptr = append(b[:0:0], src...)
	}
	return nil
}

// decodeStrings decodes a []string through the library's Decode, where
// nil leaves the slice unchanged.
func decodeStrings(d *msgpackDecoder, p unsafe.Pointer) error {
	return d.lib().Decode((*[]string)(p))
}

package codec

import (
	"fmt"
	"math"
	"strconv"
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

// string is the library's DecodeString: nil and "" are "". old is the
// string the result replaces: if the two are equal, old is returned, so
// that a value decoded again into costs no allocation where its strings
// did not change. Others are copied into the arena (str).
func (d *msgpackDecoder) string(old string) (string, error) {
	n, err := d.bytesLen()
	if err != nil || n <= 0 {
		return "", err
	}
	b, err := d.r.next(n)
	switch {
	case err != nil:
		return "", err
	case string(b) == old:
		return old, nil
	}
	return d.str(b), nil
}

// The string arena. The strings of one message are copied into shared
// allocations of up to arenaSize bytes, so that a message with many
// short strings costs one allocation, not one a string. A string keeps
// its whole allocation alive, which is why the arena is small, takes no
// string longer than arenaMaxString, and is sized by what the last
// message of the type needed (msgpackPlan.strBytes), not by guess.
const (
	arenaSize      = 1024
	arenaMaxString = 256
)

// str returns a copy of b as a string, from the arena if it fits.
func (d *msgpackDecoder) str(b []byte) string {
	n := len(b)
	if n > arenaMaxString {
		return string(b)
	}
	d.strBytes += n
	if n > len(d.arena) {
		// Room for what the last message held beyond this point, but
		// no more than the input left could hold.
		size := max(n, d.strHint-d.strBytes+n)
		d.arena = make([]byte, min(size, arenaSize, n+d.r.Len()))
	}
	s := d.arena[:n:n]
	d.arena = d.arena[n:]
	copy(s, b)
	return unsafe.String(&s[0], n)
}

// enter checks, as checkMsgpack does, the array or map of elems values
// whose header was just read: each value takes at least a byte, so there
// must be as many bytes left; and a container with values must not nest
// deeper than maxMsgpackDepth. It counts the container as open until
// leave. A plan calls it before it allocates anything for the values.
func (d *msgpackDecoder) enter(elems int) error {
	switch {
	case elems <= 0:
		return nil
	case elems > d.r.Len():
		return fmt.Errorf("a container declares %d values but only %d bytes remain", elems, d.r.Len())
	case d.depth >= maxMsgpackDepth:
		return errMsgpackDepth
	}
	d.depth++
	return nil
}

// leave closes the container that enter opened.
func (d *msgpackDecoder) leave(elems int) {
	if elems > 0 {
		d.depth--
	}
}

// skip skips the next value, which names no field, checking it whole as
// checkMsgpack would.
func (d *msgpackDecoder) skip() error {
	next, stack, err := skipMsgpackValue(d.r.data, d.r.pos, d.stack, maxMsgpackDepth-d.depth)
	d.stack = stack
	if err != nil {
		return err
	}
	d.r.pos = next
	return nil
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

// decodeStrings decodes a []string as the library's decodeStringSlicePtr
// does: nil leaves the slice unchanged; a slice with room for n strings is
// reused, from its start; and the slice is set only once all n strings
// are read.
func decodeStrings(d *msgpackDecoder, p unsafe.Pointer) error {
	sp := (*[]string)(p)
	n, err := d.arrayLen()
	if err != nil || n == -1 {
		return err
	}
	if err := d.enter(n); err != nil {
		return err
	}
	s := *sp
	if s == nil || cap(s) < n {
		s = make([]string, n)
	} else {
		s = s[:n]
	}
	for i := range s {
		v, err := d.string(s[i])
		if err != nil {
			return &msgpackFieldError{path: "[" + strconv.Itoa(i) + "]", err: err}
		}
		s[i] = v
	}
	d.leave(n)
	*sp = s
	return nil
}

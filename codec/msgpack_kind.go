package codec

import (
	"encoding/binary"
	"reflect"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// A scalarKind names a scalar field that a plan reads or writes in place
// through a switch, rather than through a function value: most fields of
// a struct are scalars, and so cost no indirect call. Each case does what
// the scalar's function in msgpackScalars or msgpackScalarEncoders does.
type scalarKind uint8

const (
	kindNone scalarKind = iota // not a scalar: the field's function
	kindBool
	kindInt
	kindInt8
	kindInt16
	kindInt32
	kindInt64
	kindUint
	kindUint8
	kindUint16
	kindUint32
	kindUint64
	kindFloat32
	kindFloat64
	kindString
)

var scalarKinds = [...]scalarKind{
	reflect.Bool:    kindBool,
	reflect.Int:     kindInt,
	reflect.Int8:    kindInt8,
	reflect.Int16:   kindInt16,
	reflect.Int32:   kindInt32,
	reflect.Int64:   kindInt64,
	reflect.Uint:    kindUint,
	reflect.Uint8:   kindUint8,
	reflect.Uint16:  kindUint16,
	reflect.Uint32:  kindUint32,
	reflect.Uint64:  kindUint64,
	reflect.Float32: kindFloat32,
	reflect.Float64: kindFloat64,
	reflect.String:  kindString,
}

// kindOf returns the scalarKind of t, a type that the plans already take
// (no encoding or decoding methods), or kindNone.
func kindOf(t reflect.Type) scalarKind {
	if k := t.Kind(); int(k) < len(scalarKinds) {
		return scalarKinds[k]
	}
	return kindNone
}

// decodeScalar decodes the next value into the scalar of kind k at p.
func decodeScalar(d *msgpackDecoder, k scalarKind, p unsafe.Pointer) error {
	switch k {
	case kindString:
		return decodeString(d, (*string)(p))
	case kindBool:
		return decodeBool(d, (*bool)(p))
	case kindFloat32:
		return decodeFloat32(d, (*float32)(p))
	case kindFloat64:
		return decodeFloat64(d, (*float64)(p))
	}
	if n, ok := d.fastInteger(); ok {
		storeInteger(k, p, n)
		return nil
	}
	c, err := d.r.ReadByte()
	if err != nil {
		return err
	}
	what := "int64"
	if k >= kindUint {
		what = "uint64"
	}
	n, err := d.integer(c, what)
	if err != nil {
		return err
	}
	storeInteger(k, p, n)
	return nil
}

// fastInteger reads the next value as integer does, if it is a fixnum or
// an 8-, 16- or 32-bit integer whose bytes are all there, and no codes are
// marked (see msgpackDecoder.lib); else it reads nothing and returns
// false.
func (d *msgpackDecoder) fastInteger() (uint64, bool) {
	b := d.r.data[d.r.pos:]
	if len(b) == 0 || len(d.r.codes) > 0 {
		return 0, false
	}
	var n uint64
	switch c := b[0]; {
	case c <= msgpcode.PosFixedNumHigh || c >= msgpcode.NegFixedNumLow:
		d.r.pos++
		return uint64(int8(c)), true
	case len(b) < 5:
		return 0, false
	case c == msgpcode.Uint32:
		n = uint64(binary.BigEndian.Uint32(b[1:]))
	case c == msgpcode.Int32:
		n = uint64(int32(binary.BigEndian.Uint32(b[1:])))
	case c == msgpcode.Uint16:
		d.r.pos += 3
		return uint64(binary.BigEndian.Uint16(b[1:])), true
	case c == msgpcode.Int16:
		d.r.pos += 3
		return uint64(int16(binary.BigEndian.Uint16(b[1:]))), true
	case c == msgpcode.Uint8:
		d.r.pos += 2
		return uint64(b[1]), true
	case c == msgpcode.Int8:
		d.r.pos += 2
		return uint64(int8(b[1])), true
	default:
		return 0, false
	}
	d.r.pos += 5
	return n, true
}

// storeInteger stores n in the integer of kind k at p, truncating, as
// decodeInt and decodeUint convert.
func storeInteger(k scalarKind, p unsafe.Pointer, n uint64) {
	switch k {
	case kindInt, kindUint:
		*(*uint)(p) = uint(n)
	case kindInt8, kindUint8:
		*(*uint8)(p) = uint8(n)
	case kindInt16, kindUint16:
		*(*uint16)(p) = uint16(n)
	case kindInt32, kindUint32:
		*(*uint32)(p) = uint32(n)
	case kindInt64, kindUint64:
		*(*uint64)(p) = n
	}
}

// appendScalar appends the encoding of the scalar of kind k at p.
func appendScalar(b []byte, k scalarKind, p unsafe.Pointer) []byte {
	switch k {
	case kindString:
		return appendString(b, *(*string)(p))
	case kindBool:
		return appendBool(b, *(*bool)(p))
	case kindInt:
		return appendInt(b, int64(*(*int)(p)))
	case kindInt8:
		return appendInt(b, int64(*(*int8)(p)))
	case kindInt16:
		return appendInt(b, int64(*(*int16)(p)))
	case kindInt32:
		return appendInt(b, int64(*(*int32)(p)))
	case kindInt64:
		return appendInt(b, *(*int64)(p))
	case kindUint:
		return appendUint(b, uint64(*(*uint)(p)))
	case kindUint8:
		return appendUint(b, uint64(*(*uint8)(p)))
	case kindUint16:
		return appendUint(b, uint64(*(*uint16)(p)))
	case kindUint32:
		return appendUint(b, uint64(*(*uint32)(p)))
	case kindUint64:
		return appendUint(b, *(*uint64)(p))
	case kindFloat32:
		return appendFloat32(b, *(*float32)(p))
	}
	return appendFloat64(b, *(*float64)(p))
}

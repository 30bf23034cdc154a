package codec

import (
	"math"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// encode appends the encoding of the message at m, as the library's
// Marshal writes it: fields in the order of their numbers, a zero value
// left out, repeated scalars packed, then the unknown fields. It reports
// false, having appended nothing, if a string is not UTF-8: the library
// then returns its error.
func (p *protoPlan) encode(b []byte, m unsafe.Pointer) ([]byte, bool) {
	start := len(b)
	for _, i := range p.ordered {
		f := &p.fields[i]
		ptr := unsafe.Add(m, f.offset)
		var ok bool
		if b, ok = f.append(b, ptr); !ok {
			return b[:start], false
		}
	}
	return append(b, *(*[]byte)(unsafe.Add(m, p.unknown))...), true
}

// append appends the field at ptr, if it is not a zero value.
func (f *protoFieldPlan) append(b []byte, ptr unsafe.Pointer) ([]byte, bool) {
	switch {
	case f.list && f.wire != protowire.BytesType:
		return f.appendPacked(b, ptr), true
	case f.list && f.kind == protoreflect.StringKind:
		for _, s := range *(*[]string)(ptr) {
			if !validUTF8(s) {
				return b, false
			}
			b = protowire.AppendString(protowire.AppendTag(b, f.num, protowire.BytesType), s)
		}
		return b, true
	case f.list:
		for _, v := range *(*[][]byte)(ptr) {
			b = protowire.AppendBytes(protowire.AppendTag(b, f.num, protowire.BytesType), v)
		}
		return b, true
	case f.kind == protoreflect.StringKind:
		s := *(*string)(ptr)
		if s == "" {
			return b, true
		}
		if !validUTF8(s) {
			return b, false
		}
		return protowire.AppendString(append(b, f.tag...), s), true
	case f.kind == protoreflect.BytesKind:
		if v := *(*[]byte)(ptr); len(v) > 0 {
			b = protowire.AppendBytes(protowire.AppendTag(b, f.num, protowire.BytesType), v)
		}
		return b, true
	}
	x, zero := f.load(ptr)
	if zero {
		return b, true
	}
	return appendScalarValue(append(b, f.tag...), f.wire, x), true
}

// load returns the scalar at ptr as its wire value, and whether it is
// the zero value that proto3 leaves out (-0.0 is not).
func (f *protoFieldPlan) load(ptr unsafe.Pointer) (x uint64, zero bool) {
	switch f.kind {
	case protoreflect.BoolKind:
		if *(*bool)(ptr) {
			return 1, false
		}
		return 0, true
	case protoreflect.FloatKind:
		x = uint64(math.Float32bits(*(*float32)(ptr)))
	case protoreflect.DoubleKind:
		x = math.Float64bits(*(*float64)(ptr))
	default:
		x = f.wireValue(ptr)
	}
	return x, x == 0
}

// wireValue returns the integer at ptr, of f's kind, as the varint or
// fixed-size value the library writes.
func (f *protoFieldPlan) wireValue(ptr unsafe.Pointer) uint64 {
	switch f.kind {
	case protoreflect.BoolKind:
		return protowire.EncodeBool(*(*bool)(ptr))
	case protoreflect.EnumKind, protoreflect.Int32Kind:
		return uint64(*(*int32)(ptr)) // sign-extended, as the library writes it
	case protoreflect.Sint32Kind:
		return protowire.EncodeZigZag(int64(*(*int32)(ptr)))
	case protoreflect.Sint64Kind:
		return protowire.EncodeZigZag(*(*int64)(ptr))
	case protoreflect.Sfixed32Kind, protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.FloatKind:
		return uint64(*(*uint32)(ptr))
	}
	return *(*uint64)(ptr) // int64, uint64, fixed64, sfixed64, double
}

// appendScalarValue appends x with wire type wtyp.
func appendScalarValue(b []byte, wtyp protowire.Type, x uint64) []byte {
	switch wtyp {
	case protowire.Fixed32Type:
		return protowire.AppendFixed32(b, uint32(x))
	case protowire.Fixed64Type:
		return protowire.AppendFixed64(b, x)
	}
	for x >= 0x80 {
		b = append(b, byte(x)|0x80)
		x >>= 7
	}
	return append(b, byte(x))
}

// appendPacked appends a repeated scalar field as one packed record, or
// nothing if it is empty.
func (f *protoFieldPlan) appendPacked(b []byte, ptr unsafe.Pointer) []byte {
	// Any slice header: its element size is f's.
	n := len(*(*[]byte)(ptr))
	if n == 0 {
		return b
	}
	size := f.elemSize()
	elems := unsafe.Pointer(unsafe.SliceData(*(*[]byte)(ptr)))
	length := n * size
	if f.wire == protowire.VarintType {
		length = 0
		for i := range n {
			length += protowire.SizeVarint(f.wireValue(unsafe.Add(elems, i*size)))
		}
	}
	b = protowire.AppendVarint(protowire.AppendTag(b, f.num, protowire.BytesType), uint64(length))
	for i := range n {
		b = appendScalarValue(b, f.wire, f.wireValue(unsafe.Add(elems, i*size)))
	}
	return b
}

// elemSize is the size in memory of one value of f's Go kind.
func (f *protoFieldPlan) elemSize() int {
	switch f.kind {
	case protoreflect.BoolKind:
		return 1
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind, protoreflect.DoubleKind:
		return 8
	}
	return 4
}

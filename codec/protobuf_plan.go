package codec

// This file holds the protobuf decoding fast path (encoding is in
// protobuf_encode.go). The library copies
// every string and byte slice of a message into an allocation of its own:
// eight for rpcx-benchmark's 581 B message. For a plain proto3 message
// (scalars, strings, bytes and repeated ones of those, nothing nested) a
// plan compiled once per type decodes instead, writing each field at its
// offset in the generated struct, with the strings and short byte slices
// of one message copied into one arena (see msgpackDecoder.str).
//
// A plan accepts only what it models and hands anything else to the
// library: at an unknown field (the library keeps it in the message's
// unknown fields), a wire type other than the field's, a group, or
// malformed input, it stops, and the library decodes the input again from
// the start, so the result, or the error, is the library's own
// (FuzzProtobufPlan checks that). Like the library, a plan checks that
// strings are UTF-8.

import (
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// protoPlans caches the plan of each type passed to protoUnmarshal: a
// *protoPlan, nil when the library must decode the type.
var protoPlans sync.Map // reflect.Type -> *protoPlan

// protoPlanOf returns the plan that decodes into m, or nil.
func protoPlanOf(m proto.Message) *protoPlan {
	t := reflect.TypeOf(m)
	if p, ok := protoPlans.Load(t); ok {
		return p.(*protoPlan)
	}
	p := buildProtoPlan(t, m.ProtoReflect().Descriptor())
	// Two goroutines may build the same plan at once; both are equal.
	protoPlans.Store(t, p)
	return p
}

// A protoPlan decodes a plain proto3 message.
type protoPlan struct {
	fields []protoFieldPlan
	// byNum maps a field number to 1 + its index in fields, 0 for none;
	// ordered lists the indexes in fields by number, the order of the
	// library's encoding.
	byNum   []uint16
	ordered []uint16
	// unknown is the offset of the message's unknownFields.
	unknown      uintptr
	foundUnknown bool
	// To reset the message: runs of its scalar fields (and the padding
	// between them), cleared as bytes; the offsets of its slices; and
	// those of its singular strings, in the order of their bits.
	scalars []memRun
	slices  []uintptr
	strs    []uintptr
	// strBytes is the length of the strings and bytes that the last
	// message decoded copied into the arena, up to arenaSize: the size of
	// the next arena.
	strBytes atomic.Int32
}

// A memRun is n bytes at offset off in a struct.
type memRun struct{ off, n uintptr }

// A protoFieldPlan decodes one field.
type protoFieldPlan struct {
	offset uintptr
	num    protowire.Number
	tag    string // the field's tag, encoded, with its wire type for one value
	kind   protoreflect.Kind
	goKind reflect.Kind   // of the field, or of its elements if list
	wire   protowire.Type // of one value
	list   bool
	// str is the field's bit in the set of singular strings seen, or 0.
	str uint64
}

// The protobuf kinds a plan decodes, with the Go kind of the generated
// field (or of its elements, for a repeated field).
var protoPlanKinds = map[protoreflect.Kind]reflect.Kind{
	protoreflect.BoolKind:     reflect.Bool,
	protoreflect.EnumKind:     reflect.Int32,
	protoreflect.Int32Kind:    reflect.Int32,
	protoreflect.Sint32Kind:   reflect.Int32,
	protoreflect.Sfixed32Kind: reflect.Int32,
	protoreflect.Int64Kind:    reflect.Int64,
	protoreflect.Sint64Kind:   reflect.Int64,
	protoreflect.Sfixed64Kind: reflect.Int64,
	protoreflect.Uint32Kind:   reflect.Uint32,
	protoreflect.Fixed32Kind:  reflect.Uint32,
	protoreflect.Uint64Kind:   reflect.Uint64,
	protoreflect.Fixed64Kind:  reflect.Uint64,
	protoreflect.FloatKind:    reflect.Float32,
	protoreflect.DoubleKind:   reflect.Float64,
	protoreflect.StringKind:   reflect.String,
	protoreflect.BytesKind:    reflect.Slice, // of bytes
}

// maxPlanFieldNumber bounds byNum.
const maxPlanFieldNumber = 4096

// buildProtoPlan returns the plan for t, a pointer to a generated struct
// with the descriptor md, or nil if the plan would not model it: a
// message that is not proto3, or has a oneof, extensions, a nested
// message or map, or a field with presence; or a struct with any field
// besides the generated message state and the fields of md (the opaque
// API's structs, for one).
func buildProtoPlan(t reflect.Type, md protoreflect.MessageDescriptor) *protoPlan {
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct ||
		md.Syntax() != protoreflect.Proto3 || md.Oneofs().Len() > 0 || md.ExtensionRanges().Len() > 0 {
		return nil
	}
	st := t.Elem()
	p := &protoPlan{}
	byNum := map[protowire.Number]int{}
	var strs uint
	lastScalar := -2 // the index in st of the last scalar field
	for i := range st.NumField() {
		sf := st.Field(i)
		switch sf.Name {
		case "state", "sizeCache":
			continue
		case "unknownFields":
			if sf.Type.Kind() != reflect.Slice || sf.Type.Elem().Kind() != reflect.Uint8 {
				return nil
			}
			p.unknown, p.foundUnknown = sf.Offset, true
			continue
		}
		fd := planField(md, sf)
		if fd == nil {
			return nil
		}
		f := protoFieldPlan{offset: sf.Offset, num: fd.Number(), kind: fd.Kind(), goKind: protoPlanKinds[fd.Kind()], wire: wireType(fd.Kind()), list: fd.IsList()}
		f.tag = string(protowire.AppendTag(nil, f.num, f.wire))
		switch end := sf.Offset + sf.Type.Size(); {
		case f.kind == protoreflect.StringKind && !f.list:
			if strs == 64 {
				return nil
			}
			f.str = 1 << strs
			strs++
			p.strs = append(p.strs, sf.Offset)
		case f.list || f.goKind == reflect.Slice:
			p.slices = append(p.slices, sf.Offset)
		case len(p.scalars) > 0 && lastScalar == i-1:
			r := &p.scalars[len(p.scalars)-1]
			r.n = end - r.off
			lastScalar = i
		default:
			p.scalars = append(p.scalars, memRun{sf.Offset, end - sf.Offset})
			lastScalar = i
		}
		byNum[fd.Number()] = len(p.fields)
		p.fields = append(p.fields, f)
	}
	if !p.foundUnknown || len(p.fields) != md.Fields().Len() {
		return nil
	}
	maxNum := protowire.Number(0)
	for n := range byNum {
		maxNum = max(maxNum, n)
	}
	p.byNum = make([]uint16, maxNum+1)
	for n, i := range byNum {
		p.byNum[n] = uint16(i + 1)
	}
	for _, i := range p.byNum {
		if i > 0 {
			p.ordered = append(p.ordered, i-1)
		}
	}
	return p
}

// planField returns the descriptor of the field that the generated struct
// field sf holds, or nil if a plan cannot decode it: no such field, or a
// kind, cardinality or Go type the plan does not model.
func planField(md protoreflect.MessageDescriptor, sf reflect.StructField) protoreflect.FieldDescriptor {
	tag := strings.Split(sf.Tag.Get("protobuf"), ",")
	if len(tag) < 2 || !sf.IsExported() {
		return nil
	}
	num, err := strconv.Atoi(tag[1])
	if err != nil || num <= 0 || num > maxPlanFieldNumber {
		return nil
	}
	fd := md.Fields().ByNumber(protowire.Number(num))
	if fd == nil || fd.HasPresence() || fd.IsMap() || fd.IsExtension() || fd.Cardinality() == protoreflect.Required {
		return nil
	}
	goKind, ok := protoPlanKinds[fd.Kind()]
	typ := sf.Type
	if fd.IsList() {
		if typ.Kind() != reflect.Slice {
			return nil
		}
		typ = typ.Elem()
	}
	switch {
	case !ok || typ.Kind() != goKind:
		return nil
	case goKind == reflect.Slice && typ.Elem().Kind() != reflect.Uint8:
		return nil
	}
	return fd
}

// A protoDecoder holds the state of one decode.
type protoDecoder struct {
	arena             []byte
	strBytes, strHint int
	seen              uint64 // the singular strings decoded (protoFieldPlan.str)
}

// decode decodes data into the message at m, which it first resets as
// the library would, except that a string equal to the one its field
// holds is kept. It reports false if the library must decode data: the
// message then holds a partial decode.
func (p *protoPlan) decode(data []byte, m unsafe.Pointer) bool {
	for _, r := range p.scalars {
		clear(unsafe.Slice((*byte)(unsafe.Add(m, r.off)), r.n))
	}
	for _, off := range p.slices {
		// Any slice header: only its pointer, length and capacity.
		*(*[]byte)(unsafe.Add(m, off)) = nil
	}
	*(*[]byte)(unsafe.Add(m, p.unknown)) = nil
	d := protoDecoder{strHint: int(p.strBytes.Load())}
	for b := data; len(b) > 0; {
		tag, n := varint(b)
		num, wtyp := tag>>3, protowire.Type(tag&7)
		if n < 0 || num >= uint64(len(p.byNum)) || p.byNum[num] == 0 {
			return false
		}
		f := &p.fields[p.byNum[num]-1]
		b = b[n:]
		ptr := unsafe.Add(m, f.offset)
		if wtyp == f.wire && f.wire == protowire.VarintType && !f.list {
			// Most fields: a number sent as a varint.
			x, n := varint(b)
			if n < 0 {
				return false
			}
			f.store(ptr, x)
			b = b[n:]
			continue
		}
		if n = f.decode(&d, b, wtyp, ptr); n < 0 {
			return false
		}
		b = b[n:]
	}
	for i, off := range p.strs {
		if d.seen&(1<<i) == 0 {
			*(*string)(unsafe.Add(m, off)) = ""
		}
	}
	if d.strBytes != d.strHint {
		p.strBytes.Store(int32(min(d.strBytes, arenaSize)))
	}
	return true
}

// wireType is the wire type of a single value of kind k.
func wireType(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.StringKind, protoreflect.BytesKind:
		return protowire.BytesType
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	}
	return protowire.VarintType
}

// decode decodes the value of f that b begins with, sent with wire type
// wtyp, into the field at ptr, and returns its length, or -1 if the
// library must decode the message.
func (f *protoFieldPlan) decode(d *protoDecoder, b []byte, wtyp protowire.Type, ptr unsafe.Pointer) int {
	if wtyp != f.wire {
		if f.list && wtyp == protowire.BytesType {
			return f.decodePacked(b, ptr)
		}
		return -1
	}
	switch f.kind {
	case protoreflect.StringKind:
		v, n := protowire.ConsumeBytes(b)
		if n < 0 || !validUTF8(unsafe.String(unsafe.SliceData(v), len(v))) {
			return -1
		}
		if f.list {
			sp := (*[]string)(ptr)
			*sp = append(*sp, d.str(v, len(b)-n))
			return n
		}
		d.seen |= f.str
		if sp := (*string)(ptr); string(v) != *sp {
			*sp = d.str(v, len(b)-n)
		}
		return n
	case protoreflect.BytesKind:
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return -1
		}
		if f.list {
			bp := (*[][]byte)(ptr)
			*bp = append(*bp, d.bytes(v, len(b)-n, []byte{}))
		} else {
			*(*[]byte)(ptr) = d.bytes(v, len(b)-n, nil)
		}
		return n
	}
	x, n := consumeScalar(b, wtyp)
	if n >= 0 {
		f.store(ptr, x)
	}
	return n
}

// decodePacked decodes the packed values of a repeated scalar field that
// b begins with, appending them to the slice at ptr.
func (f *protoFieldPlan) decodePacked(b []byte, ptr unsafe.Pointer) int {
	v, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return -1
	}
	wtyp := f.wire
	f.reserve(ptr, packedCount(v, wtyp))
	for len(v) > 0 {
		x, m := consumeScalar(v, wtyp)
		if m < 0 {
			return -1
		}
		f.store(ptr, x)
		v = v[m:]
	}
	return n
}

// packedCount returns how many values of wire type wtyp the packed v
// holds, as the library counts them to allocate once: each varint ends
// in a byte below 0x80.
func packedCount(v []byte, wtyp protowire.Type) int {
	switch wtyp {
	case protowire.Fixed32Type:
		return len(v) / 4
	case protowire.Fixed64Type:
		return len(v) / 8
	}
	n := 0
	for _, c := range v {
		if c < 0x80 {
			n++
		}
	}
	return n
}

// reserve makes room for n more values in the slice at ptr.
func (f *protoFieldPlan) reserve(ptr unsafe.Pointer, n int) {
	switch f.goKind {
	case reflect.Bool:
		grow[bool](ptr, n)
	case reflect.Int32, reflect.Uint32, reflect.Float32:
		grow[uint32](ptr, n)
	case reflect.Int64, reflect.Uint64, reflect.Float64:
		grow[uint64](ptr, n)
	}
}

// grow makes room for n more values in the []T at ptr.
func grow[T any](ptr unsafe.Pointer, n int) {
	s := (*[]T)(ptr)
	*s = slices.Grow(*s, n)
}

// varint reads the varint that b begins with, as protowire.ConsumeVarint
// does: at most 10 bytes, the last of them 0 or 1. It returns a negative
// length for a varint that is cut short or too long.
func varint(b []byte) (uint64, int) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), 1
	}
	var x uint64
	for i := 0; i < len(b) && i < 10; i++ {
		c := b[i]
		x |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if i == 9 && c > 1 {
				break
			}
			return x, i + 1
		}
	}
	return 0, -1
}

// consumeScalar reads the varint or fixed-size value that b begins with.
func consumeScalar(b []byte, wtyp protowire.Type) (uint64, int) {
	switch wtyp {
	case protowire.VarintType:
		return varint(b)
	case protowire.Fixed32Type:
		x, n := protowire.ConsumeFixed32(b)
		return uint64(x), n
	}
	return protowire.ConsumeFixed64(b)
}

// store converts x, read for f, as the library does, and stores it in
// the field at ptr, or appends it if f is repeated.
func (f *protoFieldPlan) store(ptr unsafe.Pointer, x uint64) {
	switch f.kind {
	case protoreflect.BoolKind:
		put(ptr, f.list, x != 0)
	case protoreflect.EnumKind, protoreflect.Int32Kind, protoreflect.Sfixed32Kind:
		put(ptr, f.list, int32(x))
	case protoreflect.Sint32Kind:
		put(ptr, f.list, int32(protowire.DecodeZigZag(x&math.MaxUint32)))
	case protoreflect.Int64Kind, protoreflect.Sfixed64Kind:
		put(ptr, f.list, int64(x))
	case protoreflect.Sint64Kind:
		put(ptr, f.list, protowire.DecodeZigZag(x))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		put(ptr, f.list, uint32(x))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		put(ptr, f.list, x)
	case protoreflect.FloatKind:
		put(ptr, f.list, math.Float32frombits(uint32(x)))
	case protoreflect.DoubleKind:
		put(ptr, f.list, math.Float64frombits(x))
	}
}

// put stores v at ptr, a *T, or appends it to the []T at ptr if list.
func put[T any](ptr unsafe.Pointer, list bool, v T) {
	if list {
		s := (*[]T)(ptr)
		*s = append(*s, v)
		return
	}
	*(*T)(ptr) = v
}

// str returns a copy of b as a string, from the arena if it fits. left is
// the length of the input after b, which bounds a new arena.
func (d *protoDecoder) str(b []byte, left int) string {
	if len(b) == 0 {
		return ""
	}
	s := d.bytes(b, left, nil)
	return unsafe.String(&s[0], len(s))
}

// bytes returns a copy of b, from the arena if it fits, with no room to
// append in place; empty returns empty.
func (d *protoDecoder) bytes(b []byte, left int, empty []byte) []byte {
	n := len(b)
	switch {
	case n == 0:
		return empty
	case n > arenaMaxString:
		return append([]byte(nil), b...)
	}
	d.strBytes += n
	if n > len(d.arena) {
		// Room for what the last message held beyond this point, but
		// no more than the input left could hold.
		size := max(n, d.strHint-d.strBytes+n)
		d.arena = make([]byte, min(size, arenaSize, n+left))
	}
	s := d.arena[:n:n]
	d.arena = d.arena[n:]
	copy(s, b)
	return s
}

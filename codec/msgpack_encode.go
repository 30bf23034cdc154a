package codec

// This file holds the msgpack encoding fast path, the twin of the decoding
// plan in msgpack_fast.go. msgpack v5 encodes through reflect.Value and
// looks up the encoder of every value it meets, each slice element
// included, in a sync.Map: for a small struct those lookups and the
// reflection cost more than the bytes. For a pointer to a plain struct,
// msgpackMarshal uses instead an encoding plan compiled once per type: a
// tree of small functions that read through typed pointers at fixed field
// offsets and append to the output.
//
// A plan must produce exactly the library's bytes, configured as in
// msgpackEncoders (the json fallback tag and compact integers). Fields,
// their order and their names are the decoding plan's (types.go,
// getFields), as are the omitempty and as_array options of a _msgpack
// field; maps follow encode_map.go (encodeStructValue and fields.OmitEmpty)
// and the values encode_value.go, encode_number.go and encode_slice.go.
// The types a plan takes are the decoding plan's plain types, and slices
// of any of them, except where an omitempty option would need the
// library's emptiness of a struct or of a type with an IsZero method.
// Differential tests and a fuzz target check plans against the library.

import (
	"encoding/binary"
	"math"
	"reflect"
	"sync"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// An encodeFunc appends the encoding of the Go value at p, whose type was
// fixed when the function was built.
type encodeFunc func(b []byte, p unsafe.Pointer) []byte

// msgpackEncodePlans caches, for each type passed to msgpackMarshal, the
// encodeFunc of the value it points to, or nil when the library must
// encode it.
var msgpackEncodePlans sync.Map // reflect.Type -> encodeFunc

// msgpackEncoderOf returns the function that encodes the struct v points
// to, for v a pointer to a plain struct, or nil if v must go through the
// library.
func msgpackEncoderOf(v any) encodeFunc {
	t := reflect.TypeOf(v)
	if f, ok := msgpackEncodePlans.Load(t); ok {
		return f.(encodeFunc)
	}
	var enc encodeFunc
	if t != nil && t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		b := encodeBuilder{lister: planBuilder{inlining: map[reflect.Type]bool{}}, plans: map[reflect.Type]*encodePlan{}}
		if p := b.structPlan(t.Elem()); p != nil {
			enc = p.encode
		}
	}
	// Two goroutines may build the same plan at once; both are equal.
	msgpackEncodePlans.Store(t, enc)
	return enc
}

// encodeWith appends to dst the encoding of v, a pointer for which
// msgpackEncoderOf returned enc: nil, or the struct.
func encodeWith(enc encodeFunc, dst []byte, v any) []byte {
	p := reflect.ValueOf(v).UnsafePointer()
	if p == nil {
		return append(dst, msgpcode.Nil)
	}
	return enc(dst, p)
}

// An encodePlan encodes a struct.
type encodePlan struct {
	fields  []encodeField // in the order of the library's fields.List
	asArray bool
	// omits is the library's hasOmitEmpty: some field has omitempty. Then,
	// encoded as a map, the struct also leaves out the fields that sit
	// behind a nil embedded pointer, which it otherwise sends as nil.
	omits bool
	// flat is set for a map of fields that all sit in the struct itself
	// (no embedded pointer on the way) and none omitempty.
	flat bool
}

// An encodeField encodes one field of a struct.
type encodeField struct {
	key []byte // the field's name, encoded
	// key16 is key padded to 16 bytes, and keyLen its length, if key
	// is no longer; else keyLen is 0.
	key16  [16]byte
	keyLen uint8
	via    []embedStep // through embedded structs, as in msgpackFieldPlan
	offset uintptr
	encode encodeFunc
	kind   scalarKind                  // if not kindNone, encoded by appendScalar instead
	empty  func(p unsafe.Pointer) bool // set with omitempty
}

// at returns the address of the field in the struct at ptr, or false if a
// nil embedded pointer is in the way.
func (f *encodeField) at(ptr unsafe.Pointer) (unsafe.Pointer, bool) {
	for _, s := range f.via {
		ptr = unsafe.Add(ptr, s.offset)
		if s.elem != nil {
			ptr = *(*unsafe.Pointer)(ptr)
			if ptr == nil {
				return nil, false
			}
		}
	}
	return unsafe.Add(ptr, f.offset), true
}

// omitted reports whether a map-encoded struct at ptr leaves f out, as the
// library's field.Omit does.
func (f *encodeField) omitted(ptr unsafe.Pointer) bool {
	fp, ok := f.at(ptr)
	return !ok || f.empty != nil && f.empty(fp)
}

func (p *encodePlan) encode(b []byte, ptr unsafe.Pointer) []byte {
	if p.flat {
		// The common shape, with no branch a field does not need.
		b = appendMapLen(b, len(p.fields))
		for i := range p.fields {
			f := &p.fields[i]
			if n := len(b); f.keyLen > 0 && cap(b)-n >= len(f.key16) {
				// One store of 16 bytes, rather than a copy of a few.
				*(*[16]byte)(b[n : n+16]) = f.key16
				b = b[:n+int(f.keyLen)]
			} else {
				b = append(b, f.key...)
			}
			fp := unsafe.Add(ptr, f.offset)
			switch f.kind { // the commonest kinds without a call more
			case kindBool:
				b = appendBool(b, *(*bool)(fp))
			case kindInt32:
				b = appendInt(b, int64(*(*int32)(fp)))
			case kindInt64:
				b = appendInt(b, *(*int64)(fp))
			case kindNone:
				b = f.encode(b, fp)
			default:
				b = appendScalar(b, f.kind, fp)
			}
		}
		return b
	}
	if p.asArray {
		b = appendArrayLen(b, len(p.fields))
		for i := range p.fields {
			b = p.fields[i].encodeIn(b, ptr)
		}
		return b
	}
	if !p.omits {
		b = appendMapLen(b, len(p.fields))
		for i := range p.fields {
			f := &p.fields[i]
			b = append(b, f.key...)
			b = f.encodeIn(b, ptr)
		}
		return b
	}
	n := 0
	for i := range p.fields {
		if !p.fields[i].omitted(ptr) {
			n++
		}
	}
	b = appendMapLen(b, n)
	for i := range p.fields {
		f := &p.fields[i]
		if f.omitted(ptr) {
			continue
		}
		b = append(b, f.key...)
		b = f.encodeIn(b, ptr)
	}
	return b
}

// encodeIn encodes the field of the struct at ptr: nil if a nil embedded
// pointer is in the way, as the library's field.EncodeValue does.
func (f *encodeField) encodeIn(b []byte, ptr unsafe.Pointer) []byte {
	fp, ok := f.at(ptr)
	switch {
	case !ok:
		return append(b, msgpcode.Nil)
	case f.kind != kindNone:
		return appendScalar(b, f.kind, fp)
	}
	return f.encode(b, fp)
}

// pointerEncoder encodes a pointer as the library's ptrEncoderFunc does:
// nil, or the value it points to.
func pointerEncoder(elem encodeFunc) encodeFunc {
	return func(b []byte, p unsafe.Pointer) []byte {
		v := *(*unsafe.Pointer)(p)
		if v == nil {
			return append(b, msgpcode.Nil)
		}
		return elem(b, v)
	}
}

// sliceHeader is the layout of every slice.
type sliceHeader struct {
	data     unsafe.Pointer
	len, cap int
}

// sliceEncoder encodes a slice of elements of size bytes each, as the
// library's encodeSliceValue does: nil, or an array.
func sliceEncoder(elem encodeFunc, size uintptr) encodeFunc {
	return func(b []byte, p unsafe.Pointer) []byte {
		s := (*sliceHeader)(p)
		if s.data == nil {
			return append(b, msgpcode.Nil)
		}
		b = appendArrayLen(b, s.len)
		for i := range s.len {
			b = elem(b, unsafe.Add(s.data, uintptr(i)*size))
		}
		return b
	}
}

// Scalars and slices of scalars, read through the unnamed type of their
// kind as in the decoding plan. With compact integers, the library sends
// every integer in its smallest form, whatever its Go type.

// scalarEncoders encodes one kind of scalar, as a value and as the
// elements of a slice, and tells its omitempty emptiness.
type scalarEncoders struct {
	value, slice encodeFunc
	empty        func(p unsafe.Pointer) bool
}

var msgpackScalarEncoders = map[reflect.Kind]scalarEncoders{
	reflect.Bool:    encodeScalar(appendBool),
	reflect.Int:     encodeScalar(func(b []byte, v int) []byte { return appendInt(b, int64(v)) }),
	reflect.Int8:    encodeScalar(func(b []byte, v int8) []byte { return appendInt(b, int64(v)) }),
	reflect.Int16:   encodeScalar(func(b []byte, v int16) []byte { return appendInt(b, int64(v)) }),
	reflect.Int32:   encodeScalar(func(b []byte, v int32) []byte { return appendInt(b, int64(v)) }),
	reflect.Int64:   encodeScalar(appendInt),
	reflect.Uint:    encodeScalar(func(b []byte, v uint) []byte { return appendUint(b, uint64(v)) }),
	reflect.Uint8:   encodeScalar(func(b []byte, v uint8) []byte { return appendUint(b, uint64(v)) }),
	reflect.Uint16:  encodeScalar(func(b []byte, v uint16) []byte { return appendUint(b, uint64(v)) }),
	reflect.Uint32:  encodeScalar(func(b []byte, v uint32) []byte { return appendUint(b, uint64(v)) }),
	reflect.Uint64:  encodeScalar(appendUint),
	reflect.Float32: encodeScalar(appendFloat32),
	reflect.Float64: encodeScalar(appendFloat64),
	reflect.String:  encodeScalar(appendString),
}

func encodeScalar[E comparable](appendValue func([]byte, E) []byte) scalarEncoders {
	var zero E
	return scalarEncoders{
		value: func(b []byte, p unsafe.Pointer) []byte {
			return appendValue(b, *(*E)(p))
		},
		slice: func(b []byte, p unsafe.Pointer) []byte {
			s := *(*[]E)(p)
			if s == nil {
				return append(b, msgpcode.Nil)
			}
			b = appendArrayLen(b, len(s))
			for _, v := range s {
				b = appendValue(b, v)
			}
			return b
		},
		// The zero value, or an empty string; -0.0 == 0 is empty too, as
		// in the library, and NaN is not.
		empty: func(p unsafe.Pointer) bool { return *(*E)(p) == zero },
	}
}

// emptySlice and emptyPointer are the library's emptiness of a slice (no
// elements, nil or not) and of a pointer (nil).
func emptySlice(p unsafe.Pointer) bool   { return (*sliceHeader)(p).len == 0 }
func emptyPointer(p unsafe.Pointer) bool { return *(*unsafe.Pointer)(p) == nil }

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, msgpcode.True)
	}
	return append(b, msgpcode.False)
}

// appendUint is the library's EncodeUint. Each case is one append, so
// one check of b's capacity.
func appendUint(b []byte, n uint64) []byte {
	switch {
	case n <= math.MaxInt8:
		return append(b, byte(n))
	case n <= math.MaxUint8:
		return append(b, msgpcode.Uint8, byte(n))
	case n <= math.MaxUint16:
		return append(b, msgpcode.Uint16, byte(n>>8), byte(n))
	case n <= math.MaxUint32:
		return append(b, msgpcode.Uint32, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return binary.BigEndian.AppendUint64(append(b, msgpcode.Uint64), n)
}

// appendInt is the library's EncodeInt.
func appendInt(b []byte, n int64) []byte {
	switch {
	case n >= 0:
		return appendUint(b, uint64(n))
	case n >= -32: // a negative fixint
		return append(b, byte(n))
	case n >= math.MinInt8:
		return append(b, msgpcode.Int8, byte(n))
	case n >= math.MinInt16:
		return append(b, msgpcode.Int16, byte(n>>8), byte(n))
	case n >= math.MinInt32:
		return append(b, msgpcode.Int32, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return binary.BigEndian.AppendUint64(append(b, msgpcode.Int64), uint64(n))
}

func appendFloat32(b []byte, v float32) []byte {
	return binary.BigEndian.AppendUint32(append(b, msgpcode.Float), math.Float32bits(v))
}

func appendFloat64(b []byte, v float64) []byte {
	return binary.BigEndian.AppendUint64(append(b, msgpcode.Double), math.Float64bits(v))
}

// appendString is the library's EncodeString, without interning.
func appendString(b []byte, s string) []byte {
	return append(appendStringLen(b, len(s)), s...)
}

func appendStringLen(b []byte, n int) []byte {
	switch {
	case n < 32:
		return append(b, msgpcode.FixedStrLow|byte(n))
	case n < 256:
		return append(b, msgpcode.Str8, byte(n))
	}
	return appendWideLen(b, n, msgpcode.Str16, msgpcode.Str32)
}

// appendBytes is the library's EncodeBytes: nil, or a bin.
func appendBytes(b []byte, p unsafe.Pointer) []byte {
	v := *(*[]byte)(p)
	if v == nil {
		return append(b, msgpcode.Nil)
	}
	if n := len(v); n < 256 {
		b = append(b, msgpcode.Bin8, byte(n))
	} else {
		b = appendWideLen(b, n, msgpcode.Bin16, msgpcode.Bin32)
	}
	return append(b, v...)
}

func appendArrayLen(b []byte, n int) []byte {
	if n < 16 {
		return append(b, msgpcode.FixedArrayLow|byte(n))
	}
	return appendWideLen(b, n, msgpcode.Array16, msgpcode.Array32)
}

func appendMapLen(b []byte, n int) []byte {
	if n < 16 {
		return append(b, msgpcode.FixedMapLow|byte(n))
	}
	return appendWideLen(b, n, msgpcode.Map16, msgpcode.Map32)
}

// appendWideLen appends a length too long for the short forms: code c16
// and two bytes, or c32 and four.
func appendWideLen(b []byte, n int, c16, c32 byte) []byte {
	if n <= math.MaxUint16 {
		return binary.BigEndian.AppendUint16(append(b, c16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, c32), uint32(n))
}

// Building encoding plans.

// encodeBuilder builds the encoding plan of one type. Any part that is not
// plain makes the whole plan nil. It lists fields with the decoding
// plan's builder (planBuilder.fields), so that both plans see the same
// fields.
type encodeBuilder struct {
	lister planBuilder
	// plans holds the plans built or being built, for recursive types.
	plans map[reflect.Type]*encodePlan
}

// isZeroerType is the library's isZeroer: omitempty asks such a type.
var isZeroerType = reflect.TypeFor[interface{ IsZero() bool }]()

// encoder returns the encodeFunc for a value of type t, or nil if t is
// not plain.
func (b *encodeBuilder) encoder(t reflect.Type) encodeFunc {
	if implementsAny(t, msgpackEncodeMethods) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		if p := b.structPlan(t); p != nil {
			return p.encode
		}
		return nil
	case reflect.Pointer:
		if elem := b.encoder(t.Elem()); elem != nil {
			return pointerEncoder(elem)
		}
		return nil
	case reflect.Slice:
		elem := t.Elem()
		switch {
		case elem.Kind() == reflect.Uint8:
			if implementsAny(elem, msgpackEncodeMethods) {
				return nil // the library would ignore them; stay on the safe side
			}
			return appendBytes
		case implementsAny(elem, msgpackEncodeMethods):
			return nil
		}
		if s, ok := msgpackScalarEncoders[elem.Kind()]; ok {
			return s.slice
		}
		if enc := b.encoder(elem); enc != nil {
			return sliceEncoder(enc, elem.Size())
		}
		return nil
	}
	return msgpackScalarEncoders[t.Kind()].value // nil if not a scalar
}

// empty returns the library's omitempty test for a value of type t, or nil
// if the plan leaves it to the library: structs, whose emptiness depends
// on their own fields' options, and types with an IsZero method.
func (b *encodeBuilder) empty(t reflect.Type) func(unsafe.Pointer) bool {
	if t.Implements(isZeroerType) || reflect.PointerTo(t).Implements(isZeroerType) {
		return nil
	}
	switch t.Kind() {
	case reflect.Slice:
		return emptySlice
	case reflect.Pointer:
		return emptyPointer
	}
	return msgpackScalarEncoders[t.Kind()].empty // nil for a struct
}

// structPlan returns the encoding plan of the struct type t, or nil.
func (b *encodeBuilder) structPlan(t reflect.Type) *encodePlan {
	if p, ok := b.plans[t]; ok {
		return p // built, or being built higher up the stack
	}
	if implementsAny(t, msgpackEncodeMethods) {
		return nil
	}
	p := &encodePlan{}
	b.plans[t] = p
	fields, ok := b.lister.fields(t)
	if !ok {
		return nil
	}
	p.asArray = fields.asArray
	for _, f := range fields.list {
		ef, ok := b.field(t, f)
		if !ok {
			return nil
		}
		p.fields = append(p.fields, ef)
		p.omits = p.omits || f.omitEmpty
	}
	p.flat = !p.asArray && !p.omits
	for _, f := range p.fields {
		p.flat = p.flat && len(f.via) == 0
	}
	return p
}

// field compiles f, a field of the struct t.
func (b *encodeBuilder) field(t reflect.Type, f *msgpackField) (encodeField, bool) {
	ef := encodeField{key: appendString(nil, f.name)}
	if len(ef.key) <= len(ef.key16) {
		ef.keyLen = uint8(copy(ef.key16[:], ef.key))
	}
	var sf reflect.StructField
	ef.via, sf = fieldPath(t, f.index)
	ef.offset = sf.Offset
	if ef.encode = b.encoder(sf.Type); ef.encode == nil {
		return ef, false
	}
	ef.kind = kindOf(sf.Type)
	if f.omitEmpty {
		if ef.empty = b.empty(sf.Type); ef.empty == nil {
			return ef, false
		}
	}
	return ef, true
}

package codec

// This file holds the msgpack decoding fast path. msgpack v5 decodes
// through reflect.Value: every slice other than []byte and []string costs
// it five allocations (reflect.MakeSlice, AppendSlice and boxing), and
// every element a dynamic dispatch. Most call arguments are plain structs
// of numbers, strings and slices of those, so for them msgpackUnmarshal
// uses a plan compiled once per type instead: a tree of small functions
// that write through typed pointers at fixed field offsets.
//
// A plan must decode exactly as the library does, configured as in
// msgpackUnmarshal. Field names, embedded structs and the map or array
// shapes of a struct follow types.go (getFields) and decode_map.go
// (decodeStructValue); slices and pointers follow decode_slice.go and
// decode_value.go. Scalars and lengths are read in place, each accepting
// the wire types the library's Decoder method of the same name accepts,
// with its conversions (decode_number.go, decode_string.go); map lengths,
// skipped values, []byte and []string go through the library itself.
// Types the plan does not model (maps, interfaces, arrays, types with
// decoding methods, unusual tags) get no plan and decode in the library.
// One thing a plan cannot see is a decoder installed for a type with
// msgpack.Register or msgpack.RegisterExtDecoder; kiev installs none, and
// msgpack.RegisterExt only takes types with decoding methods.
//
// Unsafe code is limited to writing a field through a pointer computed
// from its offset, and to reading a named type through its unnamed twin
// of the same layout.

import (
	"encoding"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// msgpackPlans caches the plan of each type passed to msgpackUnmarshal: a
// *msgpackPlan, nil when the library must decode the type.
var msgpackPlans sync.Map // reflect.Type -> *msgpackPlan

// msgpackPlanOf returns the plan that decodes into v, a non-nil pointer,
// or nil if v must go through the library.
func msgpackPlanOf(v any) *msgpackPlan {
	t := reflect.TypeOf(v)
	if p, ok := msgpackPlans.Load(t); ok {
		return p.(*msgpackPlan)
	}
	var p *msgpackPlan
	if t.Elem().Kind() == reflect.Struct {
		b := planBuilder{structs: map[reflect.Type]*msgpackPlan{}, inlining: map[reflect.Type]bool{}}
		p = b.structPlan(t.Elem())
	}
	// Two goroutines may build the same plan at once; both are equal.
	msgpackPlans.Store(t, p)
	return p
}

// decodeInto decodes the value loaded in d into v, a pointer to the type
// the plan was built for.
// Like gob, which fails when "no fields matched", it refuses a map that
// has keys but none that names a field of the struct: the caller sent a
// value of another type.
func (p *msgpackPlan) decodeInto(d *msgpackDecoder, v any) error {
	unmatched, err := p.decodeStruct(d, reflect.ValueOf(v).UnsafePointer())
	if err == nil && unmatched && len(p.byName) > 0 {
		return noFieldMatched(p.typ, p.names())
	}
	return err
}

// A decodeFunc decodes the next value in d into the Go value at p, whose
// type was fixed when the function was built.
type decodeFunc func(d *msgpackDecoder, p unsafe.Pointer) error

// A msgpackPlan decodes a struct.
type msgpackPlan struct {
	typ reflect.Type
	// list holds the fields in the order of the library's fields.List,
	// which is the order of an array-encoded struct.
	list []*msgpackFieldPlan
	// byName resolves the keys of a map-encoded struct like fields.Map:
	// it also holds inlined embedded structs under their own names.
	byName map[string]*msgpackFieldPlan
	// maxName is the length of the longest name in byName. A longer key
	// names no field and is skipped without being read.
	maxName int
}

// A msgpackFieldPlan decodes one field of a struct.
type msgpackFieldPlan struct {
	name string
	// named is set if name resolves to this field in byName; a field
	// that a later one of the same name shadows is reached only by its
	// position in an array.
	named bool
	// via leads through the embedded structs that hold an inlined field.
	via    []embedStep
	offset uintptr // of the field in the struct via leads to
	decode decodeFunc
}

// An embedStep moves from a struct to one of its embedded structs.
type embedStep struct {
	offset uintptr
	// elem is set when the embedded field is a pointer: the step follows
	// it and, like the library's fieldByIndexAlloc, allocates a new elem
	// when it is nil, even if the value about to be decoded is nil.
	elem reflect.Type
}

// decode decodes a struct sent as a map (or nil) or as an array, as the
// library's decodeStructValue does.
func (p *msgpackPlan) decode(d *msgpackDecoder, ptr unsafe.Pointer) error {
	_, err := p.decodeStruct(d, ptr)
	return err
}

// decodeStruct is decode that also reports whether the struct came as a
// map with keys, none of which named a field.
func (p *msgpackPlan) decodeStruct(d *msgpackDecoder, ptr unsafe.Pointer) (unmatched bool, err error) {
	c, err := d.peekCode()
	if err != nil {
		return false, err
	}
	switch {
	case c == msgpcode.Nil || msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := d.mapLen()
		if err != nil {
			return false, err
		}
		if n == -1 {
			p.zero(ptr)
			return false, nil
		}
		matched := 0
		for i := range n {
			f, err := p.readKey(d, i)
			if err != nil {
				return false, fmt.Errorf("reading a key of %s: %w", p.typ, err)
			}
			if f == nil { // unknown fields are skipped
				if err := d.lib().Skip(); err != nil {
					return false, err
				}
				continue
			}
			matched++
			if err := f.decodeIn(d, ptr); err != nil {
				return false, inField(f.name, err)
			}
		}
		return n > 0 && matched == 0, nil
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := d.arrayLen()
		if err != nil {
			return false, err
		}
		if n == 0 {
			p.zero(ptr)
			return false, nil
		}
		if n != len(p.list) {
			return false, fmt.Errorf("msgpack: %s has %d fields but the array it is decoded from has %d values", p.typ, len(p.list), n)
		}
		for _, f := range p.list {
			if err := f.decodeIn(d, ptr); err != nil {
				return false, inField(f.name, err)
			}
		}
		return false, nil
	}
	return false, fmt.Errorf("msgpack: unexpected code=%x decoding %s: want a map or an array", c, p.typ)
}

// zero sets the struct at ptr to its zero value, as a nil or an empty
// array does in the library.
func (p *msgpackPlan) zero(ptr unsafe.Pointer) {
	reflect.NewAt(p.typ, ptr).Elem().SetZero()
}

// readKey reads the i-th key of a map and returns the field it names, or
// nil. Like the library's decodeStringTemp it accepts a str, a bin, or nil
// for "". A peer that encodes the same struct sends its fields in the
// order of list, so the i-th field is tried before the map.
//
// The key is read in place, so that it costs no allocation.
func (p *msgpackPlan) readKey(d *msgpackDecoder, i int) (*msgpackFieldPlan, error) {
	n, err := d.bytesLen()
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return p.byName[""], nil
	}
	key, err := d.r.next(n)
	if err != nil || n > p.maxName {
		return nil, err
	}
	if i < len(p.list) {
		if f := p.list[i]; f.named && f.name == string(key) {
			return f, nil
		}
	}
	return p.byName[string(key)], nil
}

// decodeIn decodes the field into the struct at ptr.
func (f *msgpackFieldPlan) decodeIn(d *msgpackDecoder, ptr unsafe.Pointer) error {
	for _, s := range f.via {
		ptr = unsafe.Add(ptr, s.offset)
		if s.elem != nil {
			pp := (*unsafe.Pointer)(ptr)
			if *pp == nil {
				*pp = reflect.New(s.elem).UnsafePointer()
			}
			ptr = *pp
		}
	}
	return f.decode(d, unsafe.Add(ptr, f.offset))
}

// pointerDecoder decodes into a field of type *elem, as the library's
// ptrValueDecoder does: nil sets the pointer to nil, anything else decodes
// into the value it points to, allocated first if the pointer is nil.
func pointerDecoder(elem reflect.Type, decodeElem decodeFunc) decodeFunc {
	return func(d *msgpackDecoder, ptr unsafe.Pointer) error {
		pp := (*unsafe.Pointer)(ptr)
		if c, err := d.peekCode(); err == nil && c == msgpcode.Nil {
			*pp = nil
			d.r.pos++
			return nil
		}
		if *pp == nil {
			*pp = reflect.New(elem).UnsafePointer()
		}
		return decodeElem(d, *pp)
	}
}

// Scalars and slices of scalars.
//
// A plan writes a named type through a pointer to the unnamed type of the
// same kind (a `type Level int8` field through *int8, a []Level through
// *[]int8), which has the same size and layout. Like the library's
// reflect.Value.SetInt and SetUint, integer conversions truncate silently.

// scalarDecoders decodes one kind of scalar, as a value and as the
// elements of a slice.
type scalarDecoders struct{ value, slice decodeFunc }

var msgpackScalars = map[reflect.Kind]scalarDecoders{
	reflect.Bool:    scalarOf(decodeBool),
	reflect.Int:     scalarOf(decodeInt[int]),
	reflect.Int8:    scalarOf(decodeInt[int8]),
	reflect.Int16:   scalarOf(decodeInt[int16]),
	reflect.Int32:   scalarOf(decodeInt[int32]),
	reflect.Int64:   scalarOf(decodeInt[int64]),
	reflect.Uint:    scalarOf(decodeUint[uint]),
	reflect.Uint8:   scalarOf(decodeUint[uint8]),
	reflect.Uint16:  scalarOf(decodeUint[uint16]),
	reflect.Uint32:  scalarOf(decodeUint[uint32]),
	reflect.Uint64:  scalarOf(decodeUint[uint64]),
	reflect.Float32: scalarOf(decodeFloat32),
	reflect.Float64: scalarOf(decodeFloat64),
	reflect.String:  scalarOf(decodeString),
}

func scalarOf[E any](decode func(*msgpackDecoder, *E) error) scalarDecoders {
	return scalarDecoders{
		value: func(d *msgpackDecoder, p unsafe.Pointer) error {
			return decode(d, (*E)(p))
		},
		slice: func(d *msgpackDecoder, p unsafe.Pointer) error {
			return decodeSlice(d, (*[]E)(p), decode)
		},
	}
}

// decodeSlice decodes into a slice of scalars as the library's
// decodeSliceValue does: nil gives a nil slice, an empty array into a nil
// slice an empty one, and a slice with room for n elements is reused.
// Otherwise it allocates exactly n elements, keeping the old ones as the
// library's growSliceValue does (they show only if decoding fails midway).
func decodeSlice[E any](d *msgpackDecoder, sp *[]E, decode func(*msgpackDecoder, *E) error) error {
	n, err := d.arrayLen()
	if err != nil {
		return err
	}
	s := *sp
	switch {
	case n == -1:
		*sp = nil
		return nil
	case n == 0 && s == nil:
		*sp = []E{}
		return nil
	case n <= cap(s):
		s = s[:n]
	default:
		grown := make([]E, n)
		copy(grown, s[:cap(s)])
		s = grown
	}
	*sp = s
	for i := range s {
		if err := decode(d, &s[i]); err != nil {
			return &msgpackFieldError{path: "[" + strconv.Itoa(i) + "]", err: err}
		}
	}
	return nil
}

func decodeBool(d *msgpackDecoder, p *bool) error {
	v, err := d.bool()
	if err == nil {
		*p = v
	}
	return err
}

func decodeInt[E int | int8 | int16 | int32 | int64](d *msgpackDecoder, p *E) error {
	v, err := d.int64()
	if err == nil {
		*p = E(v)
	}
	return err
}

func decodeUint[E uint | uint8 | uint16 | uint32 | uint64](d *msgpackDecoder, p *E) error {
	v, err := d.uint64()
	if err == nil {
		*p = E(v)
	}
	return err
}

func decodeFloat32(d *msgpackDecoder, p *float32) error {
	v, err := d.float32()
	if err == nil {
		*p = v
	}
	return err
}

func decodeFloat64(d *msgpackDecoder, p *float64) error {
	v, err := d.float64()
	if err == nil {
		*p = v
	}
	return err
}

func decodeString(d *msgpackDecoder, p *string) error {
	v, err := d.string()
	if err == nil {
		*p = v
	}
	return err
}

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

// msgpackFieldError says where in the value a decoding error happened.
type msgpackFieldError struct {
	path string // such as "inner.tags[3]"
	err  error
}

func (e *msgpackFieldError) Error() string { return "field " + e.path + ": " + e.err.Error() }

func (e *msgpackFieldError) Unwrap() error { return e.err }

// inField returns err, which happened decoding the field name, with the
// field prefixed to its path.
func inField(name string, err error) error {
	fe, ok := err.(*msgpackFieldError)
	if !ok {
		return &msgpackFieldError{path: name, err: err}
	}
	if strings.HasPrefix(fe.path, "[") {
		fe.path = name + fe.path
	} else {
		fe.path = name + "." + fe.path
	}
	return fe
}

// Building plans.

// planBuilder builds the plan of one type. Any part that is not plain
// makes the whole plan nil.
type planBuilder struct {
	// structs holds the plans built or being built, so that a recursive
	// type (type Node struct{ Next *Node }) refers to its own plan.
	structs map[reflect.Type]*msgpackPlan
	// inlining holds the embedded structs being flattened, to refuse an
	// embedding cycle on which the library would recurse forever.
	inlining map[reflect.Type]bool
}

var (
	// msgpackDecodeMethods are the interfaces that the library's
	// _getDecoder (decode_value.go) checks, on T and on *T, before
	// decoding a T by its kind.
	msgpackDecodeMethods = []reflect.Type{
		reflect.TypeFor[msgpack.CustomDecoder](),
		reflect.TypeFor[msgpack.Unmarshaler](),
		reflect.TypeFor[encoding.BinaryUnmarshaler](),
		reflect.TypeFor[encoding.TextUnmarshaler](),
	}
	// msgpackEncodeMethods are their encoding twins, checked by
	// _getEncoder. Whether an embedded struct is inlined depends on them.
	msgpackEncodeMethods = []reflect.Type{
		reflect.TypeFor[msgpack.CustomEncoder](),
		reflect.TypeFor[msgpack.Marshaler](),
		reflect.TypeFor[encoding.BinaryMarshaler](),
		reflect.TypeFor[encoding.TextMarshaler](),
	}
)

// implementsAny reports whether t or *t implements one of ifaces.
func implementsAny(t reflect.Type, ifaces []reflect.Type) bool {
	pt := reflect.PointerTo(t)
	for _, it := range ifaces {
		if t.Implements(it) || pt.Implements(it) {
			return true
		}
	}
	return false
}

// decoder returns the decodeFunc for a value of type t, or nil if t is
// not plain.
func (b *planBuilder) decoder(t reflect.Type) decodeFunc {
	if implementsAny(t, msgpackDecodeMethods) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		if p := b.structPlan(t); p != nil {
			return p.decode
		}
		return nil
	case reflect.Pointer:
		if elem := b.decoder(t.Elem()); elem != nil {
			return pointerDecoder(t.Elem(), elem)
		}
		return nil
	case reflect.Slice:
		elem := t.Elem()
		switch {
		case elem.Kind() == reflect.Uint8:
			if implementsAny(elem, msgpackDecodeMethods) {
				return nil // the library would ignore them; stay on the safe side
			}
			return decodeBytes
		case elem == reflect.TypeFor[string]():
			return decodeStrings
		case implementsAny(elem, msgpackDecodeMethods):
			return nil
		}
		return msgpackScalars[elem.Kind()].slice // nil if not a scalar
	}
	return msgpackScalars[t.Kind()].value // nil if not a scalar
}

// structPlan returns the plan of the struct type t, or nil.
func (b *planBuilder) structPlan(t reflect.Type) *msgpackPlan {
	if p, ok := b.structs[t]; ok {
		return p // built, or being built higher up the stack
	}
	if implementsAny(t, msgpackDecodeMethods) {
		return nil
	}
	p := &msgpackPlan{typ: t, byName: map[string]*msgpackFieldPlan{}}
	b.structs[t] = p
	fields, ok := b.fields(t)
	if !ok {
		return nil
	}
	plans := map[*msgpackField]*msgpackFieldPlan{}
	plan := func(f *msgpackField) *msgpackFieldPlan {
		if fp, ok := plans[f]; ok {
			return fp
		}
		fp := b.fieldPlan(t, f)
		plans[f] = fp
		return fp
	}
	for _, f := range fields.list {
		fp := plan(f)
		if fp == nil {
			return nil
		}
		p.list = append(p.list, fp)
	}
	for name, f := range fields.byName {
		fp := plan(f)
		if fp == nil {
			return nil
		}
		p.byName[name] = fp
		p.maxName = max(p.maxName, len(name))
	}
	for _, fp := range p.list {
		fp.named = p.byName[fp.name] == fp
	}
	return p
}

// fieldPlan compiles f, a field of the struct t, or returns nil.
func (b *planBuilder) fieldPlan(t reflect.Type, f *msgpackField) *msgpackFieldPlan {
	fp := &msgpackFieldPlan{name: f.name}
	var sf reflect.StructField
	fp.via, sf = fieldPath(t, f.index)
	fp.offset = sf.Offset
	if fp.decode = b.decoder(sf.Type); fp.decode == nil {
		return nil
	}
	return fp
}

// fieldPath returns the steps through the embedded structs on the way to
// the field at index in the struct t, and the field itself.
func fieldPath(t reflect.Type, index []int) ([]embedStep, reflect.StructField) {
	var via []embedStep
	last := len(index) - 1
	for _, i := range index[:last] {
		sf := t.Field(i)
		step := embedStep{offset: sf.Offset}
		t = sf.Type
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
			step.elem = t
		}
		via = append(via, step)
	}
	return via, t.Field(index[last])
}

// A msgpackField is a field as the library's getFields (types.go) lists
// it: its key and its index path through embedded structs.
type msgpackField struct {
	name  string
	index []int
	// omitEmpty is set by the field's omitempty option, or by that of a
	// _msgpack field before it; only encoding looks at it.
	omitEmpty bool
}

type msgpackFields struct {
	list   []*msgpackField
	byName map[string]*msgpackField
	// asArray is set by a _msgpack field with the as_array option: the
	// struct is encoded as an array. Only encoding looks at it.
	asArray bool
}

// add appends f; like fields.Add, a later field takes over the name.
func (fs *msgpackFields) add(f *msgpackField) {
	fs.byName[f.name] = f
	fs.list = append(fs.list, f)
}

// fields lists the fields of the struct t exactly as the library's
// getFields does with the "json" fallback tag, or reports false for the
// shapes left to the library: tags beyond "name,option,...", the intern
// option, unexported embedded fields (which the library may fail to set)
// and inline options on anything but a struct (on which it panics).
func (b *planBuilder) fields(t reflect.Type) (*msgpackFields, bool) {
	if b.inlining[t] {
		return nil, false
	}
	b.inlining[t] = true
	defer delete(b.inlining, t)

	fs := &msgpackFields{byName: map[string]*msgpackField{}}
	omitAll := false
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("msgpack")
		if tag == "" {
			tag = sf.Tag.Get("json")
		}
		name, opts, ok := parseMsgpackTag(tag)
		if ok && name != "-" && sf.Name == "_msgpack" {
			fs.asArray = opts["as_array"] || opts["asArray"]
			omitAll = omitAll || opts["omitempty"]
		}
		switch {
		case !ok:
			return nil, false
		case name == "-":
			continue
		case !sf.IsExported() && !sf.Anonymous:
			continue
		case !sf.IsExported(), opts["intern"]:
			return nil, false
		}
		f := &msgpackField{name: name, index: sf.Index, omitEmpty: omitAll || opts["omitempty"]}
		if f.name == "" {
			f.name = sf.Name
		}
		if sf.Anonymous && !opts["noinline"] {
			inlined, ok := b.inline(fs, sf, opts["inline"])
			if !ok {
				return nil, false
			}
			if inlined {
				// Inlined, the struct is still a key of its own.
				fs.byName[f.name] = f
				continue
			}
		}
		fs.add(f)
	}
	return fs, true
}

// inline adds the fields of the embedded struct sf to fs if the library
// does (inlineFields if forced by the inline option, else shouldInline),
// and reports whether it did. It reports ok false for shapes left to the
// library.
func (b *planBuilder) inline(fs *msgpackFields, sf reflect.StructField, force bool) (inlined, ok bool) {
	t := sf.Type
	if force {
		if t.Kind() != reflect.Struct {
			return false, false
		}
		inner, ok := b.fields(t)
		if !ok {
			return false, false
		}
		for _, f := range inner.list {
			if _, shadowed := fs.byName[f.name]; !shadowed {
				fs.add(&msgpackField{name: f.name, index: append(sf.Index[:1:1], f.index...), omitEmpty: f.omitEmpty})
			}
		}
		return true, true
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	// The library inlines only a struct it would itself encode and
	// decode field by field, and only if none of its fields is shadowed.
	if t.Kind() != reflect.Struct || implementsAny(t, msgpackDecodeMethods) || implementsAny(t, msgpackEncodeMethods) {
		return false, true
	}
	inner, ok := b.fields(t)
	if !ok {
		return false, false
	}
	for _, f := range inner.list {
		if _, shadowed := fs.byName[f.name]; shadowed {
			return false, true
		}
	}
	for _, f := range inner.list {
		fs.add(&msgpackField{name: f.name, index: append(sf.Index[:1:1], f.index...), omitEmpty: f.omitEmpty})
	}
	return true, true
}

// parseMsgpackTag splits a struct tag the way the library's tag parser
// (github.com/vmihailenco/tagparser/v2) splits "name,option,...". It
// reports false for tags that use the rest of its syntax, quotes and
// key:value options such as alias, so that such types stay with the
// library.
func parseMsgpackTag(tag string) (name string, opts map[string]bool, ok bool) {
	if strings.ContainsAny(tag, `':`) {
		return "", nil, false
	}
	name, rest, _ := strings.Cut(tag, ",")
	opts = map[string]bool{}
	for _, o := range strings.Split(rest, ",") {
		opts[strings.TrimSpace(o)] = true
	}
	return strings.TrimSpace(name), opts, true
}

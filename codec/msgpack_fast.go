package codec

// This file holds the msgpack decoding fast path. msgpack v5 decodes
// through reflect.Value: every slice other than []byte and []string costs
// it five allocations (reflect.MakeSlice, AppendSlice and boxing), and
// every element a dynamic dispatch. Most call arguments are plain structs
// of numbers, strings and slices of those, so for them msgpackUnmarshal
// uses a plan compiled once per type instead: a tree of small functions
// that write through typed pointers at fixed field offsets, with scalar
// fields read by a switch on their kind (msgpack_kind.go).
//
// A plan must decode exactly as the library does, configured as in
// msgpackUnmarshal. Field names, embedded structs and the map or array
// shapes of a struct follow types.go (getFields) and decode_map.go
// (decodeStructValue); slices and pointers follow decode_slice.go and
// decode_value.go. Scalars and lengths are read in place, each accepting
// the wire types the library's Decoder method of the same name accepts,
// with its conversions (decode_number.go, decode_string.go), as are []byte
// and []string (decodeStringSlicePtr). A plan never calls the library.
//
// A plan makes the checks of checkMsgpack as it reads, not in a pass
// before: each array or map length against the bytes left, before
// anything is allocated for it (msgpackDecoder.enter); the nesting depth;
// a skipped value whole (skipMsgpackValue); and no bytes after the value.
// Whatever checkMsgpack refuses, a plan refuses (FuzzMsgpackFast).
//
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
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

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

// decodeAll decodes data, which must hold exactly one value, into v, a
// pointer to the type the plan was built for. It checks data as
// checkMsgpack does, but as it reads rather than before: every length is
// checked against the bytes that remain before anything is allocated for
// it, the nesting depth is bounded, and skipped values are checked whole.
// Failing, it may leave v partly decoded, as the library does.
func (p *msgpackPlan) decodeAll(d *msgpackDecoder, data []byte, v any) error {
	if len(data) == 0 {
		return errMsgpackEmpty
	}
	d.r.Reset(data)
	d.r.codes, d.ready, d.depth = d.r.codes[:0], false, 0
	d.strBytes, d.strHint = 0, int(p.strBytes.Load())
	err := p.decodeInto(d, v)
	if n := d.r.Len(); err == nil && n > 0 {
		err = fmt.Errorf("%d unexpected bytes follow the value", n)
	}
	if err == nil && d.strBytes != d.strHint {
		p.strBytes.Store(int32(min(d.strBytes, arenaSize)))
	}
	d.arena = nil // the strings carved from it belong to v
	return err
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
	// strBytes is the length of the strings that the last value decoded
	// copied into the arena, up to arenaSize: the size of the next arena.
	strBytes atomic.Int32
}

// A msgpackFieldPlan decodes one field of a struct.
type msgpackFieldPlan struct {
	name string
	key  string // name encoded as a msgpack str, as appendString does
	// named is set if name resolves to this field in byName; a field
	// that a later one of the same name shadows is reached only by its
	// position in an array.
	named bool
	// via leads through the embedded structs that hold an inlined field.
	via []embedStep
	// keyWords and keyMask hold key, if it is at most 16 bytes, as two
	// little-endian words and the masks of its bytes in them (keyMask[0]
	// is 0 for a longer key): readKey compares 16 bytes of input with
	// them, rather than calling a comparison of len(key) bytes.
	keyWords, keyMask [2]uint64
	offset            uintptr // of the field in the struct via leads to
	decode            decodeFunc
	kind              scalarKind // if not kindNone, decoded by decodeScalar instead
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
		if err := d.enter(2 * n); err != nil {
			return false, err
		}
		matched := 0
		for i := range n {
			f, err := p.readKey(d, i)
			if err != nil {
				return false, fmt.Errorf("reading a key of %s: %w", p.typ, err)
			}
			if f == nil { // unknown fields are skipped
				if err := d.skip(); err != nil {
					return false, err
				}
				continue
			}
			matched++
			if err := f.decodeIn(d, ptr); err != nil {
				return false, inField(f.name, err)
			}
		}
		d.leave(n)
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
		if err := d.enter(n); err != nil {
			return false, err
		}
		for _, f := range p.list {
			if err := f.decodeIn(d, ptr); err != nil {
				return false, inField(f.name, err)
			}
		}
		d.leave(n)
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
	if i < len(p.list) {
		// The key as this package encodes it: compared in place.
		if f := p.list[i]; f.named && f.keyAt(d.r.data[d.r.pos:]) {
			d.r.pos += len(f.key)
			return f, nil
		}
	}
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
	if f.kind != kindNone {
		return decodeScalar(d, f.kind, unsafe.Add(ptr, f.offset))
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
	if err := d.enter(n); err != nil {
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
	d.leave(n)
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
	v, err := d.string(*p)
	if err == nil {
		*p = v
	}
	return err
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

// setKeyWords fills keyWords and keyMask from key.
func (f *msgpackFieldPlan) setKeyWords() {
	if len(f.key) > 16 {
		return
	}
	var b [16]byte
	copy(b[:], f.key)
	for i := range 2 {
		f.keyWords[i] = binary.LittleEndian.Uint64(b[8*i:])
		if n := len(f.key) - 8*i; n >= 8 {
			f.keyMask[i] = math.MaxUint64
		} else if n > 0 {
			f.keyMask[i] = 1<<(8*n) - 1
		}
	}
}

// keyAt reports whether b starts with f's key.
func (f *msgpackFieldPlan) keyAt(b []byte) bool {
	if len(b) < 16 || f.keyMask[0] == 0 {
		return hasPrefix(b, f.key)
	}
	w0, w1 := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
	return (w0^f.keyWords[0])&f.keyMask[0]|(w1^f.keyWords[1])&f.keyMask[1] == 0
}

// hasPrefix reports whether b starts with s, without allocating.
func hasPrefix(b []byte, s string) bool {
	return len(b) >= len(s) && string(b[:len(s)]) == s
}

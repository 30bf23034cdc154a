package reflection

import (
	"encoding"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// TypeShape describes a type as it travels on the wire. A pointer is
// described by the shape of what it points to.
//
// Kind is one of
//
//	struct       Fields lists the fields
//	map          Key and Elem describe keys and values
//	slice        Elem describes the elements
//	array        Elem describes the elements, Len says how many
//	bytes        a []byte or [N]byte (Len), or a type that marshals itself to binary
//	string       a string, or a type that marshals itself to text
//	int, uint, float, bool
//	time         a time.Time
//	any          an interface: any value
//	custom       a type with its own msgpack encoding
//	recursive    a type already being described further up; see Type
//	truncated    a type nested too deeply, or in too large a type, to describe
//	unsupported  a type the codec cannot encode, such as a channel or func
type TypeShape struct {
	Type   string       `json:"type"` // the Go type, e.g. "main.Args", "int", "[]string"
	Kind   string       `json:"kind"`
	Fields []FieldShape `json:"fields,omitempty"`
	Elem   *TypeShape   `json:"elem,omitempty"`
	Key    *TypeShape   `json:"key,omitempty"`
	Len    int          `json:"len,omitempty"`
}

// FieldShape is one field of a struct: its name on the wire and its shape.
type FieldShape struct {
	Name  string    `json:"name"`
	Shape TypeShape `json:"shape"`
}

// Bounds on a description, so that a huge or deeply nested type cannot
// make a large reply.
const (
	maxShapeDepth = 16   // nesting levels below the method's argument or reply
	maxShapeNodes = 4096 // TypeShapes per argument or reply
)

var (
	typeOfTime             = reflect.TypeFor[time.Time]()
	typeOfMsgpackEncoder   = reflect.TypeFor[msgpack.CustomEncoder]()
	typeOfMsgpackMarshaler = reflect.TypeFor[msgpack.Marshaler]()
	typeOfBinaryMarshaler  = reflect.TypeFor[encoding.BinaryMarshaler]()
	typeOfTextMarshaler    = reflect.TypeFor[encoding.TextMarshaler]()
)

// ShapeOf describes t as the msgpack codec encodes it.
func ShapeOf(t reflect.Type) TypeShape {
	sh := shaper{budget: maxShapeNodes}
	return sh.shape(t, 0)
}

// shaper describes one type, keeping track of the types being described
// (to spot recursion) and of how many shapes it may still make.
type shaper struct {
	path   []reflect.Type
	budget int
}

func (sh *shaper) shape(t reflect.Type, depth int) TypeShape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	ts := TypeShape{Type: t.String()}
	if slices.Contains(sh.path, t) {
		ts.Kind = "recursive"
		return ts
	}
	if depth > maxShapeDepth || sh.budget <= 0 {
		ts.Kind = "truncated"
		return ts
	}
	sh.budget--
	// The checks follow the order in which the msgpack codec picks an
	// encoder.
	switch {
	case t == typeOfTime:
		ts.Kind = "time"
		return ts
	case implements(t, typeOfMsgpackEncoder), implements(t, typeOfMsgpackMarshaler):
		ts.Kind = "custom"
		return ts
	case implements(t, typeOfBinaryMarshaler):
		ts.Kind = "bytes"
		return ts
	case implements(t, typeOfTextMarshaler):
		ts.Kind = "string"
		return ts
	}
	sh.path = append(sh.path, t)
	defer func() { sh.path = sh.path[:len(sh.path)-1] }()
	switch t.Kind() {
	case reflect.Bool:
		ts.Kind = "bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		ts.Kind = "int"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		ts.Kind = "uint"
	case reflect.Float32, reflect.Float64:
		ts.Kind = "float"
	case reflect.String:
		ts.Kind = "string"
	case reflect.Interface:
		ts.Kind = "any"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			ts.Kind = "bytes"
			break
		}
		ts.Kind = "slice"
		ts.Elem = sh.ref(t.Elem(), depth+1)
	case reflect.Array:
		ts.Len = t.Len()
		if t.Elem().Kind() == reflect.Uint8 {
			ts.Kind = "bytes"
			break
		}
		ts.Kind = "array"
		ts.Elem = sh.ref(t.Elem(), depth+1)
	case reflect.Map:
		ts.Kind = "map"
		ts.Key = sh.ref(t.Key(), depth+1)
		ts.Elem = sh.ref(t.Elem(), depth+1)
	case reflect.Struct:
		ts.Kind = "struct"
		ts.Fields = sh.fields(t, depth)
	default:
		ts.Kind = "unsupported"
	}
	return ts
}

func (sh *shaper) ref(t reflect.Type, depth int) *TypeShape {
	ts := sh.shape(t, depth)
	return &ts
}

// fields describes the fields of struct t by the msgpack codec's rules:
// a tag "-" or an unexported field is skipped, and an embedded struct is
// flattened into t unless its tag says "noinline" or one of its fields
// would shadow an earlier one of t.
func (sh *shaper) fields(t reflect.Type, depth int) []FieldShape {
	var fs []FieldShape
	has := func(name string) bool {
		return slices.ContainsFunc(fs, func(f FieldShape) bool { return f.Name == name })
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("msgpack")
		if tag == "" {
			tag = f.Tag.Get("json")
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if f.Anonymous && !hasTagOption(opts, "noinline") {
			if et := plainStruct(f.Type); et != nil && !slices.Contains(sh.path, et) {
				sh.path = append(sh.path, et)
				inner := sh.fields(et, depth)
				sh.path = sh.path[:len(sh.path)-1]
				explicit := hasTagOption(opts, "inline")
				if explicit || !slices.ContainsFunc(inner, func(f FieldShape) bool { return has(f.Name) }) {
					for _, in := range inner {
						if !has(in.Name) {
							fs = append(fs, in)
						}
					}
					continue
				}
			}
		}
		if !f.IsExported() {
			continue // an unexported embedded type that is not flattened
		}
		if name == "" {
			name = f.Name
		}
		fs = append(fs, FieldShape{Name: name, Shape: sh.shape(f.Type, depth+1)})
	}
	return fs
}

// plainStruct returns the struct type that t is or points to if the codec
// encodes it field by field, or nil.
func plainStruct(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == typeOfTime ||
		implements(t, typeOfMsgpackEncoder) || implements(t, typeOfMsgpackMarshaler) ||
		implements(t, typeOfBinaryMarshaler) || implements(t, typeOfTextMarshaler) {
		return nil
	}
	return t
}

// implements reports whether t or *t implements the interface iface.
func implements(t, iface reflect.Type) bool {
	return t.Implements(iface) || reflect.PointerTo(t).Implements(iface)
}

func hasTagOption(opts, opt string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		if o == opt {
			return true
		}
	}
	return false
}

// Summary names a shape's type and, when the type's name does not
// say it, its kind: "kiev_test.Reply (struct)", "int".
func Summary(s TypeShape) string {
	if s.Type == s.Kind || (s.Kind == "int" && strings.HasPrefix(s.Type, "int")) ||
		(s.Kind == "uint" && strings.HasPrefix(s.Type, "uint")) || (s.Kind == "float" && strings.HasPrefix(s.Type, "float")) {
		return s.Type
	}
	return fmt.Sprintf("%s (%s)", s.Type, s.Kind)
}

// Fits reports whether a value of shape from decodes into one of
// shape to, by the msgpack codec's rules. If not, it returns where the
// first misfit is (path, extended as it descends: "reply field C") and the
// two shapes there.
func Fits(from, to TypeShape, path string) (string, TypeShape, TypeShape, bool) {
	unknown := func(kind string) bool {
		switch kind {
		case "any", "custom", "recursive", "truncated", "unsupported":
			return true // takes anything, or cannot be told
		}
		return false
	}
	seq := func(kind string) bool { return kind == "slice" || kind == "array" }
	text := func(kind string) bool { return kind == "string" || kind == "bytes" }
	keyed := func(kind string) bool { return kind == "struct" || kind == "map" }
	switch {
	case unknown(from.Kind) || unknown(to.Kind):
		return "", from, to, true
	case seq(from.Kind) && seq(to.Kind):
		return Fits(*from.Elem, *to.Elem, path+" element")
	case text(from.Kind) && text(to.Kind):
		return "", from, to, true
	case from.Kind == "int" || from.Kind == "uint":
		if to.Kind == "int" || to.Kind == "uint" || to.Kind == "float" {
			return "", from, to, true
		}
	case from.Kind == "map" && to.Kind == "map":
		if p, f, t, ok := Fits(*from.Key, *to.Key, path+" key"); !ok {
			return p, f, t, false
		}
		return Fits(*from.Elem, *to.Elem, path+" value")
	case from.Kind == "struct" && to.Kind == "struct":
		common := false
		for _, ff := range from.Fields {
			i := slices.IndexFunc(to.Fields, func(tf FieldShape) bool { return tf.Name == ff.Name })
			if i < 0 {
				continue // skipped by the decoder
			}
			common = true
			if p, f, t, ok := Fits(ff.Shape, to.Fields[i].Shape, path+" field "+ff.Name); !ok {
				return p, f, t, false
			}
		}
		if !common && len(from.Fields) > 0 && len(to.Fields) > 0 {
			return path + ", which shares no field,", from, to, false
		}
		return "", from, to, true
	case keyed(from.Kind) && keyed(to.Kind):
		return "", from, to, true // a struct and a map: both maps on the wire
	case from.Kind == to.Kind:
		return "", from, to, true
	}
	return path, from, to, false
}

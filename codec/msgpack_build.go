package codec

import (
	"encoding"
	"reflect"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

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
	fp := &msgpackFieldPlan{name: f.name, key: string(appendString(nil, f.name))}
	fp.setKeyWords()
	var sf reflect.StructField
	fp.via, sf = fieldPath(t, f.index)
	fp.offset = sf.Offset
	if fp.decode = b.decoder(sf.Type); fp.decode == nil {
		return nil
	}
	fp.kind = kindOf(sf.Type)
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

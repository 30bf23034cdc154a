package codec

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// This file holds the one check a struct's decoding makes beyond the
// library's: a map with keys, none of which names a field of the struct
// the caller decodes into, is an error, as gob's "no fields matched".
// Keys that name no field are otherwise skipped, so that either peer may
// add a field during a partial rollout; a map that matches nothing at all
// is a value of another type, and decoding it as a zero struct would hide
// the mistake. The check is made on the value decoded, not on the structs
// inside it.

// noFieldMatched is the error of a map whose keys name none of the fields
// of t.
func noFieldMatched(t reflect.Type, fields []string) error {
	return fmt.Errorf("the value is a map whose keys name none of the fields of type %s (%s)", t, strings.Join(fields, ", "))
}

// names lists the keys of the struct's fields in their order, then the
// keys of inlined structs.
func (p *msgpackPlan) names() []string {
	names := make([]string, 0, len(p.byName))
	for _, f := range p.list {
		if f.named {
			names = append(names, f.name)
		}
	}
	for name, f := range p.byName {
		if !slices.Contains(p.list, f) {
			names = append(names, name)
		}
	}
	return names
}

// structKeys caches the field keys of each struct type that the library
// decodes: a []string in the order of the fields, or nil when the type's
// fields are left to the library (see planBuilder.fields) and go
// unchecked.
var structKeys sync.Map // reflect.Type -> []string

// checkStructKeys reports an error if data, one checked msgpack value, is
// a map with keys, none of which names a field of the struct t.
func checkStructKeys(t reflect.Type, data []byte) error {
	v, ok := structKeys.Load(t)
	if !ok {
		var keys []string
		b := planBuilder{structs: map[reflect.Type]*msgpackPlan{}, inlining: map[reflect.Type]bool{}}
		if fs, ok := b.fields(t); ok {
			keys = []string{}
			for _, f := range fs.list {
				if fs.byName[f.name] == f {
					keys = append(keys, f.name)
				}
			}
			for name, f := range fs.byName {
				if !slices.Contains(fs.list, f) { // an inlined struct's own key
					keys = append(keys, name)
				}
			}
		}
		v, _ = structKeys.LoadOrStore(t, keys)
	}
	keys := v.([]string)
	if len(keys) == 0 || !mapMatchesNone(data, keys) {
		return nil
	}
	return noFieldMatched(t, keys)
}

// mapMatchesNone reports whether data, one checked msgpack value, is a map
// with at least one key, and none of its keys is in keys. A key that is
// not a string is left for the library to judge.
func mapMatchesNone(data []byte, keys []string) bool {
	if len(data) == 0 {
		return false
	}
	c, pos := data[0], 1
	var n uint64
	switch {
	case c >= 0x80 && c <= 0x8f: // fixmap
		n = uint64(c & 0x0f)
	case c == 0xde || c == 0xdf: // map16, map32
		_, elems, _, next, err := msgpackHeader(c, data, pos)
		if err != nil {
			return false
		}
		n, pos = elems/2, next
	default:
		return false
	}
	if n == 0 {
		return false
	}
	for range n {
		key, next, ok := msgpackKey(data, pos)
		if !ok || slicesContain(keys, key) {
			return false
		}
		pos = skipMsgpack(data, next)
	}
	return true
}

// msgpackKey reads the string key at data[pos:] as the library's
// decodeStringTemp does (a str, a bin, or nil for ""), and returns the
// position after it.
func msgpackKey(data []byte, pos int) (key []byte, next int, ok bool) {
	if pos >= len(data) {
		return nil, pos, false
	}
	c := data[pos]
	pos++
	var n uint64
	switch {
	case c >= 0xa0 && c <= 0xbf: // fixstr
		n = uint64(c & 0x1f)
	case c == 0xc0: // nil
	case c == 0xc4 || c == 0xc5 || c == 0xc6 || c == 0xd9 || c == 0xda || c == 0xdb:
		var err error
		n, _, _, pos, err = msgpackHeader(c, data, pos)
		if err != nil {
			return nil, pos, false
		}
	default:
		return nil, pos, false
	}
	if uint64(len(data)-pos) < n {
		return nil, pos, false
	}
	return data[pos : pos+int(n)], pos + int(n), true
}

// skipMsgpack returns the position after the value at data[pos:], which
// checkMsgpack found whole.
func skipMsgpack(data []byte, pos int) int {
	for pending := uint64(1); pending > 0 && pos < len(data); pending-- {
		c := data[pos]
		pos++
		switch {
		case c <= 0x7f || c >= 0xe0: // fixint
		case c <= 0x8f: // fixmap
			pending += 2 * uint64(c&0x0f)
		case c <= 0x9f: // fixarray
			pending += uint64(c & 0x0f)
		case c <= 0xbf: // fixstr
			pos += int(c & 0x1f)
		default:
			skip, elems, _, next, err := msgpackHeader(c, data, pos)
			if err != nil || uint64(len(data)-next) < skip {
				return len(data)
			}
			pos = next + int(skip)
			pending += elems
		}
	}
	return pos
}

// slicesContain reports whether keys holds key, without allocating.
func slicesContain(keys []string, key []byte) bool {
	for _, k := range keys {
		if k == string(key) {
			return true
		}
	}
	return false
}

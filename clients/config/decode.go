package config

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Decode sets the fields of the struct v points to from the snapshot's
// values, converting each value to its field's type; the package doc
// lists the rules. It reports every field it could not set, each error
// wrapping ErrDecode, and then leaves v unchanged: a configuration is
// taken whole or not at all.
func (s Snapshot) Decode(v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("%w: Decode needs a non-nil pointer to a struct, not %T", ErrDecode, v)
	}
	d := decoder{values: s.values, keys: slices.Sorted(maps.Keys(s.values))}
	// Decode into a copy, so that v changes only if every field decodes.
	out := reflect.New(rv.Elem().Type()).Elem()
	out.Set(rv.Elem())
	d.structFields(out, "", rv.Elem().Type().String())
	if len(d.errs) > 0 {
		return errors.Join(d.errs...)
	}
	rv.Elem().Set(out)
	return nil
}

type decoder struct {
	values map[string]string
	keys   []string // of values, sorted
	errs   []error
}

var (
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	durationType        = reflect.TypeFor[time.Duration]()
)

// structFields decodes the fields of sv, a settable struct, from the keys
// under prefix. path names sv in errors, as "main.Config.DB".
func (d *decoder) structFields(sv reflect.Value, prefix, path string) {
	t := sv.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("config")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		required := slices.Contains(strings.Split(opts, ","), "required")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			// An embedded struct's fields are promoted, as in encoding/json.
			d.structFields(sv.Field(i), prefix, path)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		d.field(sv.Field(i), prefix+name, path+"."+f.Name, required)
	}
}

// field decodes fv from key, or from the keys under key+"." if fv is a
// struct (or a pointer to one) and key itself is absent.
func (d *decoder) field(fv reflect.Value, key, path string, required bool) {
	if raw, ok := d.lookup(key); ok {
		if err := setValue(fv, raw); err != nil {
			d.errs = append(d.errs, fmt.Errorf("%w: key %q into %s (%s): %v", ErrDecode, key, path, fv.Type(), err))
		}
		return
	}
	switch t := fv.Type(); {
	case nested(t):
		d.structFields(fv, key+".", path)
		return
	case t.Kind() == reflect.Pointer && nested(t.Elem()) && d.hasPrefix(key+"."):
		n := reflect.New(t.Elem())
		if !fv.IsNil() {
			n.Elem().Set(fv.Elem())
		}
		d.structFields(n.Elem(), key+".", path)
		fv.Set(n)
		return
	}
	if required {
		d.errs = append(d.errs, fmt.Errorf("%w: %s needs key %q, which the configuration lacks; add it at the source", ErrDecode, path, key))
	}
}

// nested reports whether a field of type t is filled from keys under its
// own key, "db.host" and "db.port" for a field DB: a struct that does not
// decode itself from text.
func nested(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(textUnmarshalerType)
}

// lookup finds key: exactly, or else ignoring case, as encoding/json
// matches field names; among several keys equal but for case, the first
// in byte order wins.
func (d *decoder) lookup(key string) (string, bool) {
	if v, ok := d.values[key]; ok {
		return v, true
	}
	for _, k := range d.keys {
		if strings.EqualFold(k, key) {
			return d.values[k], true
		}
	}
	return "", false
}

// hasPrefix reports whether some key starts with prefix, ignoring case.
func (d *decoder) hasPrefix(prefix string) bool {
	for _, k := range d.keys {
		if len(k) > len(prefix) && strings.EqualFold(k[:len(prefix)], prefix) {
			return true
		}
	}
	return false
}

// setValue sets v, which is settable, from raw. It never changes what v
// shares with other values (the target of a pointer, a map): it builds a
// new value and sets v to it.
func setValue(v reflect.Value, raw string) error {
	t := v.Type()
	if t.Kind() == reflect.Pointer {
		n := reflect.New(t.Elem())
		if !v.IsNil() {
			n.Elem().Set(v.Elem())
		}
		if err := setValue(n.Elem(), raw); err != nil {
			return err
		}
		v.Set(n)
		return nil
	}
	if reflect.PointerTo(t).Implements(textUnmarshalerType) {
		n := reflect.New(t)
		n.Elem().Set(v)
		if err := n.Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(raw)); err != nil {
			return err
		}
		v.Set(n.Elem())
		return nil
	}
	if t == durationType {
		d, err := time.ParseDuration(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("%v; write a duration such as 1.5s or 300ms", err)
		}
		v.SetInt(int64(d))
		return nil
	}
	switch t.Kind() {
	case reflect.String:
		v.SetString(raw)
	case reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("%q is not a boolean; write true or false", raw)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, t.Bits())
		if err != nil {
			return err
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n, err := strconv.ParseUint(strings.TrimSpace(raw), 10, t.Bits())
		if err != nil {
			return err
		}
		v.SetUint(n)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(strings.TrimSpace(raw), t.Bits())
		if err != nil {
			return err
		}
		v.SetFloat(f)
	case reflect.Interface:
		if t.NumMethod() != 0 {
			return fmt.Errorf("cannot decode into the interface %s", t)
		}
		v.Set(reflect.ValueOf(raw))
	case reflect.Slice, reflect.Array, reflect.Struct, reflect.Map:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte(raw)) // []byte: the value as it is
			return nil
		}
		// A struct or an array keeps the fields or elements the JSON
		// leaves out, as json.Unmarshal does; a slice or a map is
		// replaced whole.
		n := reflect.New(t)
		if k := t.Kind(); k == reflect.Struct || k == reflect.Array {
			n.Elem().Set(v)
		}
		if err := json.Unmarshal([]byte(raw), n.Interface()); err != nil {
			return fmt.Errorf("%v; write the value as JSON, such as %s", err, jsonHint(t))
		}
		v.Set(n.Elem())
	default:
		return fmt.Errorf("cannot decode into a %s", t.Kind())
	}
	return nil
}

// jsonHint shows what JSON a value of type t looks like.
func jsonHint(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		return `["a","b"]`
	case reflect.Map:
		return `{"k":"v"}`
	default:
		return `{"Field":"value"}`
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/reflection"
)

// methodInfo asks the server's reflection service for method's
// description: the shape of its argument, and whether it streams. It
// returns nil, and no error, when the server cannot say: it has no
// reflection service (an old kiev), or no such service or method, which
// the call itself then reports with the names there are.
func methodInfo(ctx context.Context, client *kiev.Client, method string) (*reflection.MethodInfo, error) {
	i := strings.LastIndexByte(method, '.')
	service, name := method[:i], method[i+1:]
	var info reflection.ServiceInfo
	if err := client.Call(ctx, reflection.ServiceName+".Describe", service, &info); err != nil {
		var se *kiev.ServerError
		if errors.As(err, &se) && se.Code == kiev.CodeNotFound {
			return nil, nil
		}
		return nil, err
	}
	for _, m := range info.Methods {
		if m.Name == name {
			return &m, nil
		}
	}
	return nil, nil
}

// fitArgs renames the keys of the JSON objects in v to the field names of
// the structs they fill, as encoding/json matches them: a key that is a
// field's name is kept, and any other key takes the first field whose name
// it equals without regard to case. The server's codec matches names
// exactly and ignores the rest, so fitArgs fails on a key that names no
// field, listing the fields there are, rather than let the value vanish.
// Values of kinds that fitArgs cannot see into (any, custom, truncated)
// are left as they are.
func fitArgs(v any, shape reflection.TypeShape) (any, error) {
	f := fitter{structs: map[string]*reflection.TypeShape{}}
	return f.fit(v, &shape, "")
}

// fitter walks a JSON value and a shape together.
type fitter struct {
	structs map[string]*reflection.TypeShape // the struct shapes being walked, by Go type, for recursive ones
}

// fit fits v to shape; path is where v is in the arguments, such as
// "items[2].sku", or "" at the top.
func (f *fitter) fit(v any, shape *reflection.TypeShape, path string) (any, error) {
	if shape == nil || v == nil {
		return v, nil
	}
	switch shape.Kind {
	case "recursive":
		if s := f.structs[shape.Type]; s != nil {
			return f.fit(v, s, path)
		}
	case "slice", "array":
		if l, ok := v.([]any); ok {
			for i, e := range l {
				var err error
				if l[i], err = f.fit(e, shape.Elem, path+"["+strconv.Itoa(i)+"]"); err != nil {
					return nil, err
				}
			}
		}
	case "map":
		if m, ok := v.(map[string]any); ok {
			for k, e := range m {
				var err error
				if m[k], err = f.fit(e, shape.Elem, join(path, k)); err != nil {
					return nil, err
				}
			}
		}
	case "struct":
		if m, ok := v.(map[string]any); ok {
			if f.structs[shape.Type] == nil {
				f.structs[shape.Type] = shape
				defer delete(f.structs, shape.Type)
			}
			return f.fitStruct(m, shape, path)
		}
	}
	return v, nil
}

// fitStruct fits the JSON object m to the struct shape.
func (f *fitter) fitStruct(m map[string]any, shape *reflection.TypeShape, path string) (map[string]any, error) {
	out := make(map[string]any, len(m))
	from := make(map[string]string, len(m)) // field name: the key that filled it
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the same error for the same input
	for _, k := range keys {
		i := slices.IndexFunc(shape.Fields, func(fs reflection.FieldShape) bool { return fs.Name == k })
		if i < 0 {
			i = slices.IndexFunc(shape.Fields, func(fs reflection.FieldShape) bool { return strings.EqualFold(fs.Name, k) })
		}
		if i < 0 {
			return nil, unknownField(k, shape, path)
		}
		field := &shape.Fields[i]
		if prev, ok := from[field.Name]; ok {
			return nil, fmt.Errorf("the JSON arguments fill field %s twice, with %q and %q; keep one", join(path, field.Name), prev, k)
		}
		from[field.Name] = k
		v, err := f.fit(m[k], &field.Shape, join(path, field.Name))
		if err != nil {
			return nil, err
		}
		out[field.Name] = v
	}
	return out, nil
}

// unknownField says that key names no field of shape, and which fields
// there are.
func unknownField(key string, shape *reflection.TypeShape, path string) error {
	where := "the arguments"
	if path != "" {
		where = path
	}
	typ := shortName(shape.Type)
	if strings.HasPrefix(shape.Type, "struct") {
		typ = "struct"
	}
	if len(shape.Fields) == 0 {
		return fmt.Errorf("the JSON arguments have a key %q, but %s (%s) has no fields; pass {}", key, where, typ)
	}
	names := make([]string, len(shape.Fields))
	for i, fs := range shape.Fields {
		names[i] = fs.Name
	}
	return fmt.Errorf("the JSON arguments have a key %q, which is no field of %s (%s); its fields are %s",
		key, where, typ, strings.Join(names, ", "))
}

// join appends a field name to a path.
func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

package kiev

import (
	"context"
	"encoding"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// ReflectionService is the name of the reflection service every Server
// serves besides its own: a service that describes the others, so that a
// tool such as cmd/kiev can list a server's methods and the shapes of
// their arguments and replies without the server's Go types.
//
// Its methods are
//
//	List(ctx, args struct{}, reply *[]ServiceInfo)   // every service but itself
//	Describe(ctx, service string, reply *ServiceInfo) // one service, by name
//
// Describe of an unknown service fails with a *ServerError of code
// CodeNotFound that names the services the server has. The shapes say how
// the msgpack codec encodes each type: struct fields carry their wire
// names (the msgpack tag, else the json tag, else the Go name), and
// embedded structs are flattened into their parent, as the codec does.
// The service is never published in a registry.
const ReflectionService = "kiev.Reflection"

// ServiceInfo describes one service: its name and its methods, sorted by
// name.
type ServiceInfo struct {
	Name    string       `json:"name"`
	Methods []MethodInfo `json:"methods"`
}

// MethodInfo describes one method: its name within its service, such as
// "Add", and the shapes of its argument and reply.
type MethodInfo struct {
	Name  string    `json:"name"`
	Args  TypeShape `json:"args"`
	Reply TypeShape `json:"reply"`
}

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

// reflectionService is the receiver of ReflectionService.
type reflectionService struct{ s *Server }

// List returns every service of the server but kiev's own (such as
// ReflectionService and HealthService), sorted by name.
func (r *reflectionService) List(ctx context.Context, _ struct{}, reply *[]ServiceInfo) error {
	r.s.mu.Lock()
	names := make([]string, 0, len(r.s.services))
	for name := range r.s.services {
		if !isBuiltin(name) {
			names = append(names, name)
		}
	}
	r.s.mu.Unlock()
	slices.Sort(names)
	infos := make([]ServiceInfo, 0, len(names))
	for _, name := range names {
		if info, ok := r.s.describe(name); ok {
			infos = append(infos, info)
		}
	}
	*reply = infos
	return nil
}

// Describe returns the service named service.
func (r *reflectionService) Describe(ctx context.Context, service string, reply *ServiceInfo) error {
	info, ok := r.s.describe(service)
	if !ok {
		return &ServerError{Code: CodeNotFound, Message: r.s.unknownService(service)}
	}
	*reply = info
	return nil
}

// registerReflection adds ReflectionService to a new server.
func (s *Server) registerReflection() {
	s.registerBuiltin(ReflectionService, "Reflection", &reflectionService{s: s})
}

// registerBuiltin adds one of kiev's own services, rcvr of type typeName,
// to a new server under name. Its name holds a dot, which Register
// refuses, so it goes into the tables here.
func (s *Server) registerBuiltin(name, typeName string, rcvr any) {
	methods, _, err := buildService(typeName, rcvr, true)
	if err != nil {
		panic(err) // a builtin service breaks the method contract
	}
	for mname, m := range methods {
		m.name = name + "." + mname
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.services[name] = methods
	all := make(map[string]*method, len(*s.methods.Load())+len(methods))
	for k, v := range *s.methods.Load() {
		all[k] = v
	}
	for _, m := range methods {
		all[m.name] = m
	}
	s.methods.Store(&all)
}

// describe returns the description of the service named name, or false
// if there is none.
func (s *Server) describe(name string) (ServiceInfo, bool) {
	s.mu.Lock()
	methods, ok := s.services[name]
	ms := make([]*method, 0, len(methods))
	for _, m := range methods {
		ms = append(ms, m)
	}
	s.mu.Unlock()
	if !ok {
		return ServiceInfo{}, false
	}
	slices.SortFunc(ms, func(a, b *method) int { return strings.Compare(a.name, b.name) })
	info := ServiceInfo{Name: name, Methods: make([]MethodInfo, 0, len(ms))}
	for _, m := range ms {
		info.Methods = append(info.Methods, MethodInfo{
			Name:  m.name[len(name)+1:],
			Args:  shapeOf(m.argType),
			Reply: shapeOf(m.replyType),
		})
	}
	return info, true
}

// unknownService says that the server has no service name, and which it
// has.
func (s *Server) unknownService(name string) string {
	s.mu.Lock()
	var names []string
	for n := range s.services {
		if !isBuiltin(n) {
			names = append(names, n)
		}
	}
	s.mu.Unlock()
	if len(names) == 0 {
		return fmt.Sprintf("kiev: unknown service %q; the server has no services", name)
	}
	slices.Sort(names)
	return fmt.Sprintf("kiev: unknown service %q; the server has %s", name, strings.Join(names, ", "))
}

// shapeOf describes t.
func shapeOf(t reflect.Type) TypeShape {
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

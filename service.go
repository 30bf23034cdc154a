package kiev

import (
	"context"
	"errors"
	"fmt"
	"go/token"
	"reflect"
	"strings"
	"unsafe"

	"github.com/kievrpc/kiev/internal/transport"
	"github.com/kievrpc/kiev/shed"
)

var (
	typeOfError   = reflect.TypeFor[error]()
	typeOfContext = reflect.TypeFor[context.Context]()
)

// method is one callable method, with all reflection done at Register.
type method struct {
	name      string // "Service.Method"
	rcvr      reflect.Value
	fn        reflect.Value // the method's func, receiver first
	direct    directCall    // fn without reflection, when it fits
	withCtx   bool
	argType   reflect.Type // as declared: T or *T
	argIsPtr  bool
	replyType reflect.Type // the pointed-to type of the reply
	cost      shed.ServiceTime
	replies   transport.ReplySize // its replies' recent size, encoded
	stats     callStats
	dropped   []string // the answers to calls the scheduler drops, by shed.Reason
	// A stream method's kind, and its In and Out parameters' types (nil
	// for the side it has not); argType is then the server stream's
	// args, or nil, and replyType the client stream's reply, or nil.
	kind    StreamKind
	inType  reflect.Type
	outType reflect.Type
	streams streamStats
}

// newArg returns a pointer to a fresh argument, for the codec to decode
// into.
func (m *method) newArg() reflect.Value {
	if m.argIsPtr {
		return reflect.New(m.argType.Elem())
	}
	return reflect.New(m.argType)
}

// newReply returns a pointer to a fresh reply, with maps and slices made
// so that a handler may fill them directly, as net/rpc does.
func (m *method) newReply() reflect.Value {
	r := reflect.New(m.replyType)
	switch m.replyType.Kind() {
	case reflect.Map:
		r.Elem().Set(reflect.MakeMap(m.replyType))
	case reflect.Slice:
		r.Elem().Set(reflect.MakeSlice(m.replyType, 0, 0))
	}
	return r
}

// call runs the method. argp is a pointer from newArg, replyp from
// newReply.
func (m *method) call(ctx context.Context, argp, replyp reflect.Value) error {
	if m.direct.ok {
		return m.direct.call(ctx, argp.UnsafePointer(), replyp.UnsafePointer())
	}
	arg := argp
	if !m.argIsPtr {
		arg = argp.Elem()
	}
	var out []reflect.Value
	if m.withCtx {
		out = m.fn.Call([]reflect.Value{m.rcvr, reflect.ValueOf(ctx), arg, replyp})
	} else {
		out = m.fn.Call([]reflect.Value{m.rcvr, arg, replyp})
	}
	if err := out[0].Interface(); err != nil {
		return err.(error)
	}
	return nil
}

// methodContract is the text every registration error ends with.
const methodContract = "a callable method looks like\n\tfunc (t *T) Method(ctx context.Context, args A, reply *R) error\nor, as in net/rpc,\n\tfunc (t *T) Method(args A, reply *R) error\nwhere T, A and R are exported (or builtin) types; a stream method takes kiev.In[M] for the messages it receives, kiev.Out[M] for those it sends, or both:\n\tfunc (t *T) Watch(ctx context.Context, args A, out kiev.Out[M]) error\n\tfunc (t *T) Upload(ctx context.Context, in kiev.In[M], reply *R) error\n\tfunc (t *T) Chat(ctx context.Context, in kiev.In[M], out kiev.Out[N]) error"

// buildService finds the callable methods of rcvr. It returns an error
// that explains, method by method, why nothing is callable.
func buildService(name string, rcvr any, useName bool) (map[string]*method, string, error) {
	if rcvr == nil {
		return nil, "", errors.New("kiev: Register: service is nil; pass a pointer to your service struct")
	}
	v := reflect.ValueOf(rcvr)
	typ := v.Type()
	if reflect.Indirect(v).Type().PkgPath() == "" {
		// 42, "x", []int{}, struct{}{}: no type of the user's own.
		return nil, "", fmt.Errorf("kiev: Register: %s (%s) is not a service: a service is a value of a type of your own whose exported methods are the calls, as in type Arith struct{} and Register(new(Arith))\n%s", truncate(fmt.Sprint(rcvr), 40), typ, methodContract)
	}
	sname := name
	if !useName {
		sname = reflect.Indirect(v).Type().Name()
	}
	if sname == "" {
		return nil, "", fmt.Errorf("kiev: Register: no service name for type %s; use RegisterName", typ)
	}
	if !useName && !token.IsExported(sname) {
		return nil, "", fmt.Errorf("kiev: Register: type %s is not exported; export it or use RegisterName", sname)
	}
	if err := checkServiceName(sname); err != nil {
		return nil, "", err
	}
	if typ.NumMethod() == 0 && reflect.PointerTo(typ).NumMethod() == 0 {
		return nil, "", fmt.Errorf("kiev: Register: type %s has no methods, so it has no calls to serve; give it exported methods\n%s", typ, methodContract)
	}
	methods := make(map[string]*method)
	var reasons []string
	for i := 0; i < typ.NumMethod(); i++ {
		m := typ.Method(i)
		mt, why := suitable(m)
		if why != "" {
			reasons = append(reasons, fmt.Sprintf("%s.%s: %s", sname, m.Name, why))
			continue
		}
		mt.name = sname + "." + m.Name
		mt.dropped = dropMessages(mt.name)
		mt.rcvr = v
		mt.direct = newDirectCall(v, m.Name, mt)
		methods[m.Name] = mt
	}
	if len(methods) == 0 {
		msg := fmt.Sprintf("kiev: Register: type %s has no callable methods", sname)
		if typ.Kind() != reflect.Pointer {
			if pm := reflect.PointerTo(typ); pm.NumMethod() > typ.NumMethod() {
				msg += " (its methods have pointer receivers: pass a pointer, &" + sname + "{})"
			}
		}
		for _, r := range reasons {
			msg += "\n\t" + r
		}
		return nil, "", errors.New(msg + "\n" + methodContract)
	}
	return methods, sname, nil
}

// truncate cuts s to at most n bytes, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// checkServiceName reports why a service may not be registered as name.
// A name may hold dots, as net/rpc's may ("net.rpc.Arith"): a call's
// "Service.Method" splits at its last dot. Names beginning with "kiev."
// are kiev's own services'.
func checkServiceName(name string) error {
	switch {
	case isBuiltin(name):
		return fmt.Errorf("kiev: Register: service name %q is reserved: names beginning with \"kiev.\" are kiev's own services'; choose another", name)
	case strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, ".."):
		return fmt.Errorf("kiev: Register: service name %q has an empty part between dots; callers name a method \"Service.Method\", split at its last dot", name)
	case strings.ContainsAny(name, "/ \t\n"):
		return fmt.Errorf("kiev: Register: service name %q holds a slash or a space; use letters, digits, dots, _ or -", name)
	}
	return nil
}

// suitable checks one method against the contract, rule by rule. It
// returns why the method cannot be called, or "" and the method.
func suitable(m reflect.Method) (*method, string) {
	mt := m.Type
	if !m.IsExported() {
		return nil, "not exported"
	}
	if isStreamMethod(mt) {
		return suitableStream(m)
	}
	in := mt.NumIn() - 1 // without the receiver
	withCtx := in == 3 && mt.In(1) == typeOfContext
	switch {
	case in == 3 && !withCtx:
		return nil, fmt.Sprintf("first argument is %s; it must be context.Context", mt.In(1))
	case in != 2 && in != 3:
		return nil, fmt.Sprintf("takes %d arguments; it must take (ctx, args, reply) or (args, reply)", in)
	}
	argType, replyType := mt.In(in-1), mt.In(in)
	if !exportedOrBuiltin(argType) {
		return nil, fmt.Sprintf("argument type %s is not exported", argType)
	}
	if replyType.Kind() != reflect.Pointer {
		return nil, fmt.Sprintf("reply type %s is not a pointer; take *%s", replyType, replyType)
	}
	if !exportedOrBuiltin(replyType) {
		return nil, fmt.Sprintf("reply type %s is not exported", replyType)
	}
	if mt.NumOut() != 1 || mt.Out(0) != typeOfError {
		return nil, "must return exactly one value, of type error"
	}
	return &method{
		fn:        m.Func,
		withCtx:   withCtx,
		argType:   argType,
		argIsPtr:  argType.Kind() == reflect.Pointer,
		replyType: replyType.Elem(),
	}, ""
}

func exportedOrBuiltin(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return token.IsExported(t.Name()) || t.PkgPath() == ""
}

// directCall calls a method without reflect.Value.Call, which costs three
// allocations and a copy of every argument per call. It applies when the
// receiver and the args are pointers, which is the common shape
//
//	func (t *T) Method(ctx context.Context, args *A, reply *R) error
//
// Every pointer type is passed alike by the Go calling convention, so the
// method's function, of type func(*T, context.Context, *A, *R) error, is
// called through a variable of type func(unsafe.Pointer, context.Context,
// unsafe.Pointer, unsafe.Pointer) error: the same machine code, the same
// registers, the same stack maps in the callee. reflect itself calls
// methods this way, by their code pointer.
type directCall struct {
	ok      bool
	rcvr    unsafe.Pointer
	withCtx func(rcvr unsafe.Pointer, ctx context.Context, arg, reply unsafe.Pointer) error
	noCtx   func(rcvr, arg, reply unsafe.Pointer) error
}

func (d *directCall) call(ctx context.Context, arg, reply unsafe.Pointer) error {
	if d.withCtx != nil {
		return d.withCtx(d.rcvr, ctx, arg, reply)
	}
	return d.noCtx(d.rcvr, arg, reply)
}

// newDirectCall prepares the direct call of the method name of rcvr, or
// returns a zero directCall (reflection is used) when the shape does not
// fit: args passed by value, whose layout varies.
//
// A stream method's In and Out are structs of one pointer, passed as a
// pointer is: its In and Out are passed as the *serverStream they hold.
func newDirectCall(rcvr reflect.Value, name string, m *method) directCall {
	if !m.argIsPtr && m.kind != ClientStream && m.kind != BidiStream {
		return directCall{}
	}
	if rcvr.Kind() != reflect.Pointer {
		// A value receiver: call the pointer method the compiler made for
		// it, on a copy, as reflection would copy the value on each call.
		p := reflect.New(rcvr.Type())
		p.Elem().Set(rcvr)
		rcvr = p
	}
	pm, ok := rcvr.Type().MethodByName(name)
	if !ok || rcvr.IsNil() {
		return directCall{}
	}
	// A func value is a pointer to its closure; its interface holds that
	// pointer as its data word.
	f := pm.Func.Interface()
	code := (*[2]unsafe.Pointer)(unsafe.Pointer(&f))[1]
	d := directCall{ok: true, rcvr: rcvr.UnsafePointer()}
	if m.withCtx {
		*(*unsafe.Pointer)(unsafe.Pointer(&d.withCtx)) = code
	} else {
		*(*unsafe.Pointer)(unsafe.Pointer(&d.noCtx)) = code
	}
	return d
}

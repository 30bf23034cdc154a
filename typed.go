package kiev

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/reflection"
)

// Method is a typed handle on one method of a service: its Call takes
// exactly the argument type A and returns the reply type R, so that a call
// with the wrong types does not compile. Build one with [MethodOf], which
// takes the method itself and so checks A and R at compile time, or with
// [NewMethod], which takes the method's name and checks A and R against the
// server's description of it. A call through a Method is a [Client.Call] in
// every other respect: the same interceptors, retries, throttling,
// metadata, priority and deadline, and the same errors, unchanged, at the
// same cost in allocations.
//
// R is the reply as the caller receives it. For a value type such as int
// or a struct, Call decodes the reply into a fresh R and returns it. For a
// pointer type, such as *pb.Reply for a protobuf message, Call allocates
// the value it points to, decodes the reply into that, and returns the
// pointer.
//
// A Method is safe for use by many goroutines at once.
type Method[A, R any] struct {
	c    *Client
	name string       // "Service.Method"
	elem reflect.Type // when R is a pointer type, the type it points to; else nil
	conv bool         // R is a named pointer type: convert a *elem to it
}

func newMethod[A, R any](c *Client, name string) *Method[A, R] {
	m := &Method[A, R]{c: c, name: name}
	if t := reflect.TypeFor[R](); t.Kind() == reflect.Pointer {
		m.elem, m.conv = t.Elem(), t.Name() != ""
	}
	return m
}

// String returns the "Service.Method" name that m calls.
func (m *Method[A, R]) String() string { return m.name }

// Call calls the method with args and returns its reply, as [Client.Call]
// does, or R's zero value and the error. The method value m.Call is a
// func(context.Context, A) (R, error).
func (m *Method[A, R]) Call(ctx context.Context, args A) (R, error) {
	var zero R
	if m.elem != nil {
		p := m.fresh()
		if err := m.c.Call(ctx, m.name, args, p); err != nil {
			return zero, err
		}
		return p, nil
	}
	var r R // on the heap, as the reply of a Client.Call is
	if err := m.c.Call(ctx, m.name, args, &r); err != nil {
		return zero, err
	}
	return r, nil
}

// CallInto calls the method with args and decodes its reply into reply,
// which may be nil to discard it. Use it for a reply that must not be
// copied, such as a protobuf message from a Method made by MethodOf, or
// to decode into storage of the caller's. When R is a pointer type and
// *reply is nil, CallInto sets it to a fresh value first.
func (m *Method[A, R]) CallInto(ctx context.Context, args A, reply *R) error {
	return m.c.Call(ctx, m.name, args, m.into(reply))
}

// Go starts a call of the method and returns at once, as [Client.Go] does:
// the Call is sent on done when it completes, and its Reply is reply (or,
// when R is a pointer type, *reply, set to a fresh value first if nil).
func (m *Method[A, R]) Go(ctx context.Context, args A, reply *R, done chan *Call) *Call {
	return m.c.Go(ctx, m.name, args, m.into(reply), done)
}

// fresh returns a pointer R to a new value, for a pointer type R.
func (m *Method[A, R]) fresh() R {
	p := reflect.New(m.elem)
	if m.conv {
		p = p.Convert(reflect.TypeFor[R]())
	}
	return p.Interface().(R)
}

// into returns what the codec decodes into for reply.
func (m *Method[A, R]) into(reply *R) any {
	switch {
	case reply == nil:
		return nil // an untyped nil: Client.Call discards the reply
	case m.elem == nil:
		return reply
	}
	p := reflect.ValueOf(reply).Elem()
	if p.IsNil() {
		p.Set(reflect.New(m.elem))
	}
	return p.Interface()
}

// MethodOption configures [MethodOf] and [NetRPCMethodOf].
type MethodOption interface{ applyMethod(*methodOptions) }

type methodOptions struct {
	service string
	hedging *Hedging // WithHedging
}

type methodOption func(*methodOptions)

func (f methodOption) applyMethod(o *methodOptions) { f(o) }

// WithServiceName tells [MethodOf] the name the method's service is
// registered under, when it is not the name of the method's receiver type:
// a service registered with [Server.RegisterName], or a method expression of an
// interface that the service implements. An empty name means the
// receiver type's name.
func WithServiceName(name string) MethodOption {
	return methodOption(func(o *methodOptions) { o.service = name })
}

// MethodOf returns a Method that calls method through c. method is a
// method expression, such as (*Arith).Mul or Arith.Mul, of a method of
// kiev's shape,
//
//	func (t *T) Mul(ctx context.Context, args A, reply *R) error
//
// so the compiler checks that A and R are the method's own types, and the
// name needs no string: the call goes to "T.Mul", the name
// [Server.Register] gives it (see [WithServiceName] for another). T may also be an interface that
// the service implements, such as one a package shares between servers
// and clients; its method expression, API.Mul, calls "API.Mul" unless
// WithServiceName says otherwise.
//
// MethodOf fails if method is not such a method expression (a func
// literal, say), or if a server could not serve the method, for the reason
// Register would give. It does not ask the server. For a method of
// net/rpc's shape, without ctx, use [NetRPCMethodOf].
//
// [Method.Call] returns R by value. A protobuf message must not be copied,
// so for a method that replies one, call [Method.CallInto], or use
// [NewMethod] with a pointer reply type, NewMethod[*pb.Args, *pb.Reply].
func MethodOf[T, A, R any](c *Client, method func(T, context.Context, A, *R) error, opts ...MethodOption) (*Method[A, R], error) {
	name, err := methodName[T]("MethodOf", method, opts)
	if err != nil {
		return nil, err
	}
	if err := c.hedgeMethod(name, opts); err != nil {
		return nil, err
	}
	return newMethod[A, R](c, name), nil
}

// NetRPCMethodOf is [MethodOf] for a method of net/rpc's shape,
//
//	func (t *T) Add(args A, reply *R) error
//
// passed as a method expression such as (*Arith).Add.
func NetRPCMethodOf[T, A, R any](c *Client, method func(T, A, *R) error, opts ...MethodOption) (*Method[A, R], error) {
	name, err := methodName[T]("NetRPCMethodOf", method, opts)
	if err != nil {
		return nil, err
	}
	if err := c.hedgeMethod(name, opts); err != nil {
		return nil, err
	}
	return newMethod[A, R](c, name), nil
}

// methodName returns the "Service.Method" name of fn, a method expression
// of a method of T, or says why fn is not one.
func methodName[T any](caller string, fn any, opts []MethodOption) (string, error) {
	var o methodOptions
	for _, opt := range opts {
		opt.applyMethod(&o)
	}
	fv := reflect.ValueOf(fn)
	if fv.IsNil() {
		return "", fmt.Errorf("kiev: %s: the method is nil; pass a method expression, such as (*Arith).Mul", caller)
	}
	t := reflect.TypeFor[T]()
	named := t
	if t.Kind() == reflect.Pointer {
		named = t.Elem()
	}
	if named.Name() == "" {
		return "", fmt.Errorf("kiev: %s: the receiver type %s has no name, so no service is named after it; pass a method expression of your service's type, such as (*Arith).Mul", caller, t)
	}
	// The symbol of a method expression is "pkg.T.M" or "pkg.(*T).M",
	// with a generic type's arguments written "[...]".
	recv := named.Name()
	if i := strings.IndexByte(recv, '['); i >= 0 {
		recv = recv[:i] + "[...]"
	}
	if named != t {
		recv = "(*" + recv + ")"
	}
	sym := "?"
	if f := runtime.FuncForPC(fv.Pointer()); f != nil {
		sym = f.Name()
	}
	dot := strings.LastIndexByte(sym, '.')
	meth := sym[dot+1:]
	m, ok := t.MethodByName(meth)
	if dot < 0 || !strings.HasSuffix(sym[:dot], "."+recv) || !ok {
		return "", fmt.Errorf("kiev: %s: the func passed (%s) is not a method expression of an exported method of %s; pass one, such as %s.Mul", caller, sym, t, recv)
	}
	if t.Kind() != reflect.Interface && m.Type != fv.Type() {
		return "", fmt.Errorf("kiev: %s: the func passed (%s) is not the method %s.%s", caller, sym, t, meth)
	}
	service := o.service
	if service == "" {
		service = named.Name()
	}
	// The method expression's type is the method's, receiver first, as
	// Register sees it.
	if _, why := suitable(reflect.Method{Name: meth, Type: fv.Type()}); why != "" {
		return "", fmt.Errorf("kiev: %s: a server cannot serve %s.%s: %s\n%s", caller, service, meth, why, methodContract)
	}
	return service + "." + meth, nil
}

// NewMethod returns a Method that calls serviceMethod ("Service.Method")
// through c, once it has checked A and R against the server's own types.
// It asks the server, with ctx, for its description of the service (a
// call to [reflection.ServiceName]'s Describe, in msgpack whatever c's codec),
// and fails if the service or the method is unknown (an error that matches
// [ErrNotFound] and lists what there is), if the server cannot be asked,
// or if A cannot carry the method's argument or R its reply: that error
// names the types of both sides.
//
// Types fit as the codec decodes them: they are the same, or have the
// same shape, field by field (struct fields are matched by their names on
// the wire, and a field that one side lacks is skipped, as in a call; an
// int fits any width of int, a float, or a uint; a string fits []byte; a
// pointer fits what it points to). So a client may use its own copy of the
// server's types.
//
// [MethodOf] checks the types at compile time instead, without asking, when
// the client can import the service's type or an interface it implements.
// Over UDP, NewMethod needs a server that sets [Packet.ServeReflection].
func NewMethod[A, R any](ctx context.Context, c *Client, serviceMethod string) (*Method[A, R], error) {
	ta, tr := reflect.TypeFor[A](), reflect.TypeFor[R]()
	what := fmt.Sprintf("NewMethod[%s, %s](%q)", ta, tr, serviceMethod)
	dot := strings.LastIndexByte(serviceMethod, '.')
	if dot <= 0 || dot == len(serviceMethod)-1 {
		return nil, fmt.Errorf("kiev: %s: the name is not of the form \"Service.Method\"", what)
	}
	service, meth := serviceMethod[:dot], serviceMethod[dot+1:]
	// The description is asked for in msgpack, whatever c's codec: the
	// server always knows it, and reflection.ServiceInfo is no protobuf message.
	var info reflection.ServiceInfo
	call := &Call{ServiceMethod: reflection.ServiceName + ".Describe", Args: service, Reply: &info,
		codec: codec.Msgpack, signal: make(chan *Call, 1)}
	if err := shutdownErr(c.invoke(ctx, call)); err != nil {
		return nil, &methodError{"kiev: " + what + ": " + strings.TrimPrefix(err.Error(), "kiev: "), err}
	}
	i := slices.IndexFunc(info.Methods, func(mi reflection.MethodInfo) bool { return mi.Name == meth })
	if i < 0 {
		names := make([]string, len(info.Methods))
		for i, mi := range info.Methods {
			names[i] = mi.Name
		}
		return nil, &methodError{fmt.Sprintf("kiev: %s: service %q has no method %q%s; it has %s", what, service, meth, suggest(meth, names), strings.Join(names, ", ")), ErrNotFound}
	}
	mi := info.Methods[i]
	if mi.ClientStreaming || mi.ServerStreaming {
		return nil, fmt.Errorf("kiev: %s: %s is a stream method; open it with Client.Stream", what, serviceMethod)
	}
	// The args travel from here to there, the reply from there to here.
	where, here, there := "", reflection.TypeShape{}, reflection.TypeShape{}
	if p, from, to, ok := reflection.Fits(reflection.ShapeOf(ta), mi.Args, "argument"); !ok {
		where, here, there = p, from, to
	} else if p, from, to, ok := reflection.Fits(mi.Reply, reflection.ShapeOf(tr), "reply"); !ok {
		where, here, there = p, to, from
	}
	if where != "" {
		return nil, fmt.Errorf("kiev: %s: the server's method takes %s and replies %s: the %s is %s there and %s here",
			what, mi.Args.Type, mi.Reply.Type, where, reflection.Summary(there), reflection.Summary(here))
	}
	return newMethod[A, R](c, serviceMethod), nil
}

// methodError is an error of NewMethod's that wraps the cause it names.
type methodError struct {
	msg string
	err error
}

func (e *methodError) Error() string { return e.msg }
func (e *methodError) Unwrap() error { return e.err }

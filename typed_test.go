package kiev_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/testpb"
)

// ArithAPI is the interface of Arith that a package would share with its
// clients.
type ArithAPI interface {
	Mul(ctx context.Context, args *Args, reply *Reply) error
}

var _ ArithAPI = (*Arith)(nil)

// Box is a generic service: Register names it "Box[int]".
type Box[T any] struct{}

func (Box[T]) Echo(ctx context.Context, v T, reply *T) error {
	*reply = v
	return nil
}

// Outer serves Arith's methods, promoted from the embedded field.
type Outer struct{ *Arith }

// Lower has a method whose argument type is unexported: no server serves
// it.
type Lower struct{}

type lowerArgs struct{ N int }

func (Lower) Do(ctx context.Context, args lowerArgs, reply *int) error { return nil }

// typedServer serves Arith, Arith as "Calc", Outer, Box[int], Push and
// Bench on one server, and returns its address.
func typedServer(t testing.TB, opts ...kiev.ServerOption) string {
	t.Helper()
	srv := kiev.NewServer(opts...)
	for _, svc := range []any{&Arith{}, &Outer{&Arith{}}, Box[int]{}, Push{}, Bench{}} {
		if err := srv.Register(svc); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.RegisterName("Calc", &Arith{}); err != nil {
		t.Fatal(err)
	}
	return startServer(t, srv)
}

// must returns m, failing the test on err.
func must[M any](t testing.TB) func(m M, err error) M {
	return func(m M, err error) M {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
}

// TestMethodOf checks the names MethodOf derives from method expressions,
// by calling each.
func TestMethodOf(t *testing.T) {
	c := dial(t, typedServer(t))
	ctx := context.Background()

	mul := must[*kiev.Method[*Args, Reply]](t)(kiev.MethodOf(c, (*Arith).Mul))
	add := must[*kiev.Method[Args, Reply]](t)(kiev.NetRPCMethodOf(c, (*Arith).Add))
	api := must[*kiev.Method[*Args, Reply]](t)(kiev.MethodOf(c, ArithAPI.Mul, kiev.WithServiceName("Arith")))
	calc := must[*kiev.Method[*Args, Reply]](t)(kiev.MethodOf(c, (*Arith).Mul, kiev.WithServiceName("Calc")))
	outer := must[*kiev.Method[*Args, Reply]](t)(kiev.MethodOf(c, (*Outer).Mul))
	send := must[*kiev.Method[string, string]](t)(kiev.MethodOf(c, Push.Send))
	sendp := must[*kiev.Method[string, string]](t)(kiev.MethodOf(c, (*Push).Send))
	box := must[*kiev.Method[int, int]](t)(kiev.MethodOf(c, (*Box[int]).Echo))
	for _, tc := range []struct {
		name string
		m    interface{ String() string }
		call func() (any, error)
		want any
	}{
		{"Arith.Mul", mul, func() (any, error) { return mul.Call(ctx, &Args{7, 8}) }, Reply{56}},
		{"Arith.Add", add, func() (any, error) { return add.Call(ctx, Args{7, 8}) }, Reply{15}},
		{"Arith.Mul", api, func() (any, error) { return api.Call(ctx, &Args{2, 3}) }, Reply{6}},
		{"Calc.Mul", calc, func() (any, error) { return calc.Call(ctx, &Args{3, 3}) }, Reply{9}},
		{"Outer.Mul", outer, func() (any, error) { return outer.Call(ctx, &Args{4, 4}) }, Reply{16}},
		{"Push.Send", send, func() (any, error) { return send.Call(ctx, "ann") }, "sent to ann at priority 5"},
		{"Push.Send", sendp, func() (any, error) { return sendp.Call(ctx, "bob") }, "sent to bob at priority 5"},
		{"Box[int].Echo", box, func() (any, error) { return box.Call(ctx, 42) }, 42},
	} {
		if got := tc.m.String(); got != tc.name {
			t.Errorf("MethodOf named %s; want %s", got, tc.name)
			continue
		}
		got, err := tc.call()
		if err != nil || got != tc.want {
			t.Errorf("%s: got %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}

	// The method value is a plain func.
	var f func(context.Context, *Args) (Reply, error) = mul.Call
	if r, err := f(ctx, &Args{6, 7}); err != nil || r.C != 42 {
		t.Errorf("mul.Call as a func: %v, %v", r, err)
	}
}

// TestMethodOfErrors checks that MethodOf refuses what is not a method
// expression of a method a server could serve, saying why.
func TestMethodOfErrors(t *testing.T) {
	c := dial(t, typedServer(t))
	var nilMethod func(*Arith, context.Context, *Args, *Reply) error
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"func literal", func() error {
			_, err := kiev.MethodOf(c, func(*Arith, context.Context, *Args, *Reply) error { return nil })
			return err
		}, "kiev: MethodOf: the func passed (github.com/kievrpc/kiev_test.TestMethodOfErrors."},
		{"nil", func() error {
			_, err := kiev.MethodOf(c, nilMethod)
			return err
		}, "kiev: MethodOf: the method is nil"},
		{"unnamed receiver", func() error {
			_, err := kiev.MethodOf(c, func(struct{}, context.Context, *Args, *Reply) error { return nil })
			return err
		}, "the receiver type struct {} has no name"},
		{"unexported method", func() error {
			_, err := kiev.NetRPCMethodOf(c, (*Reply).fill)
			return err
		}, "not a method expression of an exported method of *kiev_test.Reply"},
		{"unexported argument", func() error {
			_, err := kiev.MethodOf(c, Lower.Do)
			return err
		}, "kiev: MethodOf: a server cannot serve Lower.Do: argument type kiev_test.lowerArgs is not exported"},
	} {
		err := tc.err()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func (r *Reply) fill(args Args, reply *int) error { return nil }

// MyArgs and MyReply are a client's own copies of Args and Reply, with
// other widths of int.
type MyArgs struct{ A, B int64 }

type MyReply struct{ C int32 }

// ReplyPtr is a named pointer type.
type ReplyPtr *Reply

// TestNewMethod checks NewMethod's check of the types against the
// server's, and its errors, which name the types of both sides.
func TestNewMethod(t *testing.T) {
	addr := typedServer(t)
	c := dial(t, addr)
	ctx := context.Background()

	mul := must[*kiev.Method[*Args, Reply]](t)(kiev.NewMethod[*Args, Reply](ctx, c, "Arith.Mul"))
	if r, err := mul.Call(ctx, &Args{7, 8}); err != nil || r.C != 56 {
		t.Errorf("Arith.Mul: %v, %v", r, err)
	}
	own := must[*kiev.Method[MyArgs, *MyReply]](t)(kiev.NewMethod[MyArgs, *MyReply](ctx, c, "Arith.Mul"))
	if r, err := own.Call(ctx, MyArgs{6, 7}); err != nil || r.C != 42 {
		t.Errorf("Arith.Mul into a copy of the types: %v, %v", r, err)
	}
	named := must[*kiev.Method[*Args, ReplyPtr]](t)(kiev.NewMethod[*Args, ReplyPtr](ctx, c, "Arith.Mul"))
	if r, err := named.Call(ctx, &Args{2, 5}); err != nil || r.C != 10 {
		t.Errorf("Arith.Mul into a named pointer type: %v, %v", r, err)
	}
	var rp ReplyPtr
	if err := named.CallInto(ctx, &Args{3, 5}, &rp); err != nil || rp.C != 15 {
		t.Errorf("Arith.Mul into a nil named pointer: %v, %v", rp, err)
	}
	must[*kiev.Method[map[string]int, map[string]any]](t)(kiev.NewMethod[map[string]int, map[string]any](ctx, c, "Arith.Mul"))
	must[*kiev.Method[[]byte, string]](t)(kiev.NewMethod[[]byte, string](ctx, c, "Arith.Echo"))

	for _, tc := range []struct {
		name     string
		err      func() error
		want     string
		notFound bool
	}{
		{"reply", func() error {
			_, err := kiev.NewMethod[Args, string](ctx, c, "Arith.Mul")
			return err
		}, `kiev: NewMethod[kiev_test.Args, string]("Arith.Mul"): the server's method takes kiev_test.Args and replies kiev_test.Reply: the reply is kiev_test.Reply (struct) there and string here`, false},
		{"argument", func() error {
			_, err := kiev.NewMethod[string, Reply](ctx, c, "Arith.Mul")
			return err
		}, `the argument is kiev_test.Args (struct) there and string here`, false},
		{"field", func() error {
			_, err := kiev.NewMethod[struct{ A, B string }, Reply](ctx, c, "Arith.Mul")
			return err
		}, `the argument field A is int there and string here`, false},
		{"float into int", func() error {
			_, err := kiev.NewMethod[struct{ A, B float64 }, Reply](ctx, c, "Arith.Mul")
			return err
		}, `the argument field A is int there and float64 here`, false},
		{"no field in common", func() error {
			_, err := kiev.NewMethod[Args, struct{ D int }](ctx, c, "Arith.Mul")
			return err
		}, `the reply, which shares no field, is kiev_test.Reply (struct) there and struct { D int } (struct) here`, false},
		{"element", func() error {
			_, err := kiev.NewMethod[[]int, []byte](ctx, c, "Arith.Echo")
			return err
		}, `the argument is []uint8 (bytes) there and []int (slice) here`, false},
		{"unknown method", func() error {
			_, err := kiev.NewMethod[Args, Reply](ctx, c, "Arith.Mull")
			return err
		}, `kiev: NewMethod[kiev_test.Args, kiev_test.Reply]("Arith.Mull"): service "Arith" has no method "Mull" (did you mean "Mul"?); it has Add, Big, Block, Deadline, Div, Echo, Meta, Mul, Panic`, true},
		{"unknown service", func() error {
			_, err := kiev.NewMethod[Args, Reply](ctx, c, "Arth.Mul")
			return err
		}, `kiev: NewMethod[kiev_test.Args, kiev_test.Reply]("Arth.Mul"): unknown service "Arth"; the server has`, true},
		{"not a name", func() error {
			_, err := kiev.NewMethod[Args, Reply](ctx, c, "ArithMul")
			return err
		}, `the name is not of the form "Service.Method"`, false},
	} {
		err := tc.err()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error containing %q", tc.name, err, tc.want)
		}
		if errors.Is(err, kiev.ErrNotFound) != tc.notFound {
			t.Errorf("%s: errors.Is(%v, ErrNotFound) = %v, want %v", tc.name, err, !tc.notFound, tc.notFound)
		}
	}

	// A closed client, and a ctx that has ended, fail the check as they
	// would a call.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := kiev.NewMethod[*Args, Reply](done, c, "Arith.Mul"); !errors.Is(err, context.Canceled) {
		t.Errorf("NewMethod with a canceled ctx: %v; want context.Canceled", err)
	}
	closed := dial(t, addr)
	closed.Close()
	if _, err := kiev.NewMethod[*Args, Reply](ctx, closed, "Arith.Mul"); !errors.Is(err, kiev.ErrShutdown) {
		t.Errorf("NewMethod on a closed client: %v; want ErrShutdown", err)
	}
}

// TestNewMethodUDP checks that NewMethod says why it cannot check a
// method over UDP, unless the server serves its description there.
func TestNewMethodUDP(t *testing.T) {
	ctx := context.Background()
	for _, serve := range []bool{false, true} {
		srv := kiev.NewServer(kiev.WithPacket(kiev.Packet{ServeReflection: serve, MaxDatagram: 8192}))
		if err := srv.Register(&Arith{}); err != nil {
			t.Fatal(err)
		}
		c := dial(t, servePacket(t, srv, nil), kiev.WithPacket(kiev.Packet{MaxDatagram: 8192}))
		m, err := kiev.NewMethod[Args, Reply](ctx, c, "Arith.Add")
		if !serve {
			if err == nil || !strings.Contains(err.Error(), "Packet.ServeReflection") {
				t.Errorf("NewMethod over UDP without ServeReflection: %v; want an error naming Packet.ServeReflection", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if r, err := m.Call(ctx, Args{1, 2}); err != nil || r.C != 3 {
			t.Errorf("Arith.Add over UDP: %v, %v", r, err)
		}
	}
}

// TestMethodProtobuf calls through both codecs: a protobuf reply as a
// pointer type (NewMethod) and through CallInto (MethodOf, whose R is the
// message itself).
func TestMethodProtobuf(t *testing.T) {
	addr := typedServer(t)
	ctx := context.Background()
	pc := dial(t, addr, kiev.WithCodec(codec.Protobuf))
	mc := dial(t, addr)

	echo := must[*kiev.Method[*testpb.Small, *testpb.Small]](t)(kiev.NewMethod[*testpb.Small, *testpb.Small](ctx, pc, "Bench.EchoProto"))
	got, err := echo.Call(ctx, smallProto)
	if err != nil || got.GetId() != 42 || got.GetName() != "push-ack" || len(got.GetTags()) != 4 {
		t.Errorf("Bench.EchoProto: %v, %v", got, err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if got, err := echo.Call(done, smallProto); got != nil || !errors.Is(err, context.Canceled) {
		t.Errorf("Bench.EchoProto with a canceled ctx: %v, %v; want nil, context.Canceled", got, err)
	}
	var reply *testpb.Small
	if err := echo.CallInto(ctx, smallProto, &reply); err != nil || reply.GetName() != "push-ack" {
		t.Errorf("Bench.EchoProto into a nil pointer: %v, %v", reply, err)
	}
	if _, err := kiev.NewMethod[*testpb.Small, *testpb.Echo](ctx, pc, "Bench.EchoProto"); err == nil ||
		!strings.Contains(err.Error(), "the reply, which shares no field, is testpb.Small (struct) there and testpb.Echo (struct) here") {
		t.Errorf("NewMethod with the wrong message: %v", err)
	}

	of := must[*kiev.Method[*testpb.Small, testpb.Small]](t)(kiev.MethodOf(pc, Bench.EchoProto))
	var out testpb.Small
	if err := of.CallInto(ctx, smallProto, &out); err != nil || out.GetId() != 42 {
		t.Errorf("Bench.EchoProto through MethodOf: %v, %v", out.GetId(), err)
	}

	// The same method value over msgpack, and its protobuf twin refused by
	// the protobuf codec before the call is sent.
	small := must[*kiev.Method[*Small, Small]](t)(kiev.MethodOf(mc, Bench.Echo))
	if r, err := small.Call(ctx, &smallArgs); err != nil || r.Name != "push-ack" {
		t.Errorf("Bench.Echo: %v, %v", r, err)
	}
	wrong := must[*kiev.Method[*Small, Small]](t)(kiev.MethodOf(pc, Bench.Echo))
	if _, err := wrong.Call(ctx, &smallArgs); !errors.Is(err, codec.ErrNotProto) {
		t.Errorf("a plain struct over protobuf: %v; want codec.ErrNotProto", err)
	}
}

// TestMethodPassesThrough checks that a typed call is a Client.Call: the
// same errors, interceptors, metadata, priority and deadline.
func TestMethodPassesThrough(t *testing.T) {
	var clientSaw []string
	serverSaw := make(chan string, 100)
	srvIC := func(next kiev.Handler) kiev.Handler {
		return func(ctx context.Context, req *kiev.Request) error {
			serverSaw <- req.ServiceMethod
			return next(ctx, req)
		}
	}
	cliIC := func(next kiev.Invoker) kiev.Invoker {
		return func(ctx context.Context, call *kiev.Call) error {
			err := next(ctx, call)
			clientSaw = append(clientSaw, call.ServiceMethod)
			if r, ok := call.Reply.(*Reply); ok && err == nil {
				clientSaw = append(clientSaw, fmt.Sprint("reply ", r.C))
			}
			return err
		}
	}
	addr := typedServer(t, kiev.WithServerInterceptor(srvIC))
	c := dial(t, addr, kiev.WithClientInterceptor(cliIC))
	ctx := context.Background()

	add := must[*kiev.Method[Args, Reply]](t)(kiev.NetRPCMethodOf(c, (*Arith).Add))
	if _, err := add.Call(ctx, Args{3, 4}); err != nil {
		t.Fatal(err)
	}
	if got := <-serverSaw; got != "Arith.Add" || strings.Join(clientSaw, ",") != "Arith.Add,reply 7" {
		t.Errorf("interceptors saw server %q, client %q", got, clientSaw)
	}

	div := must[*kiev.Method[Args, Reply]](t)(kiev.NetRPCMethodOf(c, (*Arith).Div))
	r, err := div.Call(ctx, Args{1, 0})
	if r != (Reply{}) {
		t.Errorf("Arith.Div by zero returned %v beside its error; want the zero Reply", r)
	}
	var se *kiev.ServerError
	if !errors.As(err, &se) || se.Code != kiev.CodeApplication || err.Error() != "divide by zero" {
		t.Errorf("Arith.Div by zero: %#v; want the handler's error as a *ServerError", err)
	}
	if err := div.CallInto(ctx, Args{1, 0}, &r); !errors.As(err, &se) || err.Error() != "divide by zero" {
		t.Errorf("CallInto's error: %v", err)
	}
	panics := must[*kiev.Method[Args, Reply]](t)(kiev.NetRPCMethodOf(c, (*Arith).Panic))
	if _, err := panics.Call(ctx, Args{}); !errors.Is(err, kiev.ErrInternal) {
		t.Errorf("Arith.Panic: %v; want ErrInternal", err)
	}
	nope := must[*kiev.Method[*Small, Small]](t)(kiev.MethodOf(c, Bench.Echo, kiev.WithServiceName("Nope")))
	if _, err := nope.Call(ctx, &smallArgs); !errors.Is(err, kiev.ErrNotFound) {
		t.Errorf("an unknown service: %v; want ErrNotFound", err)
	}

	meta := must[*kiev.Method[string, string]](t)(kiev.MethodOf(c, (*Arith).Meta))
	if v, err := meta.Call(kiev.WithMetadata(ctx, "trace-id", "4bf9"), "trace-id"); err != nil || v != "4bf9" {
		t.Errorf("metadata: %q, %v", v, err)
	}
	send := must[*kiev.Method[string, string]](t)(kiev.MethodOf(c, Push.Send))
	if v, err := send.Call(kiev.WithPriority(ctx, kiev.MaxPriority), "ann"); err != nil || v != "sent to ann at priority 9" {
		t.Errorf("priority: %q, %v", v, err)
	}
	deadline := must[*kiev.Method[Args, time.Duration]](t)(kiev.MethodOf(c, (*Arith).Deadline))
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if left, err := deadline.Call(dctx, Args{}); err != nil || left <= 0 || left > 5*time.Second {
		t.Errorf("deadline: the handler had %v left, %v; want (0, 5s]", left, err)
	}
	done, cancelDone := context.WithCancel(ctx)
	cancelDone()
	if _, err := add.Call(done, Args{}); !errors.Is(err, context.Canceled) {
		t.Errorf("a canceled ctx: %v; want context.Canceled", err)
	}

	closed := dial(t, addr)
	m := must[*kiev.Method[Args, Reply]](t)(kiev.NetRPCMethodOf(closed, (*Arith).Add))
	closed.Close()
	if _, err := m.Call(ctx, Args{}); err != kiev.ErrShutdown {
		t.Errorf("a closed client: %v; want ErrShutdown itself", err)
	}
}

// TestMethodGo checks typed Go and CallInto.
func TestMethodGo(t *testing.T) {
	addr := typedServer(t)
	ctx := context.Background()
	c := dial(t, addr)
	add := must[*kiev.Method[Args, Reply]](t)(kiev.NetRPCMethodOf(c, (*Arith).Add))
	done := make(chan *kiev.Call, 3)
	replies := make([]Reply, 3)
	for i := range replies {
		add.Go(ctx, Args{i, 10}, &replies[i], done)
	}
	for range replies {
		if call := <-done; call.Error != nil {
			t.Fatal(call.Error)
		}
	}
	if replies[0].C != 10 || replies[1].C != 11 || replies[2].C != 12 {
		t.Errorf("Go's replies: %v", replies)
	}
	if call := <-add.Go(ctx, Args{1, 1}, nil, nil).Done; call.Error != nil || call.Reply != nil {
		t.Errorf("Go discarding its reply: %v, %v", call.Reply, call.Error)
	}

	// A pointer R: Go gives a nil *reply a value, and decodes into one
	// that is there.
	pc := dial(t, addr, kiev.WithCodec(codec.Protobuf))
	echo := must[*kiev.Method[*testpb.Small, *testpb.Small]](t)(kiev.NewMethod[*testpb.Small, *testpb.Small](ctx, pc, "Bench.EchoProto"))
	var fresh *testpb.Small
	call := <-echo.Go(ctx, smallProto, &fresh, nil).Done
	if call.Error != nil || fresh.GetName() != "push-ack" || call.Reply != any(fresh) {
		t.Errorf("Go into a nil pointer: %v, %v, Reply %v", fresh, call.Error, call.Reply)
	}
	mine := &testpb.Small{}
	keep := mine
	if err := echo.CallInto(ctx, smallProto, &mine); err != nil || mine != keep || mine.GetId() != 42 {
		t.Errorf("CallInto an existing message: %v, %v (same pointer: %v)", mine, err, mine == keep)
	}
	if err := echo.CallInto(ctx, smallProto, nil); err != nil {
		t.Errorf("CallInto discarding its reply: %v", err)
	}
}

var addArgs = Args{7, 8}

// TestTypedCallAllocations checks that a typed call costs no more
// allocations than the same Client.Call, on the same server, counted on
// both sides. It runs without -race, with the other allocation guards.
func TestTypedCallAllocations(t *testing.T) {
	if raceEnabled || testing.CoverMode() != "" {
		t.Skip("allocation counts differ under -race and -cover")
	}
	addr := typedServer(t)
	ctx := context.Background()
	mc := dial(t, addr)
	pc := dial(t, addr, kiev.WithCodec(codec.Protobuf))
	echo := must[*kiev.Method[*Small, Small]](t)(kiev.MethodOf(mc, Bench.Echo))
	add := must[*kiev.Method[Args, Reply]](t)(kiev.NetRPCMethodOf(mc, (*Arith).Add))
	proto := must[*kiev.Method[*testpb.Small, *testpb.Small]](t)(kiev.NewMethod[*testpb.Small, *testpb.Small](ctx, pc, "Bench.EchoProto"))
	done := make(chan *kiev.Call, 1)
	var errs []error
	check := func(err error) {
		if err != nil && len(errs) < 3 {
			errs = append(errs, err)
		}
	}
	for _, tc := range []struct {
		name         string
		typed, plain func()
	}{
		{"msgpack, args by pointer",
			func() { _, err := echo.Call(ctx, &smallArgs); check(err) },
			func() { var out Small; check(mc.Call(ctx, "Bench.Echo", &smallArgs, &out)) }},
		{"msgpack, args by value",
			func() { _, err := add.Call(ctx, addArgs); check(err) },
			func() { var out Reply; check(mc.Call(ctx, "Arith.Add", addArgs, &out)) }},
		{"msgpack, CallInto",
			func() { var out Small; check(echo.CallInto(ctx, &smallArgs, &out)) },
			func() { var out Small; check(mc.Call(ctx, "Bench.Echo", &smallArgs, &out)) }},
		{"msgpack, Go",
			func() { var out Small; check((<-echo.Go(ctx, &smallArgs, &out, done).Done).Error) },
			func() { var out Small; check((<-mc.Go(ctx, "Bench.Echo", &smallArgs, &out, done).Done).Error) }},
		{"protobuf, pointer reply",
			func() { _, err := proto.Call(ctx, smallProto); check(err) },
			func() { var out testpb.Small; check(pc.Call(ctx, "Bench.EchoProto", smallProto, &out)) }},
	} {
		tc.typed() // warm the pools and the connection
		tc.plain()
		typed := testing.AllocsPerRun(200, tc.typed)
		plain := testing.AllocsPerRun(200, tc.plain)
		t.Logf("%s: typed %.0f, Client %.0f allocations per call", tc.name, typed, plain)
		if typed > plain {
			t.Errorf("%s: a typed call makes %.0f allocations, Client's %.0f", tc.name, typed, plain)
		}
	}
	if len(errs) > 0 {
		t.Errorf("calls failed: %v", errs)
	}
}

// BenchmarkMethodCall compares a typed call with the same Client.Call,
// one caller at a time.
func BenchmarkMethodCall(b *testing.B) {
	addr := typedServer(b)
	ctx := context.Background()
	c := dial(b, addr)
	echo := must[*kiev.Method[*Small, Small]](b)(kiev.MethodOf(c, Bench.Echo))
	b.Run("typed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := echo.Call(ctx, &smallArgs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("client", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var out Small
			if err := c.Call(ctx, "Bench.Echo", &smallArgs, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}

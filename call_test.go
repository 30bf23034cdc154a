package kiev_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/testpb"
)

func TestUnknownServiceAndMethod(t *testing.T) {
	c := dial(t, newArithServer(t, nil))
	for _, tc := range []struct{ name, want string }{
		{"Nope.Add", `unknown service "Nope"`},
		{"Nope.Add", "the server has Arith"},
		{"arith.Add", `(did you mean "Arith"?)`},
		{"Arith.Nope", `service "Arith" has no method "Nope"`},
		{"Arith.Nope", "it has Add, Big, Block, "},
		{"Arith.add", `has no method "add" (did you mean "Add"?)`},
		{"Arith.Ad", `(did you mean "Add"?)`},
		{"NoDot", "not of the form Service.Method"},
	} {
		err := c.Call(context.Background(), tc.name, Args{}, &Reply{})
		if !errors.Is(err, kiev.ErrNotFound) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Call(%q) = %v; want ErrNotFound saying %q", tc.name, err, tc.want)
		}
	}
	err := c.Call(context.Background(), "Arith.Zzzzzz", Args{}, &Reply{})
	if err == nil || strings.Contains(err.Error(), "did you mean") {
		t.Errorf("Call of a name like none = %v; want no suggestion", err)
	}
}

// A reply that cannot hold the answer is refused before the call is sent,
// so the handler's side effects never happen for a reply that is lost.
func TestReplyCheckedBeforeSending(t *testing.T) {
	svc := &Tally{}
	srv := kiev.NewServer()
	if err := srv.Register(svc); err != nil {
		t.Fatal(err)
	}
	c := dial(t, startServer(t, srv))
	var r Reply
	for _, reply := range []any{r, 42, (*Reply)(nil)} {
		err := c.Call(context.Background(), "Tally.Add", Args{1, 2}, reply)
		if err == nil || !strings.Contains(err.Error(), "not a pointer") || !strings.Contains(err.Error(), "not sent") {
			t.Errorf("Call with reply %T = %v; want an error saying it is not a pointer and was not sent", reply, err)
		}
		call := <-c.Go(context.Background(), "Tally.Add", Args{1, 2}, reply, nil).Done
		if call.Error == nil || !strings.Contains(call.Error.Error(), "not a pointer") {
			t.Errorf("Go with reply %T = %v; want an error saying it is not a pointer", reply, call.Error)
		}
	}
	if n := svc.calls.Load(); n != 0 {
		t.Errorf("the handler ran %d times for calls whose reply could not be stored", n)
	}
	if err := c.Call(context.Background(), "Tally.Add", Args{1, 2}, nil); err != nil || svc.calls.Load() != 1 {
		t.Errorf("Call with a nil reply (discarded) = %v, ran %d times", err, svc.calls.Load())
	}
}

// Tally counts its calls: side effects a lost reply must not come after.
type Tally struct{ calls atomic.Int64 }

func (t *Tally) Add(args Args, reply *Reply) error {
	t.calls.Add(1)
	reply.C = args.A + args.B
	return nil
}

// One slow call must not hold up others on the same connection, and
// replies come back in the order handlers finish.
func TestNoHeadOfLineBlocking(t *testing.T) {
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 1)}
	c := dial(t, newArithServer(t, svc))
	slow := c.Go(context.Background(), "Arith.Block", Args{A: 42}, &Reply{}, nil)
	<-svc.started
	for i := range 100 {
		var r Reply
		if err := c.Call(context.Background(), "Arith.Add", Args{i, 1}, &r); err != nil || r.C != i+1 {
			t.Fatalf("Add while Block runs = %v, %v", r.C, err)
		}
	}
	select {
	case <-slow.Done:
		t.Fatal("Block finished before it was released")
	default:
	}
	close(svc.block)
	<-slow.Done
	if slow.Error != nil || slow.Reply.(*Reply).C != 42 {
		t.Fatalf("Block = %v, %v", slow.Reply, slow.Error)
	}
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func TestManyConcurrentCallsShareOneConnection(t *testing.T) {
	srv := kiev.NewServer()
	if err := srv.Register(&Arith{}); err != nil {
		t.Fatal(err)
	}
	l := &countingListener{Listener: listen(t)}
	go srv.Serve(l)
	defer srv.Close()
	c := dial(t, l.Addr().String())

	const goroutines, calls = 64, 50
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				var r Reply
				if err := c.Call(context.Background(), "Arith.Mul", &Args{g, i}, &r); err != nil {
					errs <- err
					return
				}
				if r.C != g*i {
					errs <- fmt.Errorf("Mul(%d, %d) = %d", g, i, r.C)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := l.n.Load(); n != 1 {
		t.Errorf("server accepted %d connections, want 1", n)
	}
}

func TestDeadlineCrossesTheWire(t *testing.T) {
	c := dial(t, newArithServer(t, nil))
	var left time.Duration
	if err := c.Call(context.Background(), "Arith.Deadline", Args{}, &left); err != nil || left != -1 {
		t.Fatalf("without deadline: handler saw %v, %v; want no deadline", left, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Call(ctx, "Arith.Deadline", Args{}, &left); err != nil {
		t.Fatal(err)
	}
	if left <= 2*time.Second || left > 3*time.Second {
		t.Fatalf("handler's deadline was %v away; want just under 3s", left)
	}
}

func TestDeadlineExceededCancelsHandler(t *testing.T) {
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 1)}
	handlerErr := make(chan error, 1)
	srv := kiev.NewServer(kiev.WithServerInterceptor(func(next kiev.Handler) kiev.Handler {
		return func(ctx context.Context, req *kiev.Request) error {
			err := next(ctx, req)
			if req.ServiceMethod == "Arith.Block" {
				handlerErr <- err
			}
			return err
		}
	}))
	srv.Register(svc)
	c := dial(t, startServer(t, srv))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.Call(ctx, "Arith.Block", Args{}, &Reply{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call = %v; want context.DeadlineExceeded", err)
	}
	if err := <-handlerErr; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("handler ended with %v; want its ctx to pass its deadline", err)
	}
	// The connection is still good.
	var r Reply
	if err := c.Call(context.Background(), "Arith.Add", Args{1, 2}, &r); err != nil || r.C != 3 {
		t.Fatalf("Add after timeout = %v, %v", r.C, err)
	}
}

func TestCancelReachesServer(t *testing.T) {
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 1)}
	handlerErr := make(chan error, 1)
	srv := kiev.NewServer(kiev.WithServerInterceptor(func(next kiev.Handler) kiev.Handler {
		return func(ctx context.Context, req *kiev.Request) error {
			err := next(ctx, req)
			handlerErr <- err
			return err
		}
	}))
	srv.Register(svc)
	c := dial(t, startServer(t, srv))

	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() { result <- c.Call(ctx, "Arith.Block", Args{}, &Reply{}) }()
	<-svc.started
	cancel()
	if err := <-result; !errors.Is(err, context.Canceled) {
		t.Fatalf("Call = %v; want context.Canceled", err)
	}
	if err := <-handlerErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler ended with %v; want its ctx canceled by the caller", err)
	}
}

func TestGoCompletesOnDoneChannel(t *testing.T) {
	c := dial(t, newArithServer(t, nil))
	done := make(chan *kiev.Call, 10)
	calls := make([]*kiev.Call, 10)
	for i := range calls {
		calls[i] = c.Go(context.Background(), "Arith.Add", Args{i, i}, &Reply{}, done)
	}
	seen := map[*kiev.Call]bool{}
	for range calls {
		call := <-done
		if call.Error != nil {
			t.Fatal(call.Error)
		}
		seen[call] = true
	}
	for i, call := range calls {
		if !seen[call] || call.Reply.(*Reply).C != 2*i || call.ServiceMethod != "Arith.Add" {
			t.Errorf("call %d: %+v", i, call)
		}
	}

	// A Go call whose context ends completes with the context's error.
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 1)}
	c2 := dial(t, newArithServer(t, svc))
	ctx, cancel := context.WithCancel(context.Background())
	call := c2.Go(ctx, "Arith.Block", Args{}, &Reply{}, nil)
	<-svc.started
	cancel()
	<-call.Done
	if !errors.Is(call.Error, context.Canceled) {
		t.Fatalf("Go after cancel: %v", call.Error)
	}

	defer func() {
		if recover() == nil {
			t.Error("Go with an unbuffered done channel did not panic")
		}
	}()
	c.Go(context.Background(), "Arith.Add", Args{}, &Reply{}, make(chan *kiev.Call))
}

func TestPanicBecomesErrorReply(t *testing.T) {
	c := dial(t, newArithServer(t, nil))
	err := c.Call(context.Background(), "Arith.Panic", Args{}, &Reply{})
	if !errors.Is(err, kiev.ErrInternal) || !strings.Contains(err.Error(), "panicked: boom") {
		t.Fatalf("Panic = %v; want ErrInternal mentioning the panic", err)
	}
	var r Reply
	if err := c.Call(context.Background(), "Arith.Add", Args{2, 2}, &r); err != nil || r.C != 4 {
		t.Fatalf("server did not survive the panic: %v, %v", r.C, err)
	}
}

func TestMetadata(t *testing.T) {
	c := dial(t, newArithServer(t, nil))
	ctx := kiev.WithMetadata(context.Background(), "trace-id", "abc", "user", "u1")
	ctx = kiev.WithMetadata(ctx, "user", "u2")
	for key, want := range map[string]string{"trace-id": "abc", "user": "u2", "none": ""} {
		var got string
		if err := c.Call(ctx, "Arith.Meta", key, &got); err != nil || got != want {
			t.Errorf("handler saw %s=%q, %v; want %q", key, got, err, want)
		}
	}
	var got string
	if err := c.Call(context.Background(), "Arith.Meta", "trace-id", &got); err != nil || got != "" {
		t.Errorf("metadata leaked into a plain call: %q, %v", got, err)
	}
}

func TestInterceptorsWrapBothSides(t *testing.T) {
	var order []string
	var mu sync.Mutex
	record := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	auth := func(next kiev.Handler) kiev.Handler {
		return func(ctx context.Context, req *kiev.Request) error {
			record("server-auth")
			if req.Args != nil {
				t.Error("args were decoded before the interceptor ran")
			}
			if req.Metadata.Get("token") != "secret" {
				return kiev.Errorf(401, "bad token")
			}
			err := next(ctx, req)
			record(fmt.Sprintf("server-after %v %v", req.Args, req.Reply))
			return err
		}
	}
	srv := kiev.NewServer(kiev.WithServerInterceptor(auth))
	srv.Register(&Arith{})
	addr := startServer(t, srv)
	tokenIC := func(next kiev.Invoker) kiev.Invoker {
		return func(ctx context.Context, call *kiev.Call) error {
			record("client-before " + call.ServiceMethod)
			if call.Target != addr {
				t.Errorf("call.Target = %q; want the dialed %q", call.Target, addr)
			}
			err := next(kiev.WithMetadata(ctx, "token", "secret"), call)
			record("client-after")
			return err
		}
	}
	c := dial(t, addr, kiev.WithClientInterceptor(tokenIC))
	var r Reply
	if err := c.Call(context.Background(), "Arith.Add", Args{1, 2}, &r); err != nil || r.C != 3 {
		t.Fatal(r, err)
	}
	want := []string{"client-before Arith.Add", "server-auth", "server-after &{1 2} &{3}", "client-after"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("order = %q\nwant %q", order, want)
	}
	// Go runs the interceptors too.
	call := <-c.Go(context.Background(), "Arith.Add", Args{2, 2}, &Reply{}, nil).Done
	if call.Error != nil || call.Reply.(*Reply).C != 4 {
		t.Fatal(call.Error)
	}
	// Without the token the server refuses before decoding.
	plain := dial(t, addr)
	err := plain.Call(context.Background(), "Arith.Add", Args{1, 2}, &r)
	var se *kiev.ServerError
	if !errors.As(err, &se) || se.Code != 401 || err.Error() != "bad token" {
		t.Fatalf("without token: %v", err)
	}
}

// ProtoSvc answers protobuf calls.
type ProtoSvc struct{}

func (ProtoSvc) Echo(ctx context.Context, in *testpb.Small, out *testpb.Small) error {
	out.Id = in.Id + 1
	out.Name = "re: " + in.Name
	out.Tags = append(in.Tags, 99)
	return nil
}

func TestServerSpeaksEveryCodecAtOnce(t *testing.T) {
	srv := kiev.NewServer()
	srv.Register(&Arith{})
	srv.Register(ProtoSvc{})
	addr := startServer(t, srv)
	pc := dial(t, addr, kiev.WithCodec(codec.Protobuf))
	mc := dial(t, addr)

	var out testpb.Small
	if err := pc.Call(context.Background(), "ProtoSvc.Echo", &testpb.Small{Id: 1, Name: "hi", Tags: []int64{5}}, &out); err != nil {
		t.Fatal(err)
	}
	if out.Id != 2 || out.Name != "re: hi" || fmt.Sprint(out.Tags) != "[5 99]" {
		t.Fatalf("proto Echo = %v", &out)
	}
	var r Reply
	if err := mc.Call(context.Background(), "Arith.Add", Args{3, 4}, &r); err != nil || r.C != 7 {
		t.Fatal(r, err)
	}
	// msgpack takes protobuf structs as plain Go values too.
	out.Reset()
	if err := mc.Call(context.Background(), "ProtoSvc.Echo", &testpb.Small{Id: 10}, &out); err != nil || out.Id != 11 {
		t.Fatalf("msgpack Echo = %v, %v", &out, err)
	}
	// protobuf refuses non-proto values before sending.
	err := pc.Call(context.Background(), "Arith.Add", Args{1, 2}, &r)
	if !errors.Is(err, codec.ErrNotProto) {
		t.Fatalf("proto call with a plain struct = %v; want codec.ErrNotProto", err)
	}
}

// upper is a codec the server does not know.
type upper struct{}

func (upper) Name() string                            { return "upper" }
func (upper) Marshal(b []byte, v any) ([]byte, error) { return codec.Msgpack.Marshal(b, v) }
func (upper) Unmarshal(data []byte, v any) error      { return codec.Msgpack.Unmarshal(data, v) }

func TestCustomCodec(t *testing.T) {
	c := dial(t, newArithServer(t, nil), kiev.WithCodec(upper{}))
	err := c.Call(context.Background(), "Arith.Add", Args{1, 2}, &Reply{})
	if !errors.Is(err, kiev.ErrBadRequest) || !strings.Contains(err.Error(), `unknown codec "upper"`) {
		t.Fatalf("unknown codec: %v", err)
	}
	c2 := dial(t, newArithServer(t, nil, kiev.WithCodecs(upper{})), kiev.WithCodec(upper{}))
	var r Reply
	if err := c2.Call(context.Background(), "Arith.Add", Args{1, 2}, &r); err != nil || r.C != 3 {
		t.Fatalf("registered custom codec: %v, %v", r.C, err)
	}
}

func TestArgsThatDoNotDecode(t *testing.T) {
	c := dial(t, newArithServer(t, nil))
	var r Reply
	err := c.Call(context.Background(), "Arith.Add", "not a struct", &r)
	if !errors.Is(err, kiev.ErrBadRequest) || !strings.Contains(err.Error(), "decoding args of Arith.Add") {
		t.Fatalf("bad args = %v", err)
	}
}

func TestMessageTooLarge(t *testing.T) {
	const max = 64 << 10
	c := dial(t, newArithServer(t, nil, kiev.WithMaxFrameSize(max)), kiev.WithMaxFrameSize(max))
	var b []byte
	err := c.Call(context.Background(), "Arith.Meta", strings.Repeat("x", max), &b)
	if !errors.Is(err, kiev.ErrTooLarge) {
		t.Fatalf("large request = %v; want ErrTooLarge", err)
	}
	err = c.Call(context.Background(), "Arith.Big", Args{A: max}, &b)
	if !errors.Is(err, kiev.ErrTooLarge) || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("large reply = %v; want ErrTooLarge saying too large", err)
	}
	if err := c.Call(context.Background(), "Arith.Big", Args{A: 1000}, &b); err != nil || len(b) != 1000 {
		t.Fatalf("connection broken after large messages: %v", err)
	}
}

func TestNilReplyDiscards(t *testing.T) {
	c := dial(t, newArithServer(t, nil))
	if err := c.Call(context.Background(), "Arith.Add", Args{1, 2}, nil); err != nil {
		t.Fatal(err)
	}
}

// Keeper keeps the byte slices of the args it is called with.
type Keeper struct {
	mu   sync.Mutex
	kept [][]byte
}

// KeepArgs holds a blob and a name.
type KeepArgs struct {
	Name string
	Data []byte
}

func (k *Keeper) Keep(ctx context.Context, args *KeepArgs, reply *int) error {
	k.mu.Lock()
	k.kept = append(k.kept, args.Data)
	k.mu.Unlock()
	*reply = len(args.Data)
	return nil
}

// TestLargeByteArgsAreTheHandlers checks that the byte slices of args,
// which the server decodes from pooled buffers, belong to the handler:
// kept after the call, they hold what was sent while other calls of every
// size come and go, and writing to them spoils nothing.
func TestLargeByteArgsAreTheHandlers(t *testing.T) {
	k := &Keeper{}
	srv := kiev.NewServer()
	if err := srv.Register(k); err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, srv)
	for _, cd := range []codec.Codec{codec.Msgpack, codec.JSON} {
		t.Run(cd.Name(), func(t *testing.T) {
			c := dial(t, addr, kiev.WithCodec(cd))
			k.mu.Lock()
			k.kept = nil
			k.mu.Unlock()
			var sent [][]byte
			for i := range 200 {
				size := []int{10, 4 << 10, 16 << 10, 100}[i%4]
				data := bytes.Repeat([]byte{byte(i)}, size)
				var n int
				if err := c.Call(context.Background(), "Keeper.Keep", &KeepArgs{Name: "x", Data: data}, &n); err != nil || n != size {
					t.Fatalf("call %d: %v, %d", i, err, n)
				}
				sent = append(sent, data)
			}
			k.mu.Lock()
			defer k.mu.Unlock()
			for i, b := range k.kept {
				if !bytes.Equal(b, sent[i]) {
					t.Fatalf("kept args %d changed after the call: %d bytes of %#x..., want %d of %#x", i, len(b), b[:min(len(b), 1)], len(sent[i]), i)
				}
				if len(b) > 0 {
					b[0]++           // the handler's to change
					_ = append(b, 1) // and to append to, without writing past it
				}
			}
			for i, b := range k.kept {
				if want := append([]byte{byte(i) + 1}, sent[i][1:]...); !bytes.Equal(b, want) {
					t.Fatalf("kept args %d: another's write reached them", i)
				}
			}
		})
	}
}

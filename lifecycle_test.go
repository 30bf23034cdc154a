package kiev_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/internal/wire"
)

func TestShutdownDrainsInFlightCalls(t *testing.T) {
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 1)}
	srv := kiev.NewServer()
	srv.Register(svc)
	l := listen(t)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	c := dial(t, l.Addr().String())

	inflight := c.Go(context.Background(), "Arith.Block", Args{A: 7}, &Reply{}, nil)
	<-svc.started
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	if err := <-served; !errors.Is(err, kiev.ErrServerClosed) {
		t.Fatalf("Serve = %v; want ErrServerClosed", err)
	}

	// New calls fail fast with ErrShutdown, not a timeout. The first few
	// may still reach the server before it marks the connection draining.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		err := c.Call(ctx, "Arith.Add", Args{1, 1}, &Reply{})
		if errors.Is(err, kiev.ErrShutdown) {
			break
		}
		if err != nil {
			t.Fatalf("new call during shutdown = %v; want ErrShutdown", err)
		}
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v while a call was in flight", err)
	case <-inflight.Done:
		t.Fatalf("in-flight call ended early: %v", inflight.Error)
	default:
	}
	close(svc.block)
	<-inflight.Done
	if inflight.Error != nil || inflight.Reply.(*Reply).C != 7 {
		t.Fatalf("in-flight call = %v, %v; want it to finish", inflight.Reply, inflight.Error)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	if err := srv.Serve(l); !errors.Is(err, kiev.ErrServerClosed) {
		t.Fatalf("Serve after Shutdown = %v", err)
	}
}

func TestShutdownContextExpiry(t *testing.T) {
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 1)}
	srv := kiev.NewServer()
	srv.Register(svc)
	addr := startServer(t, srv)
	c := dial(t, addr)
	call := c.Go(context.Background(), "Arith.Block", Args{}, &Reply{}, nil)
	<-svc.started
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v; want DeadlineExceeded", err)
	}
	<-call.Done
	if !errors.Is(call.Error, kiev.ErrShutdown) && !errors.Is(call.Error, context.Canceled) {
		t.Fatalf("call cut by Shutdown's deadline = %v", call.Error)
	}
}

func TestCloseFailsPendingCallsAtOnce(t *testing.T) {
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 1)}
	srv := kiev.NewServer()
	srv.Register(svc)
	addr := startServer(t, srv)
	c := dial(t, addr)
	call := c.Go(context.Background(), "Arith.Block", Args{}, &Reply{}, nil)
	<-svc.started
	srv.Close()
	<-call.Done
	if !errors.Is(call.Error, kiev.ErrShutdown) {
		t.Fatalf("pending call after server Close = %v; want ErrShutdown", call.Error)
	}
}

func TestClientCloseFailsPendingAndLaterCalls(t *testing.T) {
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 1)}
	c, err := kiev.Dial(newArithServer(t, svc))
	if err != nil {
		t.Fatal(err)
	}
	call := c.Go(context.Background(), "Arith.Block", Args{}, &Reply{}, nil)
	<-svc.started
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	<-call.Done
	if !errors.Is(call.Error, kiev.ErrShutdown) {
		t.Fatalf("pending call = %v; want ErrShutdown", call.Error)
	}
	if err := c.Call(context.Background(), "Arith.Add", Args{}, &Reply{}); !errors.Is(err, kiev.ErrShutdown) {
		t.Fatalf("call after Close = %v; want ErrShutdown", err)
	}
	if err := c.Close(); !errors.Is(err, kiev.ErrShutdown) {
		t.Fatalf("second Close = %v; want ErrShutdown", err)
	}
	close(svc.block)
}

// silentServer completes the handshake, then reads and never answers.
func silentServer(t *testing.T) string {
	return rawServer(t, func(nc net.Conn) {
		if _, err := wire.ReadPreface(nc); err != nil {
			return
		}
		nc.Write(wire.AppendPreface(nil, wire.Version))
		io.Copy(io.Discard, nc)
	})
}

func TestHeartbeatFindsDeadServer(t *testing.T) {
	c := dial(t, silentServer(t), kiev.WithHeartbeat(10*time.Millisecond, 60*time.Millisecond))
	err := c.Call(context.Background(), "Arith.Add", Args{}, &Reply{})
	if !errors.Is(err, kiev.ErrShutdown) || !strings.Contains(err.Error(), "heartbeat") {
		t.Fatalf("call to a silent server = %v; want ErrShutdown after the heartbeat timeout", err)
	}
}

func TestHeartbeatClosesSilentClient(t *testing.T) {
	addr := newArithServer(t, nil, kiev.WithHeartbeat(10*time.Millisecond, 60*time.Millisecond))
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write(wire.AppendPreface(nil, wire.Version))
	nc.SetReadDeadline(time.Now().Add(10 * time.Second)) // a safety net only
	r := wire.NewReader(nc, 4096, 1<<20)
	if _, err := wire.ReadPreface(r); err != nil {
		t.Fatal(err)
	}
	pings := 0
	for {
		f, err := r.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("server did not close a silent connection: %v", err)
			}
			break
		}
		if f.Type == wire.TypePing {
			pings++
		}
	}
	if pings == 0 {
		t.Error("server closed without pinging first")
	}
}

func TestIdleConnectionStaysUpOnHeartbeats(t *testing.T) {
	hb := kiev.WithHeartbeat(20*time.Millisecond, 200*time.Millisecond)
	c := dial(t, newArithServer(t, nil, hb), hb)
	// Stay idle for two heartbeat timeouts; the pings keep both ends alive.
	<-time.After(400 * time.Millisecond)
	var r Reply
	if err := c.Call(context.Background(), "Arith.Add", Args{1, 1}, &r); err != nil || r.C != 2 {
		t.Fatalf("call on an idle connection = %v, %v", r.C, err)
	}
}

func TestClientRedialsAfterServerRestart(t *testing.T) {
	srv := kiev.NewServer()
	srv.Register(&Arith{})
	l := listen(t)
	addr := l.Addr().String()
	go srv.Serve(l)
	c := dial(t, addr, kiev.WithBackoff(time.Millisecond, 20*time.Millisecond))
	var r Reply
	if err := c.Call(context.Background(), "Arith.Add", Args{1, 1}, &r); err != nil {
		t.Fatal(err)
	}
	srv.Close()

	// While the server is down calls fail fast with a clear error.
	for range 3 {
		err := c.Call(context.Background(), "Arith.Add", Args{1, 1}, &r)
		if !errors.Is(err, kiev.ErrUnavailable) && !errors.Is(err, kiev.ErrShutdown) {
			t.Fatalf("call while down = %v; want ErrUnavailable or ErrShutdown", err)
		}
	}

	srv2 := kiev.NewServer()
	srv2.Register(&Arith{})
	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	go srv2.Serve(l2)
	defer srv2.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := c.Call(context.Background(), "Arith.Add", Args{2, 3}, &r)
		if err == nil && r.C == 5 {
			return
		}
		if !errors.Is(err, kiev.ErrUnavailable) {
			t.Fatalf("call after restart = %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("client did not reconnect: %v", err)
		}
	}
}

func TestDialErrors(t *testing.T) {
	for _, tc := range []struct{ target, want string }{
		{"tcp://nohostport", "want host:port"},
		{"host:port:extra", "want host:port"},
		{"unix://", "no socket path"},
		{"gopher://127.0.0.1:1", "unknown scheme"},
		{"zookeeper:///Arith", "no ZooKeeper server"},
		{"zookeeper://127.0.0.1:2181", "no service name"},
		{"zookeeper://127.0.0.1:2181/Arith?sesion_timeout=1s", "unknown parameter"},
		{"zookeeper://127.0.0.1:2181/Arith?session_timeout=soon", "not a positive duration"},
	} {
		if _, err := kiev.Dial(tc.target); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Dial(%q) = %v; want error saying %q", tc.target, err, tc.want)
		}
	}
	l := listen(t)
	addr := l.Addr().String()
	l.Close()
	if _, err := kiev.Dial(addr); !errors.Is(err, kiev.ErrUnavailable) {
		t.Errorf("Dial to a closed port = %v; want ErrUnavailable", err)
	}
}

func TestListenAndServe(t *testing.T) {
	srv := kiev.NewServer()
	if err := srv.ListenAndServe("sctp", "127.0.0.1:0"); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Errorf("ListenAndServe(sctp) = %v", err)
	}
	if err := srv.ListenAndServe("tcp", "256.0.0.1:0"); err == nil {
		t.Error("ListenAndServe on a bad address succeeded")
	}
	srv.Close()
	if err := srv.ListenAndServe("tcp", "127.0.0.1:0"); !errors.Is(err, kiev.ErrServerClosed) {
		t.Errorf("ListenAndServe after Close = %v", err)
	}
	if err := srv.ListenAndServe("udp", "127.0.0.1:0"); !errors.Is(err, kiev.ErrServerClosed) {
		t.Errorf("ListenAndServe(udp) after Close = %v", err)
	}
}

// Plain is a net/rpc style service with a value receiver.
type Plain int

func (Plain) Add(args Args, reply *Reply) error { reply.C = args.A + args.B; return nil }

type noMethods struct{}

type OnlyBad struct{}

func (OnlyBad) NoReplyPtr(args Args, reply Reply) error         { return nil }
func (OnlyBad) WrongCtx(ctx int, args Args, reply *Reply) error { return nil }
func (OnlyBad) TwoResults(args Args, reply *Reply) (int, error) { return 0, nil }
func (OnlyBad) NoError(args Args, reply *Reply)                 {}
func (OnlyBad) Unexported(args args, reply *Reply) error        { return nil }
func (OnlyBad) OneArg(args Args) error                          { return nil }

type args struct{}

type PtrOnly struct{}

type Bare struct{ N int }

func (*PtrOnly) Add(args Args, reply *Reply) error { return nil }

func TestRegisterErrorsSayHowToFix(t *testing.T) {
	srv := kiev.NewServer()
	for _, tc := range []struct {
		name string
		svc  any
		want []string
	}{
		{"nil", nil, []string{"service is nil"}},
		{"a number", 42, []string{"42 (int) is not a service", "Register(new(Arith))"}},
		{"a slice", []int{1}, []string{"[1] ([]int) is not a service"}},
		{"no methods at all", &Bare{}, []string{"type *kiev_test.Bare has no methods"}},
		{"unexported type", &noMethods{}, []string{"not exported"}},
		{"no good methods", OnlyBad{}, []string{
			"NoReplyPtr: reply type kiev_test.Reply is not a pointer",
			"WrongCtx: first argument is int; it must be context.Context",
			"TwoResults: must return exactly one value",
			"NoError: must return exactly one value",
			"Unexported: argument type kiev_test.args is not exported",
			"OneArg: takes 1 arguments",
			"func (t *T) Method(ctx context.Context, args A, reply *R) error",
		}},
		{"value of pointer-method type", PtrOnly{}, []string{"pass a pointer"}},
	} {
		err := srv.Register(tc.svc)
		if err == nil {
			t.Errorf("%s: Register succeeded", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q\ndoes not say %q", tc.name, err, w)
			}
		}
	}
	if err := srv.RegisterName("Num", 42); err == nil || !strings.Contains(err.Error(), "is not a service") {
		t.Errorf(`RegisterName("Num", 42) = %v; want "is not a service"`, err)
	}
	if err := srv.Register(Plain(0)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Register(Plain(0)); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("duplicate Register = %v", err)
	}
	if err := srv.RegisterName("Calc", Plain(0)); err != nil {
		t.Errorf("RegisterName = %v", err)
	}
	// Dotted names are net/rpc's ("net.rpc.Arith"); kiev's own are reserved.
	if err := srv.RegisterName("team.Calc", Plain(0)); err != nil {
		t.Errorf("RegisterName with a dot = %v", err)
	}
	for name, want := range map[string]string{
		"kiev.Mine": "reserved",
		".Calc":     "empty part",
		"team..C":   "empty part",
		"Calc.":     "empty part",
		"my Calc":   "space",
		"a/b":       "slash",
	} {
		if err := srv.RegisterName(name, Plain(0)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("RegisterName(%q) = %v, want an error saying %q", name, err, want)
		}
	}
	addr := startServer(t, srv)
	c := dial(t, addr)
	var r Reply
	if err := c.Call(context.Background(), "Calc.Add", Args{2, 2}, &r); err != nil || r.C != 4 {
		t.Fatalf("Calc.Add = %v, %v", r.C, err)
	}
	r = Reply{}
	if err := c.Call(context.Background(), "team.Calc.Add", Args{2, 3}, &r); err != nil || r.C != 5 {
		t.Fatalf("team.Calc.Add = %v, %v", r.C, err)
	}
}

var registerDefault = sync.OnceValue(func() error { return kiev.RegisterName("DefaultArith", &Arith{}) })

func TestDefaultServer(t *testing.T) {
	if err := registerDefault(); err != nil {
		t.Fatal(err)
	}
	l := listen(t)
	served := make(chan error, 1)
	go func() { served <- kiev.Serve(l) }()
	c := dial(t, l.Addr().String())
	var r Reply
	if err := c.Call(context.Background(), "DefaultArith.Add", Args{20, 22}, &r); err != nil || r.C != 42 {
		t.Fatalf("DefaultArith.Add = %v, %v", r.C, err)
	}
	c.Close()
	l.Close()
	if err := <-served; err == nil {
		t.Error("Serve returned nil after its listener closed")
	}
}

func TestNoGoroutinesLeftBehind(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := kiev.NewServer()
	srv.Register(&Arith{})
	l := listen(t)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	for range 3 {
		c, err := kiev.Dial(l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		for range 10 {
			c.Go(context.Background(), "Arith.Add", Args{1, 1}, &Reply{}, nil)
		}
		if err := c.Call(context.Background(), "Arith.Add", Args{1, 1}, &Reply{}); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	c, err := kiev.Dial(l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-served
	c.Close()
}

func TestOnShutdownRunsAfterCallsDrain(t *testing.T) {
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 1)}
	var order []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	srv := kiev.NewServer(kiev.WithServerInterceptor(func(next kiev.Handler) kiev.Handler {
		return func(ctx context.Context, req *kiev.Request) error {
			err := next(ctx, req)
			note("handler done")
			return err
		}
	}))
	srv.Register(svc)
	addr := startServer(t, srv)
	c := dial(t, addr)
	srv.OnShutdown(func(ctx context.Context) error { note("close db"); return nil })
	srv.OnShutdown(func(ctx context.Context) error { note("close cache"); return errors.New("cache: already closed") })
	done := make(chan error, 1)
	go func() {
		done <- c.Call(context.Background(), "Arith.Block", Args{A: 1}, &Reply{})
	}()
	<-svc.started
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	close(svc.block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	err := <-shut
	if err == nil || !strings.Contains(err.Error(), "cache: already closed") {
		t.Fatalf("Shutdown = %v; want the failing hook's error", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(order, ",") != "handler done,close db,close cache" {
		t.Fatalf("order: %v; want the handler to end before the hooks, which run in order", order)
	}
}

func TestHealthChecks(t *testing.T) {
	srv := kiev.NewServer()
	srv.RegisterHealth("redis", func(ctx context.Context) error { return nil })
	srv.RegisterHealth("mysql", func(ctx context.Context) error { return errors.New("mysql: connection refused") })
	srv.RegisterHealth("broken", func(ctx context.Context) error { panic("oops") })
	res := srv.Health(context.Background())
	if len(res) != 3 || res[0].Name != "broken" || res[1].Name != "mysql" || res[2].Name != "redis" {
		t.Fatalf("Health = %+v", res)
	}
	if res[0].Err == nil || res[1].Err == nil || res[2].Err != nil {
		t.Fatalf("Health = %+v; want broken and mysql failing, redis healthy", res)
	}
}

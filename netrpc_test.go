package kiev_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/rpc"
	"net/rpc/jsonrpc"
	"strings"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
)

// TestDialHostWithoutPort dials hosts written without their port. With no
// registry they were taken for service names, and a call with a
// background context waited forever for a provider.
func TestDialHostWithoutPort(t *testing.T) {
	for target, write := range map[string]string{
		"localhost": "localhost:PORT", "127.0.0.1": "127.0.0.1:PORT", "::1": "[::1]:PORT", "[::1]": "[::1]:PORT",
		"db.example.com": "db.example.com:PORT", "cache.internal": "cache.internal:PORT",
	} {
		c, err := kiev.Dial(target)
		if err == nil {
			c.Close()
			t.Errorf("Dial(%q) succeeded; want an error that says to write host:PORT", target)
			continue
		}
		if want := `write "` + write + `"`; !strings.Contains(err.Error(), want) {
			t.Errorf("Dial(%q): %v; want it to say %s", target, err, want)
		}
	}
	// Service names are still service names.
	for _, target := range []string{"Greeter", "net.rpc.Arith", "team.Calc"} {
		c, err := kiev.Dial(target)
		if err != nil {
			t.Errorf("Dial(%q): %v; want a client of the service", target, err)
			continue
		}
		c.Close()
	}
}

// TestDialReadsTheTargetAloneNotOtherServers: what Dial makes of a bare
// name does not depend on what other servers of the process registered.
// A name that reads as a host is refused even while a server registers a
// service of that name; WithRegistry(kiev.DefaultRegistry()) dials it.
func TestDialReadsTheTargetAloneNotOtherServers(t *testing.T) {
	srv := kiev.NewServer()
	if err := srv.RegisterName("cache.internal", &Arith{}); err != nil {
		t.Fatal(err)
	}
	startServer(t, srv)
	if c, err := kiev.Dial("cache.internal"); err == nil {
		c.Close()
		t.Error("Dial(cache.internal) succeeded because a server of the process registered it; want the host-like refusal, the same in any process")
	} else if !strings.Contains(err.Error(), "WithRegistry(kiev.DefaultRegistry())") {
		t.Errorf("Dial(cache.internal): %v; want it to say how to dial such a service", err)
	}
	c := dial(t, "cache.internal", kiev.WithRegistry(kiev.DefaultRegistry()))
	var r Reply
	if err := c.Call(context.Background(), "cache.internal.Add", Args{2, 3}, &r); err != nil || r.C != 5 {
		t.Errorf("Call through WithRegistry(kiev.DefaultRegistry()) = %v, %v; want 5", r.C, err)
	}
}

// TestProviderWaitIsBounded calls a service that nothing registers, with a
// context that never ends. The call waited forever; now it fails after
// the provider wait with an error that names the bound and the registry.
func TestProviderWaitIsBounded(t *testing.T) {
	c := dial(t, "Nobody", kiev.WithProviderWait(50*time.Millisecond))
	err := c.Call(context.Background(), "Nobody.Hello", "x", new(string))
	if !errors.Is(err, kiev.ErrUnavailable) {
		t.Fatalf("Call: %v; want ErrUnavailable", err)
	}
	for _, want := range []string{"no provider of service Nobody registered within 50ms (WithProviderWait)", "in-memory default registry", `Dial "host:port"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Call: %v; want it to say %q", err, want)
		}
	}

	// WithProviderWait(0) fails at once.
	c0 := dial(t, "Nobody", kiev.WithProviderWait(0))
	if err := c0.Call(context.Background(), "Nobody.Hello", "x", new(string)); !errors.Is(err, kiev.ErrUnavailable) {
		t.Errorf("Call with WithProviderWait(0): %v; want ErrUnavailable", err)
	}

	// Within the bound, servers and clients still start in any order.
	late := dial(t, "Late")
	done := make(chan error, 1)
	go func() {
		var r Reply
		err := late.Call(context.Background(), "Late.Add", Args{2, 3}, &r)
		if err == nil && r.C != 5 {
			err = errors.New("wrong sum")
		}
		done <- err
	}()
	srv := kiev.NewServer()
	if err := srv.RegisterName("Late", &Arith{}); err != nil {
		t.Fatal(err)
	}
	startServer(t, srv)
	if err := <-done; err != nil {
		t.Errorf("a call made before its server started: %v", err)
	}
}

// Gate is a service whose calls wait until the test opens it.
type Gate struct {
	started chan struct{}
	open    chan struct{}
}

func (g *Gate) Pass(ctx context.Context, n int, reply *int) error {
	g.started <- struct{}{}
	select {
	case <-g.open:
		*reply = n
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestHalfCloseRepliesInFlight half-closes a client's connection while
// calls are in flight. The server dropped their replies; now it finishes
// them, sends the replies, and then closes the connection.
func TestHalfCloseRepliesInFlight(t *testing.T) {
	g := &Gate{started: make(chan struct{}, 3), open: make(chan struct{})}
	srv := kiev.NewServer()
	if err := srv.Register(g); err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, srv)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := kiev.NewClient(nc)
	defer c.Close()
	done := make(chan *kiev.Call, 3)
	for i := range 3 {
		c.Go(context.Background(), "Gate.Pass", i, new(int), done)
	}
	for range 3 {
		<-g.started
	}
	if err := nc.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	close(g.open)
	for range 3 {
		call := <-done
		if call.Error != nil {
			t.Errorf("call %v after the half-close: %v", call.Args, call.Error)
		} else if *call.Reply.(*int) != call.Args.(int) {
			t.Errorf("call %v replied %v", call.Args, *call.Reply.(*int))
		}
	}
	// Then the server closes: a new call fails, and says the connection
	// is gone.
	err = c.Call(context.Background(), "Gate.Pass", 9, new(int))
	if !errors.Is(err, kiev.ErrShutdown) {
		t.Errorf("a call after the server closed: %v; want ErrShutdown", err)
	}
}

// Legacy is a net/rpc service, served by net/rpc itself.
type Legacy struct{}

func (Legacy) Add(args Args, reply *Reply) error {
	reply.C = args.A + args.B
	return nil
}

func (Legacy) Div(args Args, reply *Reply) error {
	if args.B == 0 {
		return errors.New("divide by zero")
	}
	reply.C = args.A / args.B
	return nil
}

// TestServeCodecJSONRPC serves kiev services to net/rpc's JSON-RPC client
// through ServeCodec, many calls at once.
func TestServeCodecJSONRPC(t *testing.T) {
	srv := kiev.NewServer()
	if err := srv.Register(&Arith{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cs, ss := net.Pipe()
	served := make(chan struct{})
	go func() {
		srv.ServeCodec(jsonrpc.NewServerCodec(ss))
		close(served)
	}()
	client := jsonrpc.NewClient(cs)
	calls := make([]*rpc.Call, 50)
	for i := range calls {
		calls[i] = client.Go("Arith.Add", Args{i, 1}, new(Reply), nil)
	}
	for i, call := range calls {
		<-call.Done
		if call.Error != nil || call.Reply.(*Reply).C != i+1 {
			t.Errorf("call %d: %v, %+v; want %d", i, call.Error, call.Reply, i+1)
		}
	}
	err := client.Call("Arith.Div", Args{1, 0}, new(Reply))
	if err == nil || err.Error() != "divide by zero" {
		t.Errorf("Arith.Div by zero: %v; want the handler's error, divide by zero", err)
	}
	err = client.Call("Arith.Nope", Args{}, new(Reply))
	if err == nil || !strings.Contains(err.Error(), `service "Arith" has no method "Nope"`) {
		t.Errorf("Arith.Nope: %v; want an error that says there is no such method", err)
	}
	client.Close()
	<-served // ServeCodec returns when the client hangs up
}

// TestNewClientWithCodecJSONRPC calls a net/rpc server that speaks
// JSON-RPC, through a kiev client.
func TestNewClientWithCodecJSONRPC(t *testing.T) {
	legacy := rpc.NewServer()
	if err := legacy.RegisterName("Arith", Legacy{}); err != nil {
		t.Fatal(err)
	}
	cs, ss := net.Pipe()
	go legacy.ServeCodec(jsonrpc.NewServerCodec(ss))
	c := kiev.NewClientWithCodec(jsonrpc.NewClientCodec(cs))
	var r Reply
	if err := c.Call(context.Background(), "Arith.Add", Args{7, 8}, &r); err != nil || r.C != 15 {
		t.Errorf("Arith.Add: %v, %d; want 15", err, r.C)
	}
	err := c.Call(context.Background(), "Arith.Div", Args{1, 0}, &r)
	if err == nil || err.Error() != "divide by zero" {
		t.Errorf("Arith.Div by zero: %v; want the server's error, divide by zero", err)
	}
	// A call's context ends its wait.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Call(ctx, "Arith.Add", Args{1, 1}, &r); !errors.Is(err, context.Canceled) {
		t.Errorf("a call with a canceled context: %v; want context.Canceled", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := c.Call(context.Background(), "Arith.Add", Args{1, 1}, &r); err != kiev.ErrShutdown {
		t.Errorf("a call after Close: %v; want ErrShutdown itself", err)
	}
}

// TestServerSaysWhereItServes reads the one line a server logs when it
// starts serving. It logged nothing.
func TestServerSaysWhereItServes(t *testing.T) {
	h := &records{}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(h)), kiev.WithAdmin("127.0.0.1:0"))
	if err := srv.Register(&Arith{}); err != nil {
		t.Fatal(err)
	}
	if err := srv.RegisterName("team.Calc", &Arith{}); err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, srv)
	dial(t, addr) // a first call has come in: Serve has logged
	if err := dial(t, addr).Call(context.Background(), "Arith.Add", Args{1, 2}, new(Reply)); err != nil {
		t.Fatal(err)
	}
	attrs, level, ok := h.find("kiev: serving")
	if !ok {
		t.Fatal(`no "kiev: serving" line`)
	}
	if level != slog.LevelInfo || attrs["network"] != "tcp" || attrs["addr"] != addr ||
		attrs["services"] != "Arith,team.Calc" || attrs["admin"] != "http://"+srv.AdminAddr()+"/" {
		t.Errorf("serving line at %v: %v; want INFO with tcp, %s, Arith,team.Calc and the admin URL", level, attrs, addr)
	}
}

// TestClosedClientErrShutdown checks that the errors of a closed client
// are ErrShutdown itself, as in net/rpc, where err == rpc.ErrShutdown is
// the idiom: calls in flight at Close, calls after it, and Go's.
func TestClosedClientErrShutdown(t *testing.T) {
	a := &Arith{block: make(chan struct{}), started: make(chan struct{}, 1)}
	c, err := kiev.Dial(newArithServer(t, a))
	if err != nil {
		t.Fatal(err)
	}
	inFlight := make(chan error, 1)
	go func() { inFlight <- c.Call(context.Background(), "Arith.Block", Args{}, new(Reply)) }()
	<-a.started
	c.Close()
	if err := <-inFlight; err != kiev.ErrShutdown {
		t.Errorf("a call in flight at Close: %v; want ErrShutdown itself", err)
	}
	if err := c.Call(context.Background(), "Arith.Add", Args{}, new(Reply)); err != kiev.ErrShutdown {
		t.Errorf("a call after Close: %v; want ErrShutdown itself", err)
	}
	call := <-c.Go(context.Background(), "Arith.Add", Args{}, new(Reply), nil).Done
	if call.Error != kiev.ErrShutdown {
		t.Errorf("Go after Close: %v; want ErrShutdown itself", call.Error)
	}
	if err := c.Close(); err != kiev.ErrShutdown {
		t.Errorf("a second Close: %v; want ErrShutdown", err)
	}
}

var _ io.Closer = (*kiev.Client)(nil)

package kiev_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/balance"
	"github.com/kievrpc/kiev/health"
	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/registry/memory"
	"github.com/kievrpc/kiev/shed"
)

// Greeter is an example service.
type Greeter struct{}

// GreetArgs is the argument of Greeter.Hello.
type GreetArgs struct {
	Name string
}

// Hello greets by name, with the caller's trace id if it sent one.
func (Greeter) Hello(ctx context.Context, args GreetArgs, reply *string) error {
	if args.Name == "" {
		return errors.New("name is empty")
	}
	*reply = "hello, " + args.Name
	if id := kiev.MetadataFrom(ctx).Get("trace-id"); id != "" {
		*reply += " (trace " + id + ")"
	}
	return nil
}

func Example() {
	srv := kiev.NewServer()
	if err := srv.Register(Greeter{}); err != nil {
		log.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Shutdown(context.Background())

	c, err := kiev.Dial(l.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var reply string
	if err := c.Call(ctx, "Greeter.Hello", GreetArgs{Name: "kiev"}, &reply); err != nil {
		log.Fatal(err)
	}
	fmt.Println(reply)

	err = c.Call(ctx, "Greeter.Hello", GreetArgs{}, &reply)
	fmt.Println("error:", err)

	err = c.Call(ctx, "Greeter.Bye", GreetArgs{}, &reply)
	fmt.Println("not found:", errors.Is(err, kiev.ErrNotFound))
	// Output:
	// hello, kiev
	// error: name is empty
	// not found: true
}

// serveExample serves svc on srv over loopback and returns a client of
// it, and a function that stops both. Example shows the same steps in
// full.
func serveExample(srv *kiev.Server, svc any) (*kiev.Client, func()) {
	if err := srv.Register(svc); err != nil {
		log.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(l)
	c, err := kiev.Dial(l.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	return c, func() {
		c.Close()
		srv.Close()
	}
}

func ExampleWithMetadata() {
	c, stop := serveExample(kiev.NewServer(), Greeter{})
	defer stop()

	ctx := kiev.WithMetadata(context.Background(), "trace-id", "4bf92f35")
	var reply string
	if err := c.Call(ctx, "Greeter.Hello", GreetArgs{Name: "ops"}, &reply); err != nil {
		log.Fatal(err)
	}
	fmt.Println(reply)
	// Output: hello, ops (trace 4bf92f35)
}

func ExampleClient_Go() {
	c, stop := serveExample(kiev.NewServer(), Greeter{})
	defer stop()

	done := make(chan *kiev.Call, 3)
	for _, name := range []string{"a", "b", "c"} {
		c.Go(context.Background(), "Greeter.Hello", GreetArgs{Name: name}, new(string), done)
	}
	got := map[string]bool{}
	for range 3 {
		call := <-done // replies arrive in any order
		got[*call.Reply.(*string)] = call.Error == nil
	}
	fmt.Println(got)
	// Output: map[hello, a:true hello, b:true hello, c:true]
}

func ExampleServerInterceptor() {
	// auth refuses calls without the right token, before their arguments
	// are decoded.
	auth := func(next kiev.Handler) kiev.Handler {
		return func(ctx context.Context, req *kiev.Request) error {
			if req.Metadata.Get("token") != "s3cret" {
				return kiev.Errorf(401, "unauthenticated: send a token")
			}
			return next(ctx, req)
		}
	}
	c, stop := serveExample(kiev.NewServer(kiev.WithServerInterceptor(auth)), Greeter{})
	defer stop()

	var reply string
	err := c.Call(context.Background(), "Greeter.Hello", GreetArgs{Name: "x"}, &reply)
	var se *kiev.ServerError
	if errors.As(err, &se) {
		fmt.Println(se.Code, se.Message)
	}
	ctx := kiev.WithMetadata(context.Background(), "token", "s3cret")
	err = c.Call(ctx, "Greeter.Hello", GreetArgs{Name: "x"}, &reply)
	fmt.Println(reply, err)
	// Output:
	// 401 unauthenticated: send a token
	// hello, x <nil>
}

// Push is an example service that reports the priority of its calls.
type Push struct{}

func (Push) Send(ctx context.Context, to string, reply *string) error {
	*reply = fmt.Sprintf("sent to %s at %v", to, kiev.PriorityFrom(ctx))
	return nil
}

func ExampleWithPriority() {
	// At most 64 calls run at once; up to 512 wait, the least important
	// shed first when more arrive.
	srv := kiev.NewServer(kiev.WithShed(shed.Options{Workers: 64, QueueSize: 512, MaxWait: 100 * time.Millisecond}))
	c, stop := serveExample(srv, Push{})
	defer stop()

	var reply string
	c.Call(context.Background(), "Push.Send", "ann", &reply)
	fmt.Println(reply)
	ctx := kiev.WithPriority(context.Background(), kiev.MaxPriority)
	err := c.Call(ctx, "Push.Send", "bob", &reply)
	if errors.Is(err, kiev.ErrOverloaded) {
		fmt.Println("shed; try another server")
	}
	fmt.Println(reply)
	// Output:
	// sent to ann at priority 5
	// sent to bob at priority 9
}

// Shard answers with the name of the server that ran the call.
type Shard struct{ name string }

func (s Shard) Owner(ctx context.Context, key string, reply *string) error {
	*reply = s.name
	return nil
}

// Servers register in a registry and clients dial the service by name;
// calls are balanced over every provider. Here the registry is in memory,
// and three servers run in one process.
func ExampleDial_service() {
	reg := memory.New()
	for _, name := range []string{"east", "north", "west"} {
		srv := kiev.NewServer(kiev.WithRegistry(reg))
		srv.RegisterName("Shard", Shard{name})
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		go srv.Serve(l)
		defer srv.Close()
	}

	// Wait until all three are registered; without this, calls would
	// wait for the first provider, and balance over those that came.
	w, err := reg.Watch(context.Background(), "Shard")
	if err != nil {
		log.Fatal(err)
	}
	for set := []registry.Instance(nil); len(set) < 3; {
		set, _ = w.Next(context.Background())
	}
	w.Stop()

	// Consistent hashing sends each key to the same server while it is
	// there.
	c, err := kiev.Dial("Shard", kiev.WithRegistry(reg), kiev.WithBalancer(balance.ConsistentHash()))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	owners := map[string]string{}
	for _, key := range []string{"alice", "bob", "alice", "bob"} {
		var owner string
		if err := c.Call(kiev.WithHashKey(ctx, key), "Shard.Owner", key, &owner); err != nil {
			log.Fatal(err)
		}
		if prev, ok := owners[key]; ok {
			fmt.Println(key, "on the same server again:", prev == owner)
		}
		owners[key] = owner
	}
	fmt.Println("providers:", len(c.Providers()))
	// Output:
	// alice on the same server again: true
	// bob on the same server again: true
	// providers: 3
}

// A server's health, as a load balancer or a probe asks for it: serving,
// until a dependency's check fails or the server says otherwise.
func ExampleServer_SetHealth() {
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)))
	srv.Register(new(Arith))
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(l)
	defer srv.Close()
	c, _ := kiev.Dial(l.Addr().String())
	defer c.Close()

	check := func() health.ServingStatus {
		var r health.CheckResponse
		ctx := kiev.WithPriority(context.Background(), kiev.MaxPriority)
		if err := c.Call(ctx, health.ServiceName+".Check", health.CheckRequest{}, &r); err != nil {
			log.Fatal(err)
		}
		return r.Status
	}
	fmt.Println(check())
	srv.SetHealth("", health.NotServing) // warming up, say
	fmt.Println(check())
	srv.SetHealth("", health.ServingUnknown) // the checks decide again
	fmt.Println(check())
	// Output:
	// SERVING
	// NOT_SERVING
	// SERVING
}

package kiev_test

import (
	"context"
	"fmt"
	"log"

	"github.com/kievrpc/kiev"
)

func ExampleMethodOf() {
	c, stop := serveExample(kiev.NewServer(), Greeter{})
	defer stop()

	// The compiler checks hello's types against Greeter.Hello's: it takes
	// a GreetArgs and returns a string, so hello.Call(ctx, "kiev") does not
	// compile. The name, "Greeter.Hello", comes from the method.
	hello, err := kiev.MethodOf(c, Greeter.Hello)
	if err != nil {
		log.Fatal(err)
	}
	reply, err := hello.Call(context.Background(), GreetArgs{Name: "kiev"})
	fmt.Println(hello, reply, err)
	// Output: Greeter.Hello hello, kiev <nil>
}

// GreeterAPI is what a package shared by Greeter's servers and clients
// would declare; Greeter implements it.
type GreeterAPI interface {
	Hello(ctx context.Context, args GreetArgs, reply *string) error
}

// A client that knows the service only by an interface it implements
// calls it through the interface's method expressions, naming the
// service.
func ExampleMethodOf_interface() {
	c, stop := serveExample(kiev.NewServer(), Greeter{})
	defer stop()

	hello, err := kiev.MethodOf(c, GreeterAPI.Hello, kiev.WithServiceName("Greeter"))
	if err != nil {
		log.Fatal(err)
	}
	reply, err := hello.Call(context.Background(), GreetArgs{Name: "api"})
	fmt.Println(reply, err)
	// Output: hello, api <nil>
}

func ExampleNewMethod() {
	c, stop := serveExample(kiev.NewServer(), Greeter{})
	defer stop()
	ctx := context.Background()

	// The client's own copy of the server's argument type: NewMethod asks
	// the server for Greeter.Hello's types and checks that these fit them.
	type Greeting struct{ Name string }
	hello, err := kiev.NewMethod[Greeting, string](ctx, c, "Greeter.Hello")
	if err != nil {
		log.Fatal(err)
	}
	reply, err := hello.Call(ctx, Greeting{Name: "ops"})
	fmt.Println(reply, err)

	// Types that do not fit are refused before any call is made.
	_, err = kiev.NewMethod[Greeting, int](ctx, c, "Greeter.Hello")
	fmt.Println(err)
	// Output:
	// hello, ops <nil>
	// kiev: NewMethod[kiev_test.Greeting, int]("Greeter.Hello"): the server's method takes kiev_test.GreetArgs and replies string: the reply is string there and int here
}

func ExampleMethod_Go() {
	c, stop := serveExample(kiev.NewServer(), Greeter{})
	defer stop()

	hello, err := kiev.MethodOf(c, Greeter.Hello)
	if err != nil {
		log.Fatal(err)
	}
	names := []string{"a", "b", "c"}
	replies := make([]string, len(names))
	done := make(chan *kiev.Call, len(names))
	for i, name := range names {
		hello.Go(context.Background(), GreetArgs{Name: name}, &replies[i], done)
	}
	for range names {
		if call := <-done; call.Error != nil { // replies arrive in any order
			log.Fatal(call.Error)
		}
	}
	fmt.Println(replies)
	// Output: [hello, a hello, b hello, c]
}

// Command quickstart runs a kiev server and a client in one process, with
// no outside servers, and prints what they do: a call, a handler error,
// many concurrent calls over one connection, a deadline that reaches the
// handler, and a graceful shutdown.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"sync"
	"time"

	"github.com/kievrpc/kiev"
)

// Arith is a service; its methods are found by reflection.
type Arith struct{}

// Args are the operands.
type Args struct {
	A, B int
}

// Mul multiplies, in kiev's context-aware shape.
func (Arith) Mul(ctx context.Context, args Args, reply *int) error {
	*reply = args.A * args.B
	return nil
}

// Div divides, in net/rpc's shape.
func (Arith) Div(args Args, reply *int) error {
	if args.B == 0 {
		return errors.New("divide by zero")
	}
	*reply = args.A / args.B
	return nil
}

// Slow waits for its deadline, to show that deadlines cross the wire.
func (Arith) Slow(ctx context.Context, args Args, reply *int) error {
	<-ctx.Done()
	return ctx.Err()
}

func main() {
	log.SetFlags(0)
	srv := kiev.NewServer()
	if err := srv.Register(Arith{}); err != nil {
		log.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	fmt.Println("server: serving Arith on", l.Addr())

	c, err := kiev.Dial(l.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	var product int
	if err := c.Call(ctx, "Arith.Mul", Args{7, 8}, &product); err != nil {
		log.Fatal(err)
	}
	fmt.Println("client: Arith.Mul(7, 8) =", product)

	var quotient int
	err = c.Call(ctx, "Arith.Div", Args{1, 0}, &quotient)
	fmt.Printf("client: Arith.Div(1, 0) failed as expected: %v\n", err)

	const calls = 10000
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for g := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls / 100 {
				var r int
				if err := c.Call(ctx, "Arith.Mul", Args{g, i}, &r); err != nil || r != g*i {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	fmt.Printf("client: %d concurrent calls over one connection in %v (%.0f calls/s), %d wrong\n",
		calls, elapsed.Round(time.Millisecond), calls/elapsed.Seconds(), failed)

	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = c.Call(dctx, "Arith.Slow", Args{}, &product)
	fmt.Printf("client: Arith.Slow with a 100ms deadline: deadline exceeded = %v\n", errors.Is(err, context.DeadlineExceeded))

	if err := srv.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("server: shut down gracefully; Serve returned:", <-served)
	err = c.Call(ctx, "Arith.Mul", Args{1, 1}, &product)
	fmt.Printf("client: call after shutdown fails fast: %v\n", err)
}

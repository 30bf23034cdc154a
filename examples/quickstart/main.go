// Command quickstart runs a kiev server and a client in one process, with
// no outside servers, and prints what they do: a call, a handler error,
// many concurrent calls over one connection, a deadline that reaches the
// handler, overload shedding, servers found by name and balanced, and a
// graceful shutdown.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/shed"
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

// Work holds its worker for 2ms, like a call that does real work.
func (Arith) Work(ctx context.Context, args Args, reply *int) error {
	time.Sleep(2 * time.Millisecond)
	*reply = args.A
	return nil
}

// overload floods a server that can do 4 calls at a time with 400 calls
// at once, 1 in 25 of them at priority 9, and shows that every call gets
// a fast answer and the important ones get through.
func overload(ctx context.Context, logger *slog.Logger) {
	srv := kiev.NewServer(kiev.WithShed(shed.Options{Workers: 4, QueueSize: 16}), kiev.WithLogger(logger))
	if err := srv.Register(Arith{}); err != nil {
		log.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()
	c, err := kiev.Dial(l.Addr().String(), kiev.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	type result struct {
		important, ok, shed bool
		took                time.Duration
	}
	results := make(chan result, 400)
	for i := range 400 {
		go func() {
			p := kiev.Priority(i % 9) // 0..8
			if i%25 == 0 {
				p = kiev.MaxPriority
			}
			start := time.Now()
			var r int
			err := c.Call(kiev.WithPriority(ctx, p), "Arith.Work", Args{A: i}, &r)
			results <- result{p == kiev.MaxPriority, err == nil, errors.Is(err, kiev.ErrOverloaded), time.Since(start)}
		}()
	}
	var ok, shedN, vipOK, vip int
	var slowestShed time.Duration
	for range 400 {
		r := <-results
		switch {
		case r.ok:
			ok++
		case r.shed:
			shedN++
			slowestShed = max(slowestShed, r.took)
		}
		if r.important {
			vip++
			if r.ok {
				vipOK++
			}
		}
	}
	st := srv.Scheduler().Stats()
	fmt.Printf("overload: 400 calls at once on 4 workers: %d served, %d shed with ErrOverloaded (slowest answer %v); priority 9: %d of %d served\n",
		ok, shedN, slowestShed.Round(time.Millisecond), vipOK, vip)
	fmt.Printf("overload: the server's scheduler refused %d, evicted %d, expired %d; the client refused the rest itself (adaptive throttling) and retried a few (retry budget)\n",
		st.DroppedFor(shed.Refused), st.DroppedFor(shed.Evicted), st.DroppedFor(shed.Expired))
}

// Slow waits for its deadline, to show that deadlines cross the wire.
func (Arith) Slow(ctx context.Context, args Args, reply *int) error {
	<-ctx.Done()
	return ctx.Err()
}

func main() {
	log.SetFlags(0)
	// kiev logs what a server's operator needs (serving, providers
	// changed, connections lost); here that goes to a file, summarised
	// at the end, so the story below reads on its own.
	dl, err := newDemoLog()
	if err != nil {
		log.Fatal(err)
	}
	logger := slog.New(dl)
	srv := kiev.NewServer(kiev.WithLogger(logger))
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

	c, err := kiev.Dial(l.Addr().String(), kiev.WithLogger(logger))
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

	overload(ctx, logger)
	discovery(ctx, logger)
	overUDP(ctx, logger)

	if err := srv.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("server: shut down gracefully; Serve returned:", <-served)
	err = c.Call(ctx, "Arith.Mul", Args{1, 1}, &product)
	fmt.Printf("client: call after shutdown fails fast: %v\n", err)
	fmt.Println(dl.summary())
}

// overUDP serves Arith over UDP too and calls it, one datagram each way.
func overUDP(ctx context.Context, logger *slog.Logger) {
	srv := kiev.NewServer(kiev.WithLogger(logger))
	if err := srv.Register(Arith{}); err != nil {
		log.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.ServePacket(pc)
	defer srv.Close()
	c, err := kiev.Dial("udp://"+pc.LocalAddr().String(), kiev.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	var product int
	if err := c.Call(ctx, "Arith.Mul", Args{6, 7}, &product); err != nil {
		log.Fatal(err)
	}
	big := make([]byte, 2000)
	err = c.Call(ctx, "Arith.Mul", big, &product)
	st := c.PacketStats()
	fmt.Printf("udp: Arith.Mul(6, 7) = %d in one datagram each way (%d sent, %d received); a 2000-byte request: %v\n",
		product, st.Sent, st.Received, err)
}

package kiev_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/registry/memory"
)

// Dial of a host name and port resolves the name in DNS, and calls every
// address it resolves to; here "localhost", from the system's resolver.
// "dns:///feed.prod.svc.cluster.local:7000" is the same, and
// "dns://10.0.0.10:53/..." asks that DNS server.
func ExampleDial_dns() {
	srv := kiev.NewServer()
	if err := srv.Register(Greeter{}); err != nil {
		log.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())

	c, err := kiev.Dial("localhost:" + port)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var reply string
	if err := c.Call(ctx, "Greeter.Hello", GreetArgs{Name: "DNS"}, &reply); err != nil {
		log.Fatal(err)
	}
	fmt.Println(reply)
	d, _ := c.Discovery()
	fmt.Println("resolved:", d.Resolved)
	// Output:
	// hello, DNS
	// resolved: true
}

// Catalog is a service whose first call stalls, as a provider's GC pause
// would stall it.
type Catalog struct {
	name  string
	stall *atomic.Bool
}

func (s Catalog) Get(ctx context.Context, id int, reply *string) error {
	if s.stall.CompareAndSwap(true, false) {
		<-ctx.Done() // canceled once the hedge has answered
		return ctx.Err()
	}
	*reply = fmt.Sprint("item ", id)
	return nil
}

// A hedged call: after 20ms without an answer, a copy goes to another
// provider, and the first answer wins. Only methods marked safe to repeat
// are hedged.
func ExampleWithHedging() {
	reg := memory.New()
	stall := new(atomic.Bool)
	stall.Store(true)
	for _, name := range []string{"a", "b"} {
		srv := kiev.NewServer(kiev.WithRegistry(reg))
		srv.Register(Catalog{name, stall})
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		go srv.Serve(l)
		defer srv.Close()
	}
	w, err := reg.Watch(context.Background(), "Catalog")
	if err != nil {
		log.Fatal(err)
	}
	for set := []registry.Instance(nil); len(set) < 2; {
		set, _ = w.Next(context.Background())
	}
	w.Stop()

	c, err := kiev.Dial("Catalog", kiev.WithRegistry(reg),
		kiev.WithRetry(kiev.RetryPolicy{Idempotent: kiev.IdempotentMethods("Catalog.Get")}),
		kiev.WithHedging(kiev.Hedging{Delay: 20 * time.Millisecond}))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var item string
	if err := c.Call(ctx, "Catalog.Get", 7, &item); err != nil {
		log.Fatal(err)
	}
	fmt.Println(item)
	fmt.Println("hedges sent:", c.HedgeStats().Sent)
	// Output:
	// item 7
	// hedges sent: 1
}

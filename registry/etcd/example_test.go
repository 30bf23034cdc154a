package etcd_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/registry/etcd"
)

// A server registers what it serves in etcd while it runs; a client finds
// it through an etcd:// target, which importing the package makes known
// to kiev.Dial. (The example needs an etcd cluster, so it is not run.)
func Example() {
	reg, err := etcd.New(etcd.Config{
		Endpoints: []string{"etcd1:2379", "etcd2:2379", "etcd3:2379"},
		Root:      "/team-a/kiev",
		TTL:       5 * time.Second, // a crashed server drops out within 5 s
		Logger:    slog.Default(),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close() // revokes the lease: the registrations go at once

	srv := kiev.NewServer(kiev.WithRegistry(reg))
	if err := srv.Register(new(Arith)); err != nil {
		log.Fatal(err)
	}
	l, err := net.Listen("tcp", ":7000")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(l) // registers Arith at this host's address

	c, err := kiev.Dial("etcd://etcd1:2379,etcd2:2379/team-a/kiev/Arith")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	var sum int
	if err := c.Call(context.Background(), "Arith.Add", [2]int{2, 3}, &sum); err != nil {
		log.Fatal(err)
	}
	fmt.Println(sum)
}

type Arith struct{}

func (Arith) Add(ctx context.Context, args [2]int, sum *int) error {
	*sum = args[0] + args[1]
	return nil
}

package zookeeper_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/registry/zookeeper"
)

// A server publishes itself while it runs; a client follows the set of
// providers. (The example needs a ZooKeeper ensemble, so it is not run.)
func Example() {
	reg, err := zookeeper.New(zookeeper.Config{
		Servers:        []string{"zk1:2181", "zk2:2181", "zk3:2181"},
		Root:           "/team-a/kiev",
		SessionTimeout: 6 * time.Second,
		Digest:         "arith-servers:s3cret", // others may read, not write
		Logger:         slog.Default(),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close() // withdraws the registration

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in := registry.Instance{Service: "Arith", Network: "tcp", Address: "10.0.0.7:7000", Codecs: []string{"msgpack"}}
	if err := reg.Register(ctx, in); err != nil {
		log.Fatal(err)
	}

	w, err := reg.Watch(ctx, "Arith")
	if err != nil {
		log.Fatal(err)
	}
	defer w.Stop()
	for {
		providers, err := w.Next(context.Background())
		if err != nil {
			return // the watcher or the registry was stopped
		}
		fmt.Println("Arith providers:", len(providers))
	}
}

package memory_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/registry/memory"
	"github.com/kievrpc/kiev/registry/registrytest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	// Registries made within one test share one backend, as processes
	// sharing a ZooKeeper ensemble do.
	var mu sync.Mutex
	backends := map[string]*memory.Registry{}
	registrytest.Run(t, func(t *testing.T) registry.Registry {
		mu.Lock()
		defer mu.Unlock()
		b, ok := backends[t.Name()]
		if !ok {
			b = memory.New()
			backends[t.Name()] = b
		}
		return b.Connect()
	})
}

// Closing a view withdraws its registrations at once, as a ZooKeeper
// session's expiry does: a watcher waiting meanwhile sees them all gone,
// never some of them.
func TestCloseWithdrawsAtOnce(t *testing.T) {
	ctx := context.Background()
	const n = 100
	for round := range 300 {
		reg := memory.New()
		session := reg.Connect()
		for port := range n {
			in := registry.Instance{Service: "S", Network: "tcp", Address: fmt.Sprintf("127.0.0.1:%d", port+1)}
			if err := session.Register(ctx, in); err != nil {
				t.Fatal(err)
			}
		}
		w, err := reg.Watch(ctx, "S")
		if err != nil {
			t.Fatal(err)
		}
		if got, err := w.Next(ctx); err != nil || len(got) != n {
			t.Fatalf("round %d: first Next = %d instances, %v; want %d", round, len(got), err, n)
		}
		next := make(chan int)
		go func() {
			got, _ := w.Next(ctx)
			next <- len(got)
		}()
		session.Close()
		if got := <-next; got != 0 {
			t.Fatalf("round %d: a watcher saw %d of the %d instances of a closed session; want them all gone at once", round, got, n)
		}
		w.Stop()
	}
}

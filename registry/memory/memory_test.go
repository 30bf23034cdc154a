package memory_test

import (
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

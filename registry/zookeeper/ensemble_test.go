package zookeeper_test

import (
	"testing"

	"github.com/kievrpc/kiev/internal/zktest"
	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/registry/registrytest"
	"github.com/kievrpc/kiev/registry/zookeeper"
)

// TestConformanceEnsemble runs registrytest against the shared
// three-member ensemble, each registry given every member, so that the
// registries of one test talk to different members and see each other's
// writes through the ensemble's replication. The tests that stop members
// start ensembles of their own (zookeeper_ensemble_test.go at the root).
func TestConformanceEnsemble(t *testing.T) {
	addrs := zktest.SharedEnsemble(t)
	registrytest.Run(t, func(t *testing.T) registry.Registry {
		cfg := config(t, addrs[0])
		cfg.Servers = addrs
		r, err := zookeeper.New(cfg)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return r
	})
}

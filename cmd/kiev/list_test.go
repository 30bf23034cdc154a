package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/internal/zktest"
	"github.com/kievrpc/kiev/reflection"
	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/registry/zookeeper"
)

// TestList lists a server registered in the ZooKeeper of
// scripts/services.sh, under a root of its own.
func TestList(t *testing.T) {
	zkAddr := zktest.Shared(t)
	root := fmt.Sprintf("/kiev-test/cmd-kiev-%d", time.Now().UnixNano())
	t.Cleanup(func() {
		if err := zktest.DeleteTree(zkAddr, root, ""); err != nil {
			t.Errorf("deleting %s: %v", root, err)
		}
	})
	reg, err := zookeeper.New(zookeeper.Config{Servers: []string{zkAddr}, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	addr := serve(t, kiev.WithRegistry(reg), kiev.WithWeight(3))
	awaitProvider(t, reg, "Shop")

	url := "zookeeper://" + zkAddr + root
	stdout, _ := wantRun(t, exitOK, []string{
		"SERVICE  PROVIDER",
		fmt.Sprintf("Shop     tcp://%s  3       json,msgpack,proto  1\n", addr),
	}, nil, "list", url)
	if strings.Contains(stdout, reflection.ServiceName) {
		t.Logf("note: the server published %s in the registry:\n%s", reflection.ServiceName, stdout)
	}

	// Named services, one unknown, as JSON.
	stdout, _ = wantRun(t, exitOK, nil, nil, "list", "--json", url, "Shop", "Nope")
	var got []serviceProviders
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("--json printed %v:\n%s", err, stdout)
	}
	if len(got) != 2 || got[0].Service != "Shop" || len(got[0].Providers) != 1 || got[0].Providers[0].Address != addr ||
		got[1].Service != "Nope" || len(got[1].Providers) != 0 {
		t.Errorf("--json printed %+v; want Shop at %s and Nope with no providers", got, addr)
	}
	wantRun(t, exitOK, []string{"Nope     -         -       -       -\n"}, nil, "list", url, "Nope")

	// The service and its providers are found the way kiev call dials them.
	wantRun(t, exitOK, []string{`"order_id": 5`}, nil, "call", url+"/Shop", "Shop.Place", `{"id": 5}`)

	wantRun(t, exitFailed, nil, []string{"has no node " + root + "/none, so no services are registered under that root"},
		"list", url+"/none")
	wantRun(t, exitFailed, nil, []string{"ZooKeeper at 127.0.0.1:1", "is it running there?"},
		"list", "--timeout", "300ms", "zookeeper://127.0.0.1:1")
}

// awaitProvider waits until service has a provider in reg.
func awaitProvider(t *testing.T, reg registry.Registry, service string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := reg.Watch(ctx, service)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for {
		ins, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %s to register: %v", service, err)
		}
		if len(ins) > 0 {
			return
		}
	}
}

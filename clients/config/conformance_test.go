package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kievrpc/kiev/clients/config"
	"github.com/kievrpc/kiev/clients/config/configtest"
	"github.com/kievrpc/kiev/internal/logtest"
	"github.com/kievrpc/kiev/internal/zktest"
)

// TestConformance runs configtest against every source but ZooKeeper:
// Apollo against the fake config service, a directory, and memory.
func TestConformance(t *testing.T) {
	t.Run("Memory", func(t *testing.T) {
		configtest.Run(t, func(t *testing.T, initial map[string]string) configtest.Backend {
			m := config.NewMemory(initial)
			return configtest.Backend{Source: m, Set: m.Set}
		})
	})
	t.Run("Dir", func(t *testing.T) { configtest.Run(t, dirBackend) })
	t.Run("Apollo", func(t *testing.T) { configtest.Run(t, apolloBackend) })
}

// TestZKConformance runs configtest against the ZooKeeper source, on the
// shared server. It is a test of its own, named as the Makefile's pattern
// of ZooKeeper tests (TestZK*) wants, so that it runs without -race:
// go-zookeeper/zk's race on connecting (zk#35) was flagged in it.
func TestZKConformance(t *testing.T) {
	zktest.Shared(t)
	configtest.Run(t, zkBackend)
}

func apolloBackend(t *testing.T, initial map[string]string) configtest.Backend {
	fa := newFakeApollo(t, "shop", initial)
	logger, _ := logtest.New(t)
	src, err := config.NewApollo(config.ApolloOptions{Server: fa.url(), AppID: "shop", Logger: logger})
	if err != nil {
		t.Fatalf("NewApollo: %v", err)
	}
	return configtest.Backend{Source: src, Set: func(v map[string]string) { fa.publish("application", v) }}
}

func zkBackend(t *testing.T, initial map[string]string) configtest.Backend {
	addr := zktest.Shared(t)
	admin := zkAdmin(t, addr)
	path := zkTestPath(t, admin)
	zkCreate(t, admin, path, zkJSON(t, initial))
	logger, _ := logtest.New(t)
	src, err := config.NewZooKeeper(config.ZooKeeperOptions{Servers: []string{addr}, Path: path, Logger: logger})
	if err != nil {
		t.Fatalf("NewZooKeeper: %v", err)
	}
	return configtest.Backend{Source: src, Set: func(v map[string]string) {
		if _, err := admin.Set(path, zkJSON(t, v), -1); err != nil {
			t.Errorf("setting %s: %v", path, err)
		}
	}}
}

// dirBackend serves a directory replaced whole at each Set, by swapping a
// link to it, as Kubernetes does.
func dirBackend(t *testing.T, initial map[string]string) configtest.Backend {
	d := newSwappedDir(t)
	d.set(initial)
	src, err := config.NewDir(config.DirOptions{Path: d.link, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("NewDir: %v", err)
	}
	return configtest.Backend{Source: src, Set: d.set}
}

// swappedDir is a configuration directory reached through a link, which
// set points at a new directory.
type swappedDir struct {
	t    testing.TB
	root string
	link string
	n    int
}

func newSwappedDir(t testing.TB) *swappedDir {
	root := t.TempDir()
	return &swappedDir{t: t, root: root, link: filepath.Join(root, "config")}
}

func (d *swappedDir) set(values map[string]string) {
	d.n++
	dir := filepath.Join(d.root, fmt.Sprintf("v%d", d.n))
	if err := os.Mkdir(dir, 0o755); err != nil {
		d.t.Fatal(err)
	}
	for k, v := range values {
		// The trailing newline, as editors write it, is not part of
		// the value.
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v+"\n"), 0o644); err != nil {
			d.t.Fatal(err)
		}
	}
	tmp := d.link + ".tmp"
	if err := os.Symlink(dir, tmp); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, d.link); err != nil {
		d.t.Fatal(err)
	}
}

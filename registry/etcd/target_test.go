package etcd_test

import (
	"strings"
	"testing"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/registry/etcd/internal/etcdtest"
)

// Importing the package teaches kiev.Dial etcd:// targets; those it
// cannot use fail at Dial, saying how to write them.
func TestDialErrors(t *testing.T) {
	for _, tc := range []struct{ target, want string }{
		{"etcd:///Who", "no etcd endpoint"},
		{"etcd://127.0.0.1:2379", "no service name"},
		{"etcd://127.0.0.1:2379/", "no service name"},
		{"etcd://,127.0.0.1:2379/Who", "an empty endpoint"},
		{"etcd://127.0.0.1:2379/a//Who", "ends with '/'"},
		{"etcd://127.0.0.1:2379/Who?ttl=1.5s", "whole number of seconds"},
		{"etcd://127.0.0.1:2379/Who?ttl=soon", "whole number of seconds"},
		{"etcd://127.0.0.1:2379/Who?tll=5s", `unknown parameter "tll"`},
		{"etcd://kiev:secret@127.0.0.1:2379/Who", "credentials"},
	} {
		c, err := kiev.Dial(tc.target)
		if err == nil {
			c.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "write etcd://host:2379") {
			t.Errorf("Dial(%q) = %v; want an error saying %q and how to write the target", tc.target, err, tc.want)
		}
	}
}

// An etcd:// target with a root and a ttl finds the providers registered
// under that root.
func TestDialTarget(t *testing.T) {
	addr := etcdtest.Shared(t)
	cfg := config(t, addr)
	provider(t, open(t, cfg), "p0")
	c, err := kiev.Dial("etcd://" + addr + "," + addr + cfg.Root + "/Who?ttl=3s")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := callName(t, c); got != "p0" {
		t.Fatalf("answered by %q; want p0", got)
	}
}

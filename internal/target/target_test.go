package target

import (
	"log/slog"

	"github.com/kievrpc/kiev/registry"
	"net/url"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in                     string
		network, addr, service string
		registry               bool // a registry to open
	}{
		{in: "127.0.0.1:7000", network: "tcp", addr: "127.0.0.1:7000"},
		{in: "tcp://[::1]:7000", network: "tcp", addr: "[::1]:7000"},
		{in: "udp://127.0.0.1:7000", network: "udp", addr: "127.0.0.1:7000"},
		{in: "unix:///run/a.sock", network: "unix", addr: "/run/a.sock"},
		{in: "Arith", service: "Arith"},
		{in: "db.example.com:7000", service: "db.example.com:7000", registry: true}, // resolved in DNS
		{in: "zookeeper://zk1:2181,zk2:2181/svc/Arith", service: "Arith", registry: true},
		{in: "dns:///_kiev._tcp.example.com", service: "_kiev._tcp.example.com", registry: true},
	} {
		got, err := Parse(c.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.in, err)
			continue
		}
		if got.Network != c.network || got.Addr != c.addr || got.Service != c.service || (got.Open != nil) != c.registry {
			t.Errorf("Parse(%q) = %+v; want network %q, addr %q, service %q, a registry %v", c.in, got, c.network, c.addr, c.service, c.registry)
		}
	}
}

func TestParseSaysHowToWriteIt(t *testing.T) {
	for in, want := range map[string]string{
		"::1":                         "IPv6 address without its port",
		"unix://":                     "no socket path",
		"nosuch://x/y":                "unknown scheme",
		"etcd://10.0.0.1:2379/Arith":  "import github.com/kievrpc/kiev/registry/etcd",
		"zookeeper:///Arith":          "no ZooKeeper server",
		"zookeeper://zk:2181/A?x=1":   "unknown parameter",
		"dns:///":                     "no name to resolve",
		"dns:///a.b:1?interval=never": "not a positive duration",
	} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v; want an error saying %q", in, err, want)
		}
	}
	if err := HostLike("db.example.com"); err == nil || !strings.Contains(err.Error(), "host without its port") {
		t.Errorf("HostLike(a DNS name) = %v", err)
	}
	if err := HostLike("Arith"); err != nil {
		t.Errorf("HostLike(a service name) = %v", err)
	}
}

func TestRegister(t *testing.T) {
	Register("kievtest", func(u *url.URL) (string, func(*slog.Logger) (registry.Registry, error), error) {
		return strings.Trim(u.Path, "/"), openNothing, nil
	})
	got, err := Parse("kievtest://h/Svc")
	if err != nil || got.Service != "Svc" || got.Open == nil {
		t.Fatalf("Parse of a registered scheme = %+v, %v", got, err)
	}
	if !strings.Contains(knownSchemes(), "kievtest://") {
		t.Errorf("known schemes %q lack the registered one", knownSchemes())
	}
	for _, bad := range []string{"tcp", "Upper", "kievtest"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", bad)
				}
			}()
			Register(bad, func(*url.URL) (string, func(*slog.Logger) (registry.Registry, error), error) { return "", nil, nil })
		}()
	}
}

func openNothing(*slog.Logger) (registry.Registry, error) { return nil, nil }

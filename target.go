package kiev

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/registry/zookeeper"
)

// target is a parsed Dial target: an address, or a service to discover.
type target struct {
	network, addr string
	service       string
	zookeeper     *zookeeper.Config // for a zookeeper:// target
}

func parseTarget(s string) (target, error) {
	scheme, rest, hasScheme := strings.Cut(s, "://")
	if !hasScheme {
		if isServiceName(s) {
			return target{service: s}, nil
		}
		scheme, rest = "tcp", s
	}
	switch scheme {
	case "unix":
		if rest == "" {
			return target{}, fmt.Errorf("kiev: Dial %q: no socket path; write unix:///path/to/socket", s)
		}
		return target{network: "unix", addr: rest}, nil
	case "tcp":
		if ip := net.ParseIP(strings.Trim(rest, "[]")); ip != nil && ip.To4() == nil {
			return target{}, fmt.Errorf("kiev: Dial %q: that is an IPv6 address without its port; write %q", s, "["+strings.Trim(rest, "[]")+"]:PORT")
		}
		if _, _, err := net.SplitHostPort(rest); err != nil {
			return target{}, fmt.Errorf("kiev: Dial %q: want host:port, a service name, or a URL (tcp://, unix://, zookeeper://): %v", s, err)
		}
		return target{network: "tcp", addr: rest}, nil
	case "udp":
		if _, _, err := net.SplitHostPort(rest); err != nil {
			return target{}, fmt.Errorf("kiev: Dial %q: want udp://host:port: %v", s, err)
		}
		return target{network: "udp", addr: rest}, nil
	case "zookeeper", "zk":
		return parseZooKeeper(s)
	}
	return target{}, fmt.Errorf("kiev: Dial %q: unknown scheme %q; use host:port, a service name, tcp://, udp://, unix:// or zookeeper://", s, scheme)
}

// isServiceName reports whether s is a bare service name rather than an
// address: no colon, no slash.
func isServiceName(s string) bool {
	return s != "" && !strings.ContainsAny(s, ":/[]")
}

// hostLike says why a bare target dialed on the in-memory default registry
// is surely meant as a host: an IP address, localhost, or a lower-case DNS
// name such as db.example.com that no server of this process registers
// as a service. Dialed as a service, it would wait for a provider that
// never comes.
func hostLike(s string) error {
	if net.ParseIP(s) == nil && s != "localhost" && !dnsName(s) {
		return nil
	}
	return fmt.Errorf("kiev: Dial %q: that is a host without its port, and a bare name is a service to find in a registry, which would wait for a provider that never registers; write %q (or \"tcp://%s:PORT\"), or to find a service of that name, give WithRegistry, SetDefaultRegistry or a zookeeper:// target", s, s+":PORT", s)
}

// dnsName reports whether s reads as a lower-case DNS name ending in a
// top-level domain (db.example.com, cache.internal), and is not a service
// a server of this process registered.
func dnsName(s string) bool {
	const lower = "abcdefghijklmnopqrstuvwxyz"
	labels := strings.Split(s, ".")
	if len(labels) < 2 || localService(s) {
		return false
	}
	for _, l := range labels {
		if l == "" || strings.Trim(l, lower+"0123456789-") != "" {
			return false
		}
	}
	tld := labels[len(labels)-1]
	return len(tld) >= 2 && strings.Trim(tld, lower) == ""
}

// parseZooKeeper parses "zookeeper://h1:2181,h2:2181/root/path/Service?session_timeout=10s",
// where the path before the service is the registry's Root (its default,
// "/kiev", if there is none).
func parseZooKeeper(s string) (target, error) {
	u, err := url.Parse(s)
	if err != nil {
		return target{}, fmt.Errorf("kiev: Dial %q: %v", s, err)
	}
	bad := func(format string, args ...any) (target, error) {
		return target{}, fmt.Errorf("kiev: Dial %q: "+format+"; write zookeeper://host:2181,host2:2181/[chroot/]Service", append([]any{s}, args...)...)
	}
	if u.Host == "" && u.User == nil {
		return bad("no ZooKeeper server")
	}
	path := strings.Trim(u.Path, "/")
	if path == "" {
		return bad("no service name")
	}
	if u.User != nil {
		return bad("credentials in the URL are not supported; use zookeeper.Config.Digest")
	}
	cfg := &zookeeper.Config{Servers: strings.Split(u.Host, ",")}
	service := path
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		cfg.Root, service = "/"+path[:i], path[i+1:]
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "session_timeout":
			d, err := time.ParseDuration(q.Get(k))
			if err != nil || d <= 0 {
				return bad("session_timeout=%q is not a positive duration such as 10s", q.Get(k))
			}
			cfg.SessionTimeout = d
		default:
			return bad("unknown parameter %q (known: session_timeout)", k)
		}
	}
	return target{service: service, zookeeper: cfg}, nil
}

// openZooKeeper opens the registry of a zookeeper:// target; it logs
// through the client's logger.
func openZooKeeper(cfg *zookeeper.Config, log *slog.Logger) (registry.Registry, error) {
	c := *cfg
	c.Logger = log
	return zookeeper.New(c)
}

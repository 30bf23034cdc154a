// Package target parses the targets kiev.Dial takes: an address
// (host:port, tcp://, udp://, unix://), a service name to find in a
// registry, or a registry URL (zookeeper://, dns://, or a scheme given
// to Register), which names the service and how to open its registry.
package target

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/registry/dns"
	"github.com/kievrpc/kiev/registry/zookeeper"
)

// Target is a parsed Dial target: an address, or a service to discover.
type Target struct {
	Network, Addr string
	Service       string
	// open opens the registry that a registry URL (zookeeper://, or a
	// scheme given to Register) names, which the client owns; nil
	// for other targets.
	Open func(logger *slog.Logger) (registry.Registry, error)
}

// schemeParser is the parse function of Register.
type schemeParser = func(*url.URL) (string, func(*slog.Logger) (registry.Registry, error), error)

// schemes holds the registry URL schemes given to Register.
var schemes struct {
	mu    sync.RWMutex // guards parse
	parse map[string]schemeParser
}

// builtinSchemes are the schemes parseTarget knows itself.
var builtinSchemes = []string{"tcp", "udp", "unix", "zookeeper", "zk", "dns"}

// schemeModules names the packages that register well-known schemes, for
// the error of a Dial whose program did not import one.
var schemeModules = map[string]string{"etcd": "github.com/kievrpc/kiev/registry/etcd"}

// Register adds a registry URL scheme to those Parse knows; it is
// kiev.RegisterScheme, whose doc says what it checks.
func Register(scheme string, parse func(u *url.URL) (service string, open func(logger *slog.Logger) (registry.Registry, error), err error)) {
	switch {
	case parse == nil:
		panic(fmt.Sprintf("kiev: RegisterScheme(%q) with a nil parse function", scheme))
	case !validScheme(scheme):
		panic(fmt.Sprintf("kiev: RegisterScheme(%q): not a lower-case URL scheme such as \"etcd\"", scheme))
	case slices.Contains(builtinSchemes, scheme):
		panic(fmt.Sprintf("kiev: RegisterScheme(%q): Dial knows %s:// targets itself", scheme, scheme))
	}
	schemes.mu.Lock()
	defer schemes.mu.Unlock()
	if _, dup := schemes.parse[scheme]; dup {
		panic(fmt.Sprintf("kiev: RegisterScheme(%q) called twice", scheme))
	}
	if schemes.parse == nil {
		schemes.parse = make(map[string]schemeParser)
	}
	schemes.parse[scheme] = parse
}

// validScheme reports whether s is a lower-case URL scheme (RFC 3986).
func validScheme(s string) bool {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	return strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789+-.") == ""
}

// registeredScheme returns the parse function of a scheme given to
// Register, or nil.
func registeredScheme(scheme string) schemeParser {
	schemes.mu.RLock()
	defer schemes.mu.RUnlock()
	return schemes.parse[scheme]
}

// knownSchemes lists the schemes Dial accepts, for error messages:
// "tcp://, udp://, unix://, zookeeper://, dns:// or etcd://".
func knownSchemes() string {
	schemes.mu.RLock()
	names := []string{"tcp", "udp", "unix", "zookeeper", "dns"}
	extra := make([]string, 0, len(schemes.parse))
	for s := range schemes.parse {
		extra = append(extra, s)
	}
	schemes.mu.RUnlock()
	slices.Sort(extra)
	names = append(names, extra...)
	for i := range names {
		names[i] += "://"
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// parseScheme parses a target of a scheme given to Register.
func parseScheme(s string, parse schemeParser) (Target, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Target{}, fmt.Errorf("kiev: Dial %q: %v", s, err)
	}
	service, open, err := parse(u)
	if err != nil {
		return Target{}, fmt.Errorf("kiev: Dial %q: %w", s, err)
	}
	if service == "" || open == nil {
		return Target{}, fmt.Errorf("kiev: Dial %q: the %s:// scheme's parse function returned no service or no open function", s, u.Scheme)
	}
	return Target{Service: service, Open: open}, nil
}

func Parse(s string) (Target, error) {
	scheme, rest, hasScheme := strings.Cut(s, "://")
	if !hasScheme {
		if IsServiceName(s) {
			return Target{Service: s}, nil
		}
		scheme, rest = "tcp", s
	}
	switch scheme {
	case "unix":
		if rest == "" {
			return Target{}, fmt.Errorf("kiev: Dial %q: no socket path; write unix:///path/to/socket", s)
		}
		return Target{Network: "unix", Addr: rest}, nil
	case "tcp":
		if ip := net.ParseIP(strings.Trim(rest, "[]")); ip != nil && ip.To4() == nil {
			return Target{}, fmt.Errorf("kiev: Dial %q: that is an IPv6 address without its port; write %q", s, "["+strings.Trim(rest, "[]")+"]:PORT")
		}
		if _, _, err := net.SplitHostPort(rest); err != nil {
			return Target{}, fmt.Errorf("kiev: Dial %q: want host:port, a service name, or a URL (%s): %v", s, knownSchemes(), err)
		}
		if !hasScheme && namedHost(rest) {
			return dnsTarget(s, "", rest, 0)
		}
		return Target{Network: "tcp", Addr: rest}, nil
	case "udp":
		if _, _, err := net.SplitHostPort(rest); err != nil {
			return Target{}, fmt.Errorf("kiev: Dial %q: want udp://host:port: %v", s, err)
		}
		return Target{Network: "udp", Addr: rest}, nil
	case "zookeeper", "zk":
		return parseZooKeeper(s)
	case "dns":
		return parseDNS(s)
	}
	if parse := registeredScheme(scheme); parse != nil {
		return parseScheme(s, parse)
	}
	if pkg, ok := schemeModules[scheme]; ok {
		return Target{}, fmt.Errorf("kiev: Dial %q: unknown scheme %q; import %s to use %s:// targets", s, scheme, pkg, scheme)
	}
	return Target{}, fmt.Errorf("kiev: Dial %q: unknown scheme %q; use host:port, a service name, %s", s, scheme, knownSchemes())
}

// IsServiceName reports whether s is a bare service name rather than an
// address: no colon, no slash.
func IsServiceName(s string) bool {
	return s != "" && !strings.ContainsAny(s, ":/[]")
}

// HostLike says why a bare target dialed on the in-memory default registry
// is surely meant as a host: an IP address, localhost, or a lower-case DNS
// name such as db.example.com. Dialed as a service, it would wait for a
// provider that never comes.
func HostLike(s string) error {
	if net.ParseIP(s) == nil && s != "localhost" && !dnsName(s) {
		return nil
	}
	return fmt.Errorf("kiev: Dial %q: that is a host without its port, and a bare name is a service to find in a registry, which would wait for a provider that never registers; write %q (or \"tcp://%s:PORT\"), or to find a service of that name, give WithRegistry (WithRegistry(kiev.DefaultRegistry()) for this process's servers), SetDefaultRegistry or a registry URL such as zookeeper://", s, s+":PORT", s)
}

// dnsName reports whether s reads as a lower-case DNS name ending in a
// top-level domain (db.example.com, cache.internal).
func dnsName(s string) bool {
	const lower = "abcdefghijklmnopqrstuvwxyz"
	labels := strings.Split(s, ".")
	if len(labels) < 2 {
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
func parseZooKeeper(s string) (Target, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Target{}, fmt.Errorf("kiev: Dial %q: %v", s, err)
	}
	bad := func(format string, args ...any) (Target, error) {
		return Target{}, fmt.Errorf("kiev: Dial %q: "+format+"; write zookeeper://host:2181,host2:2181/[chroot/]Service", append([]any{s}, args...)...)
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
	open := func(log *slog.Logger) (registry.Registry, error) {
		c := *cfg
		c.Logger = log
		return zookeeper.New(c)
	}
	return Target{Service: service, Open: open}, nil
}

// parseDNS parses "dns:///name:port", "dns:///_kiev._tcp.name", or with a
// DNS server to ask, "dns://10.0.0.10:53/name:port"; "?interval=5s" sets
// how often the name is resolved again.
func parseDNS(s string) (Target, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Target{}, fmt.Errorf("kiev: Dial %q: %v", s, err)
	}
	bad := func(format string, args ...any) (Target, error) {
		return Target{}, fmt.Errorf("kiev: Dial %q: "+format+"; write dns:///host:port, dns:///_service._tcp.domain, or dns://DNS-SERVER:53/host:port", append([]any{s}, args...)...)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if name == "" {
		return bad("no name to resolve")
	}
	if u.User != nil {
		return bad("a DNS server takes no credentials")
	}
	var interval time.Duration
	q := u.Query()
	for k := range q {
		switch k {
		case "interval":
			interval, err = time.ParseDuration(q.Get(k))
			if err != nil || interval <= 0 {
				return bad("interval=%q is not a positive duration such as 30s", q.Get(k))
			}
		default:
			return bad("unknown parameter %q (known: interval)", k)
		}
	}
	return dnsTarget(s, u.Host, name, interval)
}

// dnsTarget is a target whose providers are the addresses name resolves
// to on server ("" for the system's resolver).
func dnsTarget(s, server, name string, interval time.Duration) (Target, error) {
	cfg := dns.Config{Server: server, Interval: interval}
	if _, err := dns.New(cfg); err != nil {
		return Target{}, fmt.Errorf("kiev: Dial %q: %w", s, err)
	}
	open := func(log *slog.Logger) (registry.Registry, error) {
		c := cfg
		c.Logger = log
		return dns.New(c)
	}
	return Target{Service: name, Open: open}, nil
}

// namedHost reports whether addr, "host:port", names its host rather than
// giving an IP address, so that Dial resolves it in DNS.
func namedHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && host != "" && net.ParseIP(host) == nil
}

// Package dns finds a service's providers in DNS: every A and AAAA record
// of a name, or the SRV records of a service, as a Kubernetes headless
// service or Consul's DNS interface answers them. It is a read-only
// registry.Registry: Watch re-resolves the name on an interval, and
// Register fails with ErrReadOnly.
//
// kiev.Dial makes one by itself for a "dns:///name:port" target, and for
// a "host:port" target whose host is not an IP address; the URL's
// authority names the DNS server to ask ("dns://10.0.0.10:53/name:port").
// A program can also make one with New and give it to kiev.WithRegistry.
//
// # Names
//
// The service names Watch takes are of two kinds:
//
//   - "host:port", such as "feed.prod.svc.cluster.local:7000": one
//     provider per A and AAAA record of host, each at port.
//   - an SRV name, which starts with an underscore, such as
//     "_kiev._tcp.feed.prod.svc.cluster.local": one provider per address
//     of each SRV record's target, at the record's port, with the record's
//     weight as its Weight (0 counts as 1). Only the records of the lowest
//     priority value whose targets resolve are used; the others are the
//     fallback for when none of those does.
//
// # Re-resolving
//
// A Watcher resolves its name at once, then again every Config.Interval
// (DefaultInterval, 30s) and whenever ResolveNow asks, at most once per
// Config.MinInterval (DefaultMinInterval, 1s). kiev's Client calls
// ResolveNow when it loses a provider's connection, so a pod that is gone
// is noticed at once rather than at the next interval.
//
// DNS answers carry a TTL, but Go's net.Resolver does not report it, so the
// interval is fixed: set it to the TTL your DNS server gives the records
// (Kubernetes' CoreDNS gives 5 s by default to headless services; a lower
// Interval costs one query per interval per client).
//
// # When a lookup fails
//
// A lookup that fails (a timeout, SERVFAIL, no DNS server) makes Next
// return the error: kiev's Client logs it, keeps the providers it last
// had, shows the error in its status (Client.Discovery), and asks again
// with backoff. A name that does not exist (NXDOMAIN, or no records)
// counts as a failure until the name has resolved once, so that a typo
// fails calls with an error that names it; after that, it means that
// every provider has gone, and Next returns an empty set.
package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kievrpc/kiev/registry"
)

// Defaults of Config.
const (
	DefaultInterval    = 30 * time.Second
	DefaultMinInterval = time.Second
	DefaultTimeout     = 5 * time.Second
)

// Errors of the registry, beside registry.ErrClosed and registry.ErrStopped.
var (
	// ErrReadOnly is returned by Register and Deregister: providers are
	// listed in DNS by whoever runs it (Kubernetes, Consul), not by kiev.
	ErrReadOnly = errors.New("kiev/registry/dns: DNS is read-only; register providers with your DNS server (a Kubernetes service, Consul), or serve with another registry")
	// ErrName is wrapped by the errors of Watch for a name that is
	// neither "host:port" nor an SRV name ("_service._proto.domain").
	ErrName = errors.New("kiev/registry/dns: not a DNS service name")
)

// Config configures a Registry. Its zero value asks the system's resolver
// every 30 s.
type Config struct {
	// Server is the DNS server to ask, "host:port" (port 53 if there is no
	// port); empty means the system's resolver (/etc/resolv.conf).
	Server string
	// Interval is how often a Watcher resolves its name again; 0 means
	// DefaultInterval.
	Interval time.Duration
	// MinInterval is the least time between two lookups of one Watcher
	// that ResolveNow asks for; 0 means DefaultMinInterval.
	MinInterval time.Duration
	// Timeout bounds each lookup; 0 means DefaultTimeout.
	Timeout time.Duration
	// Logger receives a line when a Watcher's set changes; nil means
	// slog.Default().
	Logger *slog.Logger
}

// Registry finds providers in DNS. It is safe for concurrent use.
type Registry struct {
	cfg      Config
	resolver *net.Resolver

	closeOnce sync.Once
	closed    chan struct{}
}

// New returns a Registry that asks cfg.Server. It fails if Server is not
// "host" or "host:port".
func New(cfg Config) (*Registry, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MinInterval <= 0 {
		cfg.MinInterval = DefaultMinInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Registry{cfg: cfg, resolver: net.DefaultResolver, closed: make(chan struct{})}
	if cfg.Server != "" {
		server := cfg.Server
		if _, _, err := net.SplitHostPort(server); err != nil {
			if strings.Contains(strings.Trim(server, "[]"), ":") && !strings.HasPrefix(server, "[") {
				server = "[" + server + "]"
			}
			server = net.JoinHostPort(strings.Trim(server, "[]"), "53")
		}
		if _, port, err := net.SplitHostPort(server); err != nil || port == "" {
			return nil, fmt.Errorf("kiev/registry/dns: DNS server %q is not host or host:port", cfg.Server)
		}
		var d net.Dialer
		r.resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, server)
		}}
		r.cfg.Server = server
	}
	return r, nil
}

// Register fails with ErrReadOnly.
func (r *Registry) Register(context.Context, registry.Instance) error { return ErrReadOnly }

// Deregister fails with ErrReadOnly.
func (r *Registry) Deregister(context.Context, registry.Instance) error { return ErrReadOnly }

// Close stops the Registry's Watchers, whose Next then returns
// registry.ErrClosed.
func (r *Registry) Close() error {
	r.closeOnce.Do(func() { close(r.closed) })
	return nil
}

// Watch starts watching name, "host:port" or an SRV name (see the package
// doc). It fails with an error wrapping ErrName for any other name.
func (r *Registry) Watch(ctx context.Context, name string) (registry.Watcher, error) {
	q, err := parseName(name)
	if err != nil {
		return nil, err
	}
	select {
	case <-r.closed:
		return nil, registry.ErrClosed
	default:
	}
	return &Watcher{r: r, q: q, kick: make(chan struct{}, 1), stop: make(chan struct{})}, nil
}

// query is a parsed service name.
type query struct {
	name string // as given to Watch
	host string // the host of "host:port"; empty for SRV
	port string
	srv  string // the SRV name; empty for host:port
}

func parseName(name string) (query, error) {
	if strings.HasPrefix(name, "_") {
		if strings.ContainsAny(name, ":/ ") || !strings.Contains(name, ".") {
			return query{}, fmt.Errorf("%w: %q: an SRV name reads _service._proto.domain, with no port", ErrName, name)
		}
		return query{name: name, srv: name}, nil
	}
	host, port, err := net.SplitHostPort(name)
	if err != nil {
		return query{}, fmt.Errorf("%w: %q: want host:port, or an SRV name such as _kiev._tcp.feed.example.com: %v", ErrName, name, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		n, err = net.LookupPort("tcp", port) // a service name, such as "http"
	}
	if err != nil || n <= 0 || n > 65535 {
		return query{}, fmt.Errorf("%w: %q: port %q is not a number from 1 to 65535", ErrName, name, port)
	}
	if host == "" {
		return query{}, fmt.Errorf("%w: %q: no host", ErrName, name)
	}
	return query{name: name, host: host, port: port}, nil
}

// Watcher follows the providers a DNS name lists. Next is called by one
// goroutine at a time; Stop and ResolveNow by any, at any time.
type Watcher struct {
	r    *Registry
	q    query
	kick chan struct{} // ResolveNow's requests; room for one

	stopOnce sync.Once
	stop     chan struct{}

	// Owned by the goroutine that calls Next.
	last     []registry.Instance
	returned bool      // Next has returned a set
	resolved bool      // the name has resolved once
	failed   bool      // the last lookup failed
	lookedUp time.Time // when the last lookup started
}

// Next resolves the name and returns its providers: at once on the first
// call, and on later calls once a lookup (each Interval, or after
// ResolveNow) finds a set that differs from the last one returned. A
// lookup that fails makes Next return its error, and the next call then
// looks up again at once: the caller paces retries (kiev's Client backs
// off from 100 ms to 5 s).
func (w *Watcher) Next(ctx context.Context) ([]registry.Instance, error) {
	for {
		if w.returned && !w.failed {
			if err := w.wait(ctx); err != nil {
				return nil, err
			}
		}
		w.lookedUp = time.Now()
		set, err := w.lookup(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			w.failed = true
			return nil, err
		}
		w.failed = false
		if w.returned && registry.SameSet(set, w.last) {
			continue
		}
		if w.returned {
			w.r.cfg.Logger.Info("kiev/registry/dns: the providers changed", "name", w.q.name, "providers", len(set))
		}
		w.last, w.returned = set, true
		return set, nil
	}
}

// wait blocks until the next lookup is due.
func (w *Watcher) wait(ctx context.Context) error {
	t := time.NewTimer(w.r.cfg.Interval - time.Since(w.lookedUp))
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return nil
		case <-w.kick:
			since := time.Since(w.lookedUp)
			if gap := w.r.cfg.MinInterval - since; gap > 0 {
				t.Reset(min(gap, w.r.cfg.Interval-since))
				continue
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-w.stop:
			return registry.ErrStopped
		case <-w.r.closed:
			return registry.ErrClosed
		}
	}
}

// ResolveNow asks for a lookup now, or as soon as MinInterval has passed
// since the last one. It does not block.
func (w *Watcher) ResolveNow() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Stop ends the watch: Next returns registry.ErrStopped.
func (w *Watcher) Stop() { w.stopOnce.Do(func() { close(w.stop) }) }

// lookup resolves the name once.
func (w *Watcher) lookup(ctx context.Context) ([]registry.Instance, error) {
	select {
	case <-w.stop:
		return nil, registry.ErrStopped
	case <-w.r.closed:
		return nil, registry.ErrClosed
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, w.r.cfg.Timeout)
	defer cancel()
	var set []registry.Instance
	var err error
	if w.q.srv != "" {
		set, err = w.lookupSRV(ctx)
	} else {
		set, err = w.lookupHost(ctx, w.q.host, w.q.port, 0)
	}
	if err != nil {
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound && w.resolved {
			return nil, nil // every provider has gone
		}
		return nil, fmt.Errorf("kiev/registry/dns: looking up %s%s: %w", w.q.name, w.r.where(), err)
	}
	w.resolved = true
	registry.Sort(set)
	return set, nil
}

// where names the DNS server asked, for errors.
func (r *Registry) where() string {
	if r.cfg.Server == "" {
		return ""
	}
	return " on DNS server " + r.cfg.Server
}

// lookupHost returns one instance per address of host.
func (w *Watcher) lookupHost(ctx context.Context, host, port string, weight int) ([]registry.Instance, error) {
	addrs, err := w.r.resolver.LookupHost(ctx, host)
	if err != nil {
		return nil, err
	}
	set := make([]registry.Instance, 0, len(addrs))
	seen := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		addr := net.JoinHostPort(a, port)
		if seen[addr] {
			continue
		}
		seen[addr] = true
		set = append(set, registry.Instance{
			Service:  w.q.name,
			Network:  "tcp",
			Address:  addr,
			Weight:   weight,
			Metadata: map[string]string{MetaHost: strings.TrimSuffix(host, ".")},
		})
	}
	return set, nil
}

// MetaHost is the Instance.Metadata key that holds the DNS name an
// instance's address was found under, which kiev's Client verifies a TLS
// certificate against.
const MetaHost = "dns_host"

// lookupSRV returns one instance per address of each target of the SRV
// records of the lowest priority value whose targets resolve.
func (w *Watcher) lookupSRV(ctx context.Context) ([]registry.Instance, error) {
	_, srvs, err := w.r.resolver.LookupSRV(ctx, "", "", w.q.srv)
	if err != nil {
		return nil, err
	}
	// LookupSRV sorts by priority, and by weight at random within one.
	var lastErr error
	for i := 0; i < len(srvs); {
		prio := srvs[i].Priority
		seen := make(map[string]int) // address → index in set
		var set []registry.Instance
		for ; i < len(srvs) && srvs[i].Priority == prio; i++ {
			s := srvs[i]
			ins, err := w.lookupHost(ctx, s.Target, strconv.Itoa(int(s.Port)), int(s.Weight))
			if err != nil {
				lastErr = err
				continue
			}
			for _, in := range ins {
				if j, dup := seen[in.Address]; dup {
					set[j].Weight = max(set[j].Weight, in.Weight)
					continue
				}
				seen[in.Address] = len(set)
				set = append(set, in)
			}
		}
		if len(set) > 0 {
			return set, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	if lastErr == nil {
		lastErr = &net.DNSError{Err: "no SRV records", Name: w.q.srv, IsNotFound: true}
	}
	return nil, lastErr
}

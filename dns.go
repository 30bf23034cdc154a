package kiev

import (
	"fmt"
	"net"
	"time"

	"github.com/kievrpc/kiev/registry/dns"
)

// DiscoveryStatus is how a service client's discovery of providers fares:
// whether its registry (or DNS) has answered, and the error of its last
// watch or lookup while that fails. While it fails, the client keeps the
// providers it last had.
type DiscoveryStatus struct {
	// Resolved is set once the registry has listed the providers, even
	// if none.
	Resolved bool `json:"resolved"`
	// Updated is when the provider set last changed.
	Updated time.Time `json:"updated,omitzero"`
	// Error is the last watch or lookup's error, empty once one
	// succeeds; FailingSince is when the failures began.
	Error        string    `json:"error,omitempty"`
	FailingSince time.Time `json:"failing_since,omitzero"`
}

// Discovery reports how the client's discovery of providers fares; ok is
// false for a client of one address.
func (c *Client) Discovery() (st DiscoveryStatus, ok bool) {
	if c.group == nil {
		return DiscoveryStatus{}, false
	}
	return c.group.discovery(), true
}

// discovery reports the group's watch.
func (g *group) discovery() DiscoveryStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := DiscoveryStatus{Resolved: g.state.Load().resolved, Updated: g.updated, FailingSince: g.failingSince}
	if g.watchErr != nil {
		st.Error = g.watchErr.Error()
	}
	return st
}

// watched notes the outcome of one watch: err, or a new set.
func (g *group) watched(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case err == nil:
		g.watchErr, g.failingSince, g.updated = nil, time.Time{}, time.Now()
	case g.watchErr == nil:
		g.watchErr, g.failingSince = err, time.Now()
	default:
		g.watchErr = err
	}
}

// watchFailure says why the registry has listed no provider, if its
// watch fails, for the error of a call that found none.
func (g *group) watchFailure() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.watchErr == nil {
		return ""
	}
	return fmt.Sprintf("; the last lookup failed: %v", g.watchErr)
}

// resolveNow asks a registry that polls, such as DNS, to look again now:
// a provider's connection was lost, so it may have gone.
func (g *group) resolveNow() {
	if r, ok := g.watcher.(interface{ ResolveNow() }); ok {
		r.ResolveNow()
	}
}

// tlsAddr is the address whose host ep's TLS certificate must name: the
// DNS name ep's address was found under, if any.
func (ep *endpoint) tlsAddr() string {
	if h := ep.inst.Metadata[dns.MetaHost]; h != "" {
		if _, port, err := net.SplitHostPort(ep.inst.Address); err == nil {
			return net.JoinHostPort(h, port)
		}
	}
	return ep.inst.Address
}

// hint says what to do about a service of which no provider was found.
func (g *group) hint() string {
	if _, ok := g.reg.(*dns.Registry); ok {
		return "check the name, and that the DNS server lists an address for it"
	}
	return fmt.Sprintf("start a server that registers it, or if %q is a host, Dial \"host:port\"", g.service)
}

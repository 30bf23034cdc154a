package kiev

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/kievrpc/kiev/internal/transport"
	"github.com/kievrpc/kiev/registry"
)

// Bounds on the registry calls a Server makes. Registration goes on in
// the background after the first bound: the registry keeps trying.
const (
	registerTimeout   = 10 * time.Second
	deregisterTimeout = 5 * time.Second
)

// registryOf returns where the server registers its services.
func (s *Server) registryOf() registry.Registry {
	if s.opts.registry != nil {
		return s.opts.registry
	}
	return DefaultRegistry()
}

// endpointOf returns the instance, without a service, that a listener or
// packet socket at a advertises, or false if clients cannot dial its
// network.
func (s *Server) endpointOf(a net.Addr) (registry.Instance, bool, error) {
	in := registry.Instance{
		Network:  a.Network(),
		Weight:   max(s.opts.weight, 1),
		Version:  transport.Version,
		Metadata: s.opts.instanceMeta,
	}
	for name := range s.codecs {
		in.Codecs = append(in.Codecs, name)
	}
	slices.Sort(in.Codecs)
	switch in.Network {
	case "unix":
		in.Address = a.String()
		return in, true, nil
	case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
	default:
		return in, false, nil
	}
	addr, err := advertiseAddr(a.String(), s.opts.advertise)
	in.Address = addr
	return in, err == nil, err
}

// advertiseAddr picks the address to register for a listener at
// listenAddr: the override, completed with the listener's port, or the
// listener's own address, with an unspecified host replaced by one that
// other machines can reach.
func advertiseAddr(listenAddr, override string) (string, error) {
	host, port, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return "", err
	}
	if override != "" {
		if h, p, err := net.SplitHostPort(override); err == nil {
			return net.JoinHostPort(h, p), nil
		}
		return net.JoinHostPort(override, port), nil
	}
	ip := net.ParseIP(host)
	if host != "" && ip != nil && !ip.IsUnspecified() {
		return listenAddr, nil
	}
	return net.JoinHostPort(hostAddress(ip == nil || ip.To4() != nil), port), nil
}

// interfaceAddrs is net.InterfaceAddrs, swapped by tests.
var interfaceAddrs = net.InterfaceAddrs

// hostAddress returns the machine's first global unicast address,
// preferring IPv4 if v4, or loopback if there is none.
func hostAddress(v4 bool) string {
	addrs, _ := interfaceAddrs()
	var v6 string
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || !ipn.IP.IsGlobalUnicast() {
			continue
		}
		if ipn.IP.To4() != nil {
			if v4 {
				return ipn.IP.String()
			}
		} else if v6 == "" {
			v6 = ipn.IP.String()
		}
	}
	switch {
	case v6 != "" && !v4:
		return v6
	case v4:
		return "127.0.0.1"
	}
	return "::1"
}

// publish registers every service for the listener or packet socket l,
// whose address is a, in the background.
func (s *Server) publish(l any, a net.Addr) {
	base, ok, err := s.endpointOf(a)
	if err != nil {
		s.opts.logger.Error("kiev: cannot work out the address to register; pass WithAdvertise", "listener", a.String(), "err", err)
		return
	}
	if !ok {
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.advertised[l] = base
	var ins []registry.Instance
	for name := range s.services {
		if isBuiltin(name) {
			continue
		}
		in := base
		in.Service = name
		ins = append(ins, in)
	}
	s.registerAll(ins)
	s.mu.Unlock()
}

// publishService registers a service added while listeners serve; s.mu
// is held.
func (s *Server) publishService(name string) {
	if s.closed || isBuiltin(name) {
		return
	}
	var ins []registry.Instance
	for _, base := range s.advertised {
		in := base
		in.Service = name
		ins = append(ins, in)
	}
	s.registerAll(ins)
}

// registerAll registers ins in the background, unless the server has
// withdrawn its registrations for good; s.mu is held, so that no
// registration starts while unpublish waits for those running.
func (s *Server) registerAll(ins []registry.Instance) {
	if len(ins) == 0 || s.regClosed {
		return
	}
	reg := s.registryOf()
	s.regPending.Add(int64(len(ins)))
	s.regWG.Go(func() {
		for _, in := range ins {
			ctx, cancel := context.WithTimeout(s.regCtx, registerTimeout)
			err := reg.Register(ctx, in)
			cancel()
			s.regPending.Add(-1)
			if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				s.regFailed.Store(&err) // past a deadline, the registry keeps trying
			}
			switch {
			case err == nil, errors.Is(err, context.Canceled):
			case errors.Is(err, context.DeadlineExceeded):
				s.opts.logger.Warn("kiev: registry slow to confirm the registration; it keeps trying", "service", in.Service, "addr", in.Address, "after", registerTimeout)
			default:
				s.opts.logger.Error("kiev: registration failed; clients will not find this server", "service", in.Service, "addr", in.Address, "err", err)
			}
		}
	})
}

// unpublish deregisters what was registered for the listeners (or packet
// sockets) given, or for all of them if ls is empty, within ctx and
// deregisterTimeout.
func (s *Server) unpublish(ctx context.Context, ls ...any) {
	s.mu.Lock()
	all := len(ls) == 0
	if all {
		s.regClosed = true
		for l := range s.advertised {
			ls = append(ls, l)
		}
	}
	var ins []registry.Instance
	for _, l := range ls {
		base, ok := s.advertised[l]
		if !ok {
			continue
		}
		delete(s.advertised, l)
		for name := range s.services {
			in := base
			in.Service = name
			ins = append(ins, in)
		}
	}
	s.mu.Unlock()
	if all {
		// Registrations still running must end before their withdrawal.
		s.regCancel()
		s.regWG.Wait()
	}
	if len(ins) == 0 {
		return
	}
	reg := s.registryOf()
	ctx, cancel := context.WithTimeout(ctx, deregisterTimeout)
	defer cancel()
	for _, in := range ins {
		if err := reg.Deregister(ctx, in); err != nil {
			s.opts.logger.Warn("kiev: deregistration failed; clients may still pick this server until its registry session ends", "service", in.Service, "addr", in.Address, "err", err)
		}
	}
}

// isBuiltin reports whether a service is one kiev registers on every
// server (such as kiev.Reflection), which clients never discover by name.
func isBuiltin(service string) bool { return strings.HasPrefix(service, "kiev.") }

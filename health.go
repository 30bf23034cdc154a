package kiev

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/health"
)

// registerHealthService adds the health service (health.ServiceName) to a
// new server, as registerReflection adds the reflection service.
func (s *Server) registerHealthService() {
	s.health = health.NewReporter(healthSource{s}, &s.hooks.checks)
	s.registerBuiltin(health.ServiceName, "Health", s.health.Service())
}

// healthSource is what the health service asks of a Server.
type healthSource struct{ s *Server }

func (h healthSource) HasService(name string) bool {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	_, ok := h.s.services[name]
	return ok
}

func (h healthSource) NotFound(name string) error {
	return &ServerError{Code: CodeNotFound, Message: h.s.unknownService(name)}
}

// SetHealth sets the health the server reports for service, or for the
// whole server if service is empty, as grpc-go's health server's
// SetServingStatus does: health.NotServing while the server warms up,
// say. health.ServingUnknown clears what was set, so the checks decide
// again. A server that shuts down reports health.NotServing whatever was
// set.
func (s *Server) SetHealth(service string, st health.ServingStatus) {
	s.health.Set(service, st)
}

// HealthOf reports the health of service, or of the whole server if
// service is empty, and why it does not serve: the failing checks, for
// example. It runs the health checks at most once per health.CacheTTL. A
// service the server does not have is health.ServiceUnknown.
func (s *Server) HealthOf(ctx context.Context, service string) (health.ServingStatus, string) {
	return s.health.Of(ctx, service)
}

// RegisterHealth adds a health check under name, such as "redis" for a
// check that pings Redis. Health runs every check; the status page and
// the health service run them at most once per health.CacheTTL. A check
// must return within its ctx. Registering a name again replaces its
// check.
func (s *Server) RegisterHealth(name string, check func(ctx context.Context) error) {
	s.hooks.checks.Add(name, check)
}

// Health runs every registered health check at once, each within ctx, and
// returns their results sorted by name.
func (s *Server) Health(ctx context.Context) []health.Result {
	return s.hooks.checks.Run(ctx)
}

// readiness reports whether the server is ready for calls, as /readyz
// answers: its registrations are confirmed, and it serves (HealthOf);
// if not, why not.
func (s *Server) readiness(ctx context.Context) (bool, []string) {
	var why []string
	if n := s.regPending.Load(); n > 0 {
		why = append(why, fmt.Sprintf("%d registrations with the registry are not confirmed yet", n))
	}
	if s.regFailed.Load() != nil {
		why = append(why, "a registration with the registry failed; the server's log says why")
	}
	if st, reason := s.HealthOf(ctx, ""); st != health.Serving {
		why = append(why, st.String()+": "+reason)
	}
	return len(why) == 0, why
}

// watchHealth checks ep's health every interval until ep closes, and
// rebuilds the balancer when ep starts or stops serving.
func (ep *endpoint) watchHealth(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), interval)
		st, err := ep.checkHealth(ctx)
		cancel()
		notServing := err == nil && st == health.NotServing
		if ep.notServing.Swap(notServing) != notServing {
			if notServing {
				ep.c.opts.logger.Warn("kiev: provider out of balancing: its health service says it does not serve", "service", ep.inst.Service, "addr", ep.inst.Address)
			} else {
				ep.c.opts.logger.Info("kiev: provider back in balancing: its health service says it serves", "service", ep.inst.Service, "addr", ep.inst.Address)
			}
			if g := ep.c.group; g != nil {
				g.reconsider()
			}
		}
		select {
		case <-t.C:
		case <-ep.gone:
			return
		}
	}
}

// checkHealth asks ep's server for its health once.
func (ep *endpoint) checkHealth(ctx context.Context) (health.ServingStatus, error) {
	var reply health.CheckResponse
	call := &Call{ServiceMethod: health.ServiceName + ".Check", Args: health.CheckRequest{}, Reply: &reply, codec: codec.Msgpack, signal: make(chan *Call, 1)}
	ctx = WithPriority(ctx, MaxPriority)
	if err := ep.c.roundTrip(ctx, ep, call); err != nil {
		if !errors.Is(err, ErrNotFound) && ctx.Err() == nil {
			ep.c.opts.logger.Debug("kiev: health check of a provider failed", "addr", ep.inst.Address, "err", err)
		}
		return health.ServingUnknown, err
	}
	return reply.Status, nil
}

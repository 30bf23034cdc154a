package kiev

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kievrpc/kiev/codec"
)

// HealthService is the name of the health service every Server serves,
// over TCP, UDP and HTTP, after gRPC's grpc.health.v1.Health: its Check
// method answers whether the server, or one of its services, serves, and
// Watch waits for that to change. Call it at MaxPriority, so that an
// overloaded server sheds it last:
//
//	ctx := kiev.WithPriority(ctx, kiev.MaxPriority)
//	var r kiev.HealthCheckResponse
//	err := c.Call(ctx, kiev.HealthService+".Check", kiev.HealthCheckRequest{}, &r)
//
// A server serves (Serving) while it is not shutting down, the
// checks registered with RegisterHealth pass, and SetHealth has not said
// otherwise. The admin server's /readyz and /healthz answer the same for
// Kubernetes probes; Client option WithHealthCheck keeps the providers
// that do not serve out of balancing.
const HealthService = "kiev.Health"

// ServingStatus is a server's or a service's health, as grpc.health.v1
// names it.
type ServingStatus int

// The serving statuses.
const (
	// ServingUnknown is the zero value: nothing is known. A server never
	// answers it; a Watch that gives it as Last asks for the status at
	// once.
	ServingUnknown ServingStatus = iota
	// Serving: the server, or the service, takes calls.
	Serving
	// NotServing: it does not: it is shutting down, a health check
	// fails, or SetHealth said so.
	NotServing
	// ServiceUnknown: the server has no such service. Only Watch
	// answers it; Check fails with ErrNotFound instead.
	ServiceUnknown
)

var healthNames = [...]string{"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"}

// String returns the status's grpc.health.v1 name, such as "SERVING".
func (h ServingStatus) String() string {
	if h >= 0 && int(h) < len(healthNames) {
		return healthNames[h]
	}
	return fmt.Sprintf("ServingStatus(%d)", int(h))
}

// MarshalText encodes the status as its name, so that it reads as
// "SERVING" in JSON, over HTTP and in the kiev command.
func (h ServingStatus) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText decodes a status from its name.
func (h *ServingStatus) UnmarshalText(b []byte) error {
	i := slices.Index(healthNames[:], strings.ToUpper(string(b)))
	if i < 0 {
		return fmt.Errorf("kiev: %q is not a health status; want one of %s", b, strings.Join(healthNames[:], ", "))
	}
	*h = ServingStatus(i)
	return nil
}

// HealthCheckRequest asks for the health of Service, or of the whole
// server if it is empty.
type HealthCheckRequest struct {
	Service string
}

// HealthCheckResponse is the answer of Check and Watch.
type HealthCheckResponse struct {
	Status ServingStatus
}

// HealthWatchRequest asks Watch for the health of Service (the whole
// server if empty) once it differs from Last, the status the caller knows.
type HealthWatchRequest struct {
	Service string
	Last    ServingStatus
}

// healthState is a Server's own say in its health: what SetHealth set,
// and whether it is shutting down.
type healthState struct {
	mu       sync.Mutex               // guards the fields below
	set      map[string]ServingStatus // by SetHealth; "" is the server
	stopping bool                     // Shutdown or Close began
	changed  chan struct{}            // closed, and made anew, on every change
}

// changedLocked returns the channel closed at the next change; mu is held.
func (h *healthState) changedLocked() chan struct{} {
	if h.changed == nil {
		h.changed = make(chan struct{})
	}
	return h.changed
}

// notifyLocked wakes the watchers; mu is held.
func (h *healthState) notifyLocked() {
	if h.changed != nil {
		close(h.changed)
		h.changed = nil
	}
}

// SetHealth sets the health the server reports for service, or for the
// whole server if service is empty, as grpc-go's health server's
// SetServingStatus does: NotServing while the server warms up, say.
// ServingUnknown clears what was set, so the checks decide again. A
// server that shuts down reports NotServing whatever was set.
func (s *Server) SetHealth(service string, st ServingStatus) {
	h := &s.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if st == ServingUnknown {
		delete(h.set, service)
	} else {
		if h.set == nil {
			h.set = make(map[string]ServingStatus)
		}
		h.set[service] = st
	}
	h.notifyLocked()
}

// stopServing makes the server report NotServing from now on: its
// Shutdown or Close has begun.
func (s *Server) stopServing() {
	h := &s.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopping {
		h.stopping = true
		h.notifyLocked()
	}
}

// HealthOf reports the health of service, or of the whole server if
// service is empty, and why it does not serve: the failing checks, for
// example. It runs the health checks at most once per HealthCacheTTL. A
// service the server does not have is ServiceUnknown.
func (s *Server) HealthOf(ctx context.Context, service string) (ServingStatus, string) {
	st, why, _ := s.healthOf(ctx, service)
	return st, why
}

// healthOf is HealthOf, with the channel closed at the next change of
// what SetHealth and shutting down decide (the checks' results change on
// their own; watchers poll them).
func (s *Server) healthOf(ctx context.Context, service string) (ServingStatus, string, <-chan struct{}) {
	h := &s.health
	h.mu.Lock()
	changed := h.changedLocked()
	stopping := h.stopping
	set, isSet := h.set[service]
	server, serverSet := h.set[""]
	h.mu.Unlock()
	switch {
	case service != "" && !isSet && !s.hasService(service):
		return ServiceUnknown, "no service " + service, changed
	case stopping:
		return NotServing, "the server is shutting down", changed
	case isSet:
		return set, "set by SetHealth", changed
	case serverSet && server != Serving:
		return server, "the server's health is set by SetHealth", changed
	}
	var failing []string
	for _, r := range s.cachedHealth(ctx) {
		if r.Err != nil {
			failing = append(failing, r.Name)
		}
	}
	if len(failing) > 0 {
		return NotServing, "failing health checks: " + strings.Join(failing, ", "), changed
	}
	return Serving, "", changed
}

// hasService reports whether the server serves the service named name.
func (s *Server) hasService(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.services[name]
	return ok
}

// healthService is the receiver of HealthService.
type healthService struct{ s *Server }

// Check answers the health of req.Service, or of the whole server.
func (hs *healthService) Check(ctx context.Context, req HealthCheckRequest, reply *HealthCheckResponse) error {
	st, _, _ := hs.s.healthOf(ctx, req.Service)
	if st == ServiceUnknown {
		return &ServerError{Code: CodeNotFound, Message: hs.s.unknownService(req.Service)}
	}
	reply.Status = st
	return nil
}

// maxHealthWatch bounds how long one Watch call waits for a change; the
// caller calls again.
const maxHealthWatch = 30 * time.Second

// Watch answers the health of req.Service, or of the whole server, once
// it differs from req.Last: at once if it does already; otherwise when it
// changes, or shortly before the call's deadline or maxHealthWatch
// passes, with the status unchanged. The caller then watches again. The
// health checks' results are looked at every HealthCacheTTL.
func (hs *healthService) Watch(ctx context.Context, req HealthWatchRequest, reply *HealthCheckResponse) error {
	wait := maxHealthWatch
	if d, ok := ctx.Deadline(); ok {
		// Answer a little before the deadline, so the answer arrives.
		wait = min(wait, time.Until(d)*9/10)
	}
	end := time.NewTimer(wait)
	defer end.Stop()
	tick := time.NewTicker(HealthCacheTTL)
	defer tick.Stop()
	for {
		st, _, changed := hs.s.healthOf(ctx, req.Service)
		reply.Status = st
		if st != req.Last {
			return nil
		}
		select {
		case <-changed:
		case <-tick.C:
		case <-end.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// registerHealthService adds HealthService to a new server, as
// registerReflection adds the reflection service.
func (s *Server) registerHealthService() {
	s.registerBuiltin(HealthService, "Health", &healthService{s: s})
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
	if st, reason := s.HealthOf(ctx, ""); st != Serving {
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
		notServing := err == nil && st == NotServing
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
func (ep *endpoint) checkHealth(ctx context.Context) (ServingStatus, error) {
	var reply HealthCheckResponse
	call := &Call{ServiceMethod: HealthService + ".Check", Args: HealthCheckRequest{}, Reply: &reply, codec: codec.Msgpack, signal: make(chan *Call, 1)}
	ctx = WithPriority(ctx, MaxPriority)
	if err := ep.c.roundTrip(ctx, ep, call); err != nil {
		if !errors.Is(err, ErrNotFound) && ctx.Err() == nil {
			ep.c.opts.logger.Debug("kiev: health check of a provider failed", "addr", ep.inst.Address, "err", err)
		}
		return ServingUnknown, err
	}
	return reply.Status, nil
}

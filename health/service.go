package health

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// ServiceName is the name of the health service every kiev.Server
// serves, over TCP, UDP and HTTP, after gRPC's grpc.health.v1.Health.
// Its methods are
//
//	Check(ctx, CheckRequest, *CheckResponse) // the health now
//	Watch(ctx, WatchRequest, *CheckResponse) // the health once it differs from what the caller knows
//
// A server serves (Serving) while it is not shutting down, the checks
// given to its RegisterHealth pass, and its SetHealth has not said
// otherwise. The admin server's /readyz and /healthz answer the same for
// Kubernetes probes; the Client option kiev.WithHealthCheck keeps the
// providers that do not serve out of balancing.
const ServiceName = "kiev.Health"

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
	// fails, or Reporter.Set (Server.SetHealth) said so.
	NotServing
	// ServiceUnknown: the server has no such service. Only Watch
	// answers it; Check fails with kiev.ErrNotFound instead.
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

// CheckRequest asks for the health of Service, or of the whole
// server if it is empty.
type CheckRequest struct {
	Service string
}

// CheckResponse is the answer of Check and Watch.
type CheckResponse struct {
	Status ServingStatus
}

// WatchRequest asks Watch for the health of Service (the whole
// server if empty) once it differs from Last, the status the caller knows.
type WatchRequest struct {
	Service string
	Last    ServingStatus
}

// Server is what a Reporter asks of the server it reports on. Its
// methods are called from the health service's handlers, at any time and
// from many goroutines at once.
type Server interface {
	// HasService reports whether the server has a service named name.
	HasService(name string) bool
	// NotFound returns the error that Check answers for a service the
	// server does not have.
	NotFound(name string) error
}

// Reporter holds a server's health: its own say (Set), whether it is
// shutting down (Stop), and its checks; Of tells the health from them,
// and Service answers for it. Its methods are safe for concurrent use.
type Reporter struct {
	srv    Server
	checks *Checks

	mu       sync.Mutex               // guards the fields below
	set      map[string]ServingStatus // by Set; "" is the server
	stopping bool                     // Stop was called
	changed  chan struct{}            // closed, and made anew, on every change
}

// NewReporter returns the Reporter of srv, whose health checks are
// checks.
func NewReporter(srv Server, checks *Checks) *Reporter {
	return &Reporter{srv: srv, checks: checks}
}

// changedLocked returns the channel closed at the next change.
// REQUIRES r.mu is held.
func (r *Reporter) changedLocked() chan struct{} {
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	return r.changed
}

// notifyLocked wakes the watchers. REQUIRES r.mu is held.
func (r *Reporter) notifyLocked() {
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// Set sets the health reported for service, or for the whole server if
// service is empty: NotServing while the server warms up, say.
// ServingUnknown clears what was set, so the checks decide again. After
// Stop, the server is NotServing whatever was set.
func (r *Reporter) Set(service string, st ServingStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st == ServingUnknown {
		delete(r.set, service)
	} else {
		if r.set == nil {
			r.set = make(map[string]ServingStatus)
		}
		r.set[service] = st
	}
	r.notifyLocked()
}

// Stop makes the server report NotServing from now on: it is shutting
// down.
func (r *Reporter) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stopping {
		r.stopping = true
		r.notifyLocked()
	}
}

// Of reports the health of service, or of the whole server if service is
// empty, and why it does not serve: the failing checks, for example. It
// runs the checks at most once per CacheTTL. A service the server does
// not have is ServiceUnknown.
func (r *Reporter) Of(ctx context.Context, service string) (ServingStatus, string) {
	st, why, _ := r.of(ctx, service)
	return st, why
}

// of is Of, with the channel closed at the next change of what Set and
// Stop decide (the checks' results change on their own; watchers poll
// them).
func (r *Reporter) of(ctx context.Context, service string) (ServingStatus, string, <-chan struct{}) {
	r.mu.Lock()
	changed := r.changedLocked()
	stopping := r.stopping
	set, isSet := r.set[service]
	server, serverSet := r.set[""]
	r.mu.Unlock()
	switch {
	case service != "" && !isSet && !r.srv.HasService(service):
		return ServiceUnknown, "no service " + service, changed
	case stopping:
		return NotServing, "the server is shutting down", changed
	case isSet:
		return set, "set by SetHealth", changed
	case serverSet && server != Serving:
		return server, "the server's health is set by SetHealth", changed
	}
	var failing []string
	for _, res := range r.checks.Cached(ctx) {
		if res.Err != nil {
			failing = append(failing, res.Name)
		}
	}
	if len(failing) > 0 {
		return NotServing, "failing health checks: " + strings.Join(failing, ", "), changed
	}
	return Serving, "", changed
}

// Service returns the receiver of ServiceName that answers for r.
func (r *Reporter) Service() *Service { return &Service{r: r} }

// Service is the receiver of ServiceName, which a server registers as its
// own.
type Service struct{ r *Reporter }

// Check answers the health of req.Service, or of the whole server.
func (hs *Service) Check(ctx context.Context, req CheckRequest, reply *CheckResponse) error {
	st, _, _ := hs.r.of(ctx, req.Service)
	if st == ServiceUnknown {
		return hs.r.srv.NotFound(req.Service)
	}
	reply.Status = st
	return nil
}

// maxWatch bounds how long one Watch call waits for a change; the caller
// calls again.
const maxWatch = 30 * time.Second

// Watch answers the health of req.Service, or of the whole server, once
// it differs from req.Last: at once if it does already; otherwise when it
// changes, or shortly before the call's deadline or 30 seconds pass, with
// the status unchanged. The caller then watches again. The health checks'
// results are looked at every CacheTTL.
func (hs *Service) Watch(ctx context.Context, req WatchRequest, reply *CheckResponse) error {
	wait := maxWatch
	if d, ok := ctx.Deadline(); ok {
		// Answer a little before the deadline, so the answer arrives.
		wait = min(wait, time.Until(d)*9/10)
	}
	end := time.NewTimer(wait)
	defer end.Stop()
	tick := time.NewTicker(CacheTTL)
	defer tick.Stop()
	for {
		st, _, changed := hs.r.of(ctx, req.Service)
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

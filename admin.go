package kiev

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kievrpc/kiev/admin"
)

// AdminHandler returns the server's admin pages (see admin.NewHandler),
// to mount on your own mux:
//
//   - /: the status page, as at /debug/kiev, with links to the rest;
//   - /metrics: Prometheus metrics of the server, of the process's
//     Clients, and of the default Prometheus registry (the Go runtime, and
//     kiev's database clients unless told otherwise);
//   - /debug/kiev: the status page, rendered on the server with no
//     external assets (its script only refreshes it every 2 seconds):
//     health checks (see RegisterHealth); charts of the last 15 minutes
//     (calls and errors per second, p50/p99, drops by reason and by
//     priority, each method's adaptive limit and calls in flight),
//     sampled every 5 seconds from the first Serve; services and methods
//     with calls, errors, rates over the last minute (or the time since
//     start, if shorter) and p50/p99 latency, and each method's adaptive
//     limit; the scheduler's queue by priority and drops by reason; the
//     providers of every dialed service with their balancer's view;
//   - /debug/kiev?format=json: the same as JSON (see admin.Status), for
//     tools such as the kiev command's stat;
//   - /healthz: a liveness probe, 200 "ok" while the admin server answers;
//   - /readyz: a readiness probe, 200 "ready" once the registry confirmed
//     the server's registrations while it is not shutting down and its
//     health checks pass (see Server.HealthOf), else 503 with the reasons.
//     WithAdminAuth does not guard the two probes, which Kubernetes sends
//     without credentials; they show no more than the failing checks'
//     names.
func (s *Server) AdminHandler() http.Handler {
	var g prometheus.Gatherer = s.registry
	if gg, ok := s.opts.metrics.(prometheus.Gatherer); ok {
		g = gg
	}
	return admin.NewHandler(adminSource{s}, g, s.opts.adminAuth)
}

// registerAdminService adds the admin service (admin.ServiceName) to a
// new server, as registerReflection adds the reflection service, so that
// its status can be read on its RPC addresses (kiev stat host:port),
// unless WithAdminAuth guards it.
func (s *Server) registerAdminService() {
	var refuse error
	if s.opts.adminAuth != nil {
		refuse = &ServerError{Code: CodeUnauthenticated, Message: "kiev: the status is guarded by WithAdminAuth; read it at the admin address, with credentials"}
	}
	s.registerBuiltin(admin.ServiceName, "Admin", admin.NewService(adminSource{s}, refuse))
}

// adminSource is what the admin pages read of a Server.
type adminSource struct{ s *Server }

func (a adminSource) Status(ctx context.Context) admin.Status    { return a.s.Status(ctx) }
func (a adminSource) Ready(ctx context.Context) (bool, []string) { return a.s.readiness(ctx) }
func (a adminSource) History() *admin.History                    { return &a.s.hist.History }

// startAdmin starts the admin HTTP server of WithAdmin, once.
// It also starts sampling the server's history, until the Serve call
// that calls it calls doneServing.
func (s *Server) startAdmin() {
	s.startHistory()
	if s.opts.admin == "" {
		return
	}
	s.adminOnce.Do(func() {
		hs, err := admin.Serve(s.opts.admin, s.AdminHandler(), s.opts.logger)
		if err != nil {
			s.opts.logger.Error("kiev: admin pages not served: cannot listen", "addr", s.opts.admin, "err", err)
			return
		}
		s.mu.Lock()
		s.adminSrv = hs
		s.mu.Unlock()
	})
}

// stopAdmin stops the admin HTTP server, and the sampling of the
// server's history.
func (s *Server) stopAdmin(ctx context.Context) {
	s.stopHistory()
	s.adminOnce.Do(func() {}) // none may start after this
	s.mu.Lock()
	hs := s.adminSrv
	s.mu.Unlock()
	if hs != nil {
		hs.Shutdown(ctx)
	}
}

// AdminAddr returns the address the admin pages of WithAdmin are served
// on, or "" if they are not.
func (s *Server) AdminAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.adminSrv == nil {
		return ""
	}
	return s.adminSrv.Addr()
}

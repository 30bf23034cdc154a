package kiev

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// WithAdmin makes a Server serve its admin pages over HTTP on addr, such
// as "127.0.0.1:9090", from its first Serve (or ServePacket) until it
// stops; see Server.AdminHandler. Server.AdminAddr reports the address,
// which helps with ":0".
func WithAdmin(addr string) ServerOption {
	return serverOption(func(o *serverOptions) { o.admin = addr })
}

// WithMetrics registers the Server's Prometheus collectors, and those of
// the process's Clients, with reg (for instance prometheus.DefaultRegisterer,
// to serve them from promhttp.Handler on your own mux). Without it they go
// to a registry of the server's own, which the admin pages serve.
func WithMetrics(reg prometheus.Registerer) ServerOption {
	return serverOption(func(o *serverOptions) { o.metrics = reg })
}

// registerMetrics registers the server's collectors; already registered
// ones (another server of the process sharing reg) are left as they are.
func (s *Server) registerMetrics() {
	s.registry = prometheus.NewRegistry()
	reg := s.opts.metrics
	if reg == nil {
		reg = s.registry
	}
	for _, c := range []prometheus.Collector{serverCollector{s}, clientCollector{}} {
		if err := reg.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			s.opts.logger.Warn("kiev: registering metrics failed", "err", err)
		}
	}
}

// AdminHandler returns the server's admin pages, to mount on your own
// mux:
//
//   - /metrics: Prometheus metrics of the server, of the process's
//     Clients, and of the default Prometheus registry (the Go runtime, and
//     kiev's database clients unless told otherwise);
//   - /debug/kiev: a live status page, with no external assets: services
//     and methods with calls, errors, rate and p50/p99 latency over the
//     last minute; the scheduler's queue by priority and drops by reason;
//     the providers of every dialed service with their balancer's view;
//     health checks (see RegisterHealth);
//   - /debug/kiev?format=json: the same as JSON (see Status), for tools
//     such as the kiev command's stat.
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	var g prometheus.Gatherer = s.registry
	if gg, ok := s.opts.metrics.(prometheus.Gatherer); ok {
		g = gg
	}
	gatherers := prometheus.Gatherers{g}
	if g != prometheus.DefaultGatherer {
		gatherers = append(gatherers, prometheus.DefaultGatherer)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{ErrorLog: nil}))
	mux.HandleFunc("GET /debug/kiev", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("format") == "json" {
			ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
			defer cancel()
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			_ = enc.Encode(s.Status(ctx))
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(statusPage)
	})
	return mux
}

//go:embed admin.html
var statusPage []byte

// startAdmin starts the admin HTTP server of WithAdmin, once.
func (s *Server) startAdmin() {
	if s.opts.admin == "" {
		return
	}
	s.adminOnce.Do(func() {
		l, err := net.Listen("tcp", s.opts.admin)
		if err != nil {
			s.opts.logger.Error("kiev: admin pages not served: cannot listen", "addr", s.opts.admin, "err", err)
			return
		}
		hs := &http.Server{Handler: s.AdminHandler(), ReadHeaderTimeout: 5 * time.Second}
		s.mu.Lock()
		s.adminAddr = l.Addr().String()
		s.adminSrv = hs
		s.mu.Unlock()
		s.adminWG.Go(func() { _ = hs.Serve(l) })
	})
}

// stopAdmin stops the admin HTTP server.
func (s *Server) stopAdmin(ctx context.Context) {
	s.adminOnce.Do(func() {}) // none may start after this
	s.mu.Lock()
	hs := s.adminSrv
	s.mu.Unlock()
	if hs != nil {
		if hs.Shutdown(ctx) != nil {
			hs.Close()
		}
	}
	s.adminWG.Wait()
}

// AdminAddr returns the address the admin pages of WithAdmin are served
// on, or "" if they are not.
func (s *Server) AdminAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.adminAddr
}

package kiev

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"html/template"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kievrpc/kiev/internal/figure"
)

// Limits of the admin HTTP server of WithAdmin.
const (
	AdminMaxConns     = 64
	AdminReadTimeout  = 10 * time.Second
	AdminWriteTimeout = 30 * time.Second
	AdminIdleTimeout  = 60 * time.Second
)

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
//   - /: the status page, as at /debug/kiev, with links to the rest;
//   - /metrics: Prometheus metrics of the server, of the process's
//     Clients, and of the default Prometheus registry (the Go runtime, and
//     kiev's database clients unless told otherwise);
//   - /debug/kiev: the status page, rendered on the server with no
//     external assets (its script only refreshes it every 2 seconds):
//     health checks (see RegisterHealth); services and methods with
//     calls, errors, rate and p50/p99 latency over the last minute, and
//     each method's adaptive limit; the scheduler's queue by priority and
//     drops by reason; the providers of every dialed service with their
//     balancer's view;
//   - /debug/kiev?format=json: the same as JSON (see Status), for tools
//     such as the kiev command's stat;
//   - /healthz: a liveness probe, 200 "ok" while the admin server answers;
//   - /readyz: a readiness probe, 200 "ready" once the registry confirmed
//     the server's registrations while it is not shutting down and its
//     health checks pass (see Server.HealthOf), else 503 with the reasons.
//     WithAdminAuth does not guard the two probes, which Kubernetes sends
//     without credentials; they show no more than the failing checks'
//     names.
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
	mux.Handle("GET /debug/kiev", statusHandler{s, "../"})
	mux.Handle("GET /{$}", statusHandler{s, ""})
	mux.HandleFunc("GET /healthz", s.serveLiveness)
	mux.HandleFunc("GET /readyz", s.serveReadiness)
	if check := s.opts.adminAuth; check != nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
				// Probes carry no credentials; the answers say no more
				// than a status word and the names of failing checks.
				mux.ServeHTTP(w, r)
				return
			}
			if err := check(r); err != nil {
				w.Header().Set("Cache-Control", "no-store")
				http.Error(w, "kiev admin: unauthorized: "+err.Error(), http.StatusUnauthorized)
				return
			}
			mux.ServeHTTP(w, r)
		})
	}
	return mux
}

// serveLiveness answers /healthz, a liveness probe: 200 while the admin
// server answers at all, so that Kubernetes restarts only a process that
// is stuck. A server that shuts down is alive still: it drains.
func (s *Server) serveLiveness(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}

// serveReadiness answers /readyz, a readiness probe: 200 "ready" when the
// registry has confirmed the server's registrations, it is not shutting
// down and its health checks pass (HealthOf); else 503 with a line for
// each reason, so that Kubernetes sends it no traffic and holds a rolling
// update until it is ready.
func (s *Server) serveReadiness(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	ok, why := s.readiness(ctx)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if ok {
		_, _ = io.WriteString(w, "ready\n")
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = io.WriteString(w, "not ready:\n")
	for _, reason := range why {
		_, _ = io.WriteString(w, "  "+reason+"\n")
	}
}

// statusHandler serves the status page and its JSON twin.
type statusHandler struct {
	s    *Server
	base string // the way from the page to the admin root: "" or "../"
}

func (h statusHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	st := h.s.Status(ctx)
	w.Header().Set("Cache-Control", "no-store")
	if r.URL.Query().Get("format") == "json" {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
		return
	}
	var b bytes.Buffer
	if err := statusPage.Execute(&b, statusPageData{st, h.base, healthOK(st.Health)}); err != nil {
		http.Error(w, "kiev: rendering the status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

// statusPageData is what the status page shows.
type statusPageData struct {
	Status
	Base     string // the admin root, relative to the page
	HealthOK bool   // every health check passes, as with none
}

// healthOK tells whether every check passed.
func healthOK(checks []HealthStatus) bool {
	for _, c := range checks {
		if !c.OK {
			return false
		}
	}
	return true
}

//go:embed admin.html
var statusPageHTML string

var statusPage = template.Must(template.New("status").Funcs(template.FuncMap{
	"num":    figure.Format,
	"uptime": func(sec float64) string { return (time.Duration(sec) * time.Second).String() },
	"clock":  func(t time.Time) string { return t.Format("2006-01-02 15:04:05 MST") },
}).Parse(statusPageHTML))

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
		hs := &http.Server{
			Handler:           s.AdminHandler(),
			ReadHeaderTimeout: AdminReadTimeout,
			ReadTimeout:       AdminReadTimeout,
			WriteTimeout:      AdminWriteTimeout,
			IdleTimeout:       AdminIdleTimeout,
			ErrorLog:          slog.NewLogLogger(s.opts.logger.Handler(), slog.LevelDebug),
		}
		s.mu.Lock()
		s.adminAddr = l.Addr().String()
		s.adminSrv = hs
		s.mu.Unlock()
		s.adminWG.Go(func() { _ = hs.Serve(newLimitListener(l, AdminMaxConns)) })
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

// limitListener accepts at most n connections at a time: once n are open,
// Accept waits for one to close, and the rest wait in the kernel's
// backlog.
type limitListener struct {
	net.Listener
	slots chan struct{}
	done  chan struct{}
	once  sync.Once
}

func newLimitListener(l net.Listener, n int) *limitListener {
	return &limitListener{Listener: l, slots: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	nc, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: nc, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back once, when it is closed.
type limitConn struct {
	net.Conn
	release func()
	once    sync.Once
}

func (c *limitConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// AdminAddr returns the address the admin pages of WithAdmin are served
// on, or "" if they are not.
func (s *Server) AdminAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.adminAddr
}

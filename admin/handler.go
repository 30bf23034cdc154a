package admin

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"html/template"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kievrpc/kiev/internal/figure"
)

// Server is what the admin pages read of the kiev server they show. Its
// methods are called from the pages' handlers, at any time and from many
// goroutines at once, with the request's context bounded to 5 seconds.
type Server interface {
	// Status returns the server's status.
	Status(ctx context.Context) Status
	// Ready reports whether the server is ready for calls and, if not,
	// why not, one reason a line.
	Ready(ctx context.Context) (ok bool, why []string)
	// History returns the server's recent history, which the status
	// page charts, or nil if it keeps none.
	History() *History
}

// NewHandler returns the admin pages of srv:
//
//   - /: the status page, as at /debug/kiev, with links to the rest;
//   - /metrics: the Prometheus metrics of metrics and of the default
//     Prometheus registry (the Go runtime, and kiev's database clients
//     unless told otherwise);
//   - /debug/kiev: the status page, rendered on the server with no
//     external assets (its script only refreshes it every 2 seconds),
//     with charts of srv's History drawn as inline SVG;
//   - /debug/kiev?format=json: the same as JSON (see Status), for tools
//     such as the kiev command's stat;
//   - /healthz: a liveness probe, 200 "ok" while the admin server
//     answers at all, so that Kubernetes restarts only a process that is
//     stuck (a server that shuts down is alive still: it drains);
//   - /readyz: a readiness probe, 200 "ready" while srv is Ready, else
//     503 with the reasons, so that Kubernetes sends it no traffic and
//     holds a rolling update until it is ready.
//
// If auth is not nil, it is called for every request but the two
// probes, which Kubernetes sends without credentials and which show no
// more than a status word and the reasons; a request it returns an error
// for is answered 401 Unauthorized with the error's text.
func NewHandler(srv Server, metrics prometheus.Gatherer, auth func(r *http.Request) error) http.Handler {
	mux := http.NewServeMux()
	gatherers := prometheus.Gatherers{metrics}
	if metrics != prometheus.DefaultGatherer {
		gatherers = append(gatherers, prometheus.DefaultGatherer)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{ErrorLog: nil}))
	mux.Handle("GET /debug/kiev", statusHandler{srv, "../"})
	mux.Handle("GET /{$}", statusHandler{srv, ""})
	mux.HandleFunc("GET /healthz", serveLiveness)
	mux.Handle("GET /readyz", readiness{srv})
	if auth == nil {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			// Probes carry no credentials; the answers say no more
			// than a status word and the names of failing checks.
			mux.ServeHTTP(w, r)
			return
		}
		if err := auth(r); err != nil {
			w.Header().Set("Cache-Control", "no-store")
			http.Error(w, "kiev admin: unauthorized: "+err.Error(), http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// serveLiveness answers /healthz: 200 while the admin server answers.
func serveLiveness(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}

// readiness answers /readyz: 200 "ready" when the server is Ready; else
// 503 with a line for each reason.
type readiness struct{ srv Server }

func (h readiness) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	ok, why := h.srv.Ready(ctx)
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
	srv  Server
	base string // the way from the page to the admin root: "" or "../"
}

func (h statusHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	st := h.srv.Status(ctx)
	w.Header().Set("Cache-Control", "no-store")
	if r.URL.Query().Get("format") == "json" {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
		return
	}
	var b bytes.Buffer
	if err := statusPage.Execute(&b, statusPageData{st, h.base, healthOK(st.Health), buildCharts(h.srv.History(), st.Time)}); err != nil {
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
	Charts   charts // the last 15 minutes
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
	"num":     figure.Format,
	"uptime":  func(sec float64) string { return (time.Duration(sec) * time.Second).String() },
	"clock":   func(t time.Time) string { return t.Format("2006-01-02 15:04:05 MST") },
	"chartW":  func() int { return chartW },
	"chartH":  func() int { return chartH },
	"half":    func(v int) int { return v / 2 },
	"minutes": func(d time.Duration) string { return strconv.Itoa(int(d.Minutes())) + " min" },
	"minus":   func(a, b int) int { return a - b },
	"streams": streamRows,
}).Parse(statusPageHTML))

// streamRow is a stream method, as the page's table of streams shows it.
type streamRow struct {
	Name string // Service.Method
	*StreamStatus
}

// streamRows returns the stream methods of services, in their order.
func streamRows(services []ServiceStatus) []streamRow {
	var rows []streamRow
	for _, svc := range services {
		for _, m := range svc.Methods {
			if m.Streams != nil {
				rows = append(rows, streamRow{svc.Name + "." + m.Name, m.Streams})
			}
		}
	}
	return rows
}

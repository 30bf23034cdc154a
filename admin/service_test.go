package admin

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// statusOnly is a Server whose status is st.
type statusOnly struct{ st Status }

func (s statusOnly) Status(context.Context) Status        { return s.st }
func (statusOnly) Ready(context.Context) (bool, []string) { return true, nil }
func (statusOnly) History() *History                      { return nil }

// The status served over RPC names a failing health check but not its
// error, which may name a database or a host, as /readyz does; the
// rest is the status page's.
func TestServiceStatusHidesHealthErrors(t *testing.T) {
	srv := statusOnly{Status{Connections: 3, Health: []HealthStatus{
		{Name: "mysql", Error: "dial tcp db-7.internal:3306: user app, password in DSN"},
		{Name: "redis", OK: true},
	}}}
	var st Status
	if err := NewService(srv, nil).Status(context.Background(), struct{}{}, &st); err != nil {
		t.Fatal(err)
	}
	if st.Connections != 3 || len(st.Health) != 2 {
		t.Fatalf("status %+v; want the server's", st)
	}
	if h := st.Health[0]; h.OK || h.Error == "" || strings.Contains(h.Error, "db-7") {
		t.Errorf("a failing check over RPC reads %+v; want it failing, without its error", h)
	}
	if h := st.Health[1]; !h.OK || h.Error != "" {
		t.Errorf("a passing check over RPC reads %+v", h)
	}
	if srv.st.Health[0].Error == "" {
		t.Error("the server's own status lost its check's error")
	}
}

// A server whose admin pages need credentials refuses its status over
// RPC with the error it was built with.
func TestServiceRefuses(t *testing.T) {
	refuse := errors.New("kiev: the status needs credentials; ask the admin address")
	err := NewService(statusOnly{}, refuse).Status(context.Background(), struct{}{}, new(Status))
	if !errors.Is(err, refuse) {
		t.Fatalf("Status = %v; want %v", err, refuse)
	}
}

// The status page says when a client's discovery fails, and what its
// hedges did, as its JSON twin does.
func TestPageShowsDiscoveryAndHedges(t *testing.T) {
	failing := time.Date(2026, 12, 4, 21, 30, 5, 0, time.UTC)
	srv := statusOnly{Status{Clients: []ClientStatus{{
		Target:    "dns:///feed.test:7000",
		Discovery: &DiscoveryStatus{Resolved: true, Error: "lookup feed.test: no such host", FailingSince: failing},
		Hedges:    &HedgeStatus{Sent: 12, Won: 3, NoBudget: 4, Overload: 5},
	}}}}
	rec := httptest.NewRecorder()
	NewHandler(srv, prometheus.NewRegistry(), nil).ServeHTTP(rec, httptest.NewRequest("GET", "/debug/kiev", nil))
	page := rec.Body.String()
	for _, want := range []string{
		"discovery failing since 21:30:05: lookup feed.test: no such host",
		"hedges sent 12, won 3; held back 4 for want of budget, 5 for overload",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the status page lacks %q", want)
		}
	}
}

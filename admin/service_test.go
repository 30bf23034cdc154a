package admin

import (
	"context"
	"errors"
	"strings"
	"testing"
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

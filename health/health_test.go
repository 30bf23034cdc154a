package health_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kievrpc/kiev/health"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeServer has the services it lists.
type fakeServer []string

func (f fakeServer) HasService(name string) bool {
	for _, s := range f {
		if s == name {
			return true
		}
	}
	return false
}

var errNope = errors.New("no such service")

func (fakeServer) NotFound(string) error { return errNope }

// A server serves until a check fails, Set says otherwise or it stops;
// Set(ServingUnknown) gives the say back to the checks.
func TestReporterOf(t *testing.T) {
	var checks health.Checks
	r := health.NewReporter(fakeServer{"Calc"}, &checks)
	ctx := context.Background()
	want := func(service string, st health.ServingStatus, why string) {
		t.Helper()
		if got, reason := r.Of(ctx, service); got != st || !strings.Contains(reason, why) {
			t.Errorf("Of(%q) = %v, %q; want %v, %q", service, got, reason, st, why)
		}
	}
	want("", health.Serving, "")
	want("Calc", health.Serving, "")
	want("Nope", health.ServiceUnknown, "no service Nope")
	r.Set("", health.NotServing)
	want("Calc", health.NotServing, "set by SetHealth")
	r.Set("", health.ServingUnknown)
	checks.Add("db", func(context.Context) error { panic("boom") })
	want("", health.NotServing, "failing health checks: db")
	if res := checks.Run(ctx); len(res) != 1 || res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "panicked: boom") {
		t.Errorf("Run = %+v; want db failing with its panic", res)
	}
	checks.Add("db", func(context.Context) error { return nil })
	want("", health.Serving, "")
	r.Stop()
	want("", health.NotServing, "shutting down")
}

// Cached runs the checks once per CacheTTL, and again at once after Add.
func TestChecksCached(t *testing.T) {
	var checks health.Checks
	var runs atomic.Int32
	checks.Add("a", func(context.Context) error { runs.Add(1); return nil })
	start := time.Now()
	for range 5 {
		checks.Cached(context.Background())
	}
	if n, most := int(runs.Load()), 1+int(time.Since(start)/health.CacheTTL); n > most {
		t.Errorf("5 Cached calls ran the check %d times; want at most %d", n, most)
	}
	before := runs.Load()
	checks.Add("b", func(context.Context) error { return nil })
	checks.Cached(context.Background())
	if runs.Load() != before+1 {
		t.Error("Cached after Add reused the old run; want a new one")
	}
}

// Check answers the status, and the server's NotFound error for a service
// it lacks; Watch answers at once when the status differs from Last, and
// when Set changes it.
func TestService(t *testing.T) {
	var checks health.Checks
	r := health.NewReporter(fakeServer{"Calc"}, &checks)
	svc := r.Service()
	ctx := context.Background()
	var reply health.CheckResponse
	if err := svc.Check(ctx, health.CheckRequest{Service: "Calc"}, &reply); err != nil || reply.Status != health.Serving {
		t.Errorf("Check(Calc) = %v, %v; want SERVING", reply.Status, err)
	}
	if err := svc.Check(ctx, health.CheckRequest{Service: "Nope"}, &reply); !errors.Is(err, errNope) {
		t.Errorf("Check(Nope) = %v; want the server's NotFound error", err)
	}
	done := make(chan health.ServingStatus)
	go func() {
		var w health.CheckResponse
		_ = svc.Watch(ctx, health.WatchRequest{Last: health.Serving}, &w)
		done <- w.Status
	}()
	r.Set("", health.NotServing)
	if st := <-done; st != health.NotServing {
		t.Errorf("Watch after Set(NotServing) = %v; want NOT_SERVING", st)
	}
}

func TestServingStatusText(t *testing.T) {
	var st health.ServingStatus
	if err := st.UnmarshalText([]byte("not_serving")); err != nil || st != health.NotServing {
		t.Errorf("UnmarshalText(not_serving) = %v, %v", st, err)
	}
	if err := st.UnmarshalText([]byte("fine")); err == nil || !strings.Contains(err.Error(), "SERVING, NOT_SERVING") {
		t.Errorf("UnmarshalText(fine) = %v; want an error listing the names", err)
	}
}

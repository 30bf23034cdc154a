package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kievrpc/kiev/internal/callstats"
	"github.com/kievrpc/kiev/internal/metrics"
)

var names = [callstats.NumCodes]string{"OK", "Application"}

// Two clients of one target make one series, their counts added; a
// provider seen by both adds up too, and an ejected one shows as such.
func TestClientsOfOneTargetAddUp(t *testing.T) {
	var a, b, p1, p2 callstats.Stats
	now := time.Now()
	a.Record(now, time.Millisecond, 0)
	b.Record(now, time.Millisecond, 0)
	b.Record(now, time.Millisecond, 1)
	p1.Record(now, time.Millisecond, 0)
	p2.Record(now, time.Millisecond, 0)
	c := metrics.NewClientCollector(&names, func() []metrics.Client {
		return []metrics.Client{
			{Target: "Calc", Totals: &a.Totals, Retries: 1, Balanced: true, Providers: []metrics.Provider{{ID: "p", Totals: &p1.Totals}}},
			{Target: "Calc", Totals: &b.Totals, Retries: 2, Balanced: true, Providers: []metrics.Provider{{ID: "p", Totals: &p2.Totals, Ejected: true}}},
		}
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	want := `
# HELP kiev_client_calls_total Calls a client made, retries included in one call, by target and code.
# TYPE kiev_client_calls_total counter
kiev_client_calls_total{code="Application",target="Calc"} 1
kiev_client_calls_total{code="OK",target="Calc"} 2
# HELP kiev_client_provider_calls_total Attempts sent to each provider of a dialed service, by code.
# TYPE kiev_client_provider_calls_total counter
kiev_client_provider_calls_total{code="OK",provider="p",target="Calc"} 2
# HELP kiev_client_provider_ejected 1 while a provider is out of balancing.
# TYPE kiev_client_provider_ejected gauge
kiev_client_provider_ejected{provider="p",target="Calc"} 1
# HELP kiev_client_retries_total Retries a client sent, by target.
# TYPE kiev_client_retries_total counter
kiev_client_retries_total{target="Calc"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kiev_client_calls_total", "kiev_client_provider_calls_total", "kiev_client_provider_ejected", "kiev_client_retries_total"); err != nil {
		t.Error(err)
	}
}

// A code past the names counts as User.
func TestServerCodesPastTheTableAreUser(t *testing.T) {
	var s callstats.Stats
	s.Record(time.Now(), time.Millisecond, 404)
	c := metrics.NewServerCollector(&names, func() metrics.Server {
		return metrics.Server{Methods: []metrics.Method{{Name: "Calc.Add", Totals: &s.Totals}}}
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	want := `
# HELP kiev_server_calls_total Calls a server answered, by method and code (OK, Application, Overloaded, ...; User for codes of 100 and up).
# TYPE kiev_server_calls_total counter
kiev_server_calls_total{code="User",method="Calc.Add"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kiev_server_calls_total"); err != nil {
		t.Error(err)
	}
}

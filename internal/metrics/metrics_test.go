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
// provider seen by both adds up too (its calls and open streams), and an
// ejected one shows as such.
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
			{Target: "Calc", Totals: &a.Totals, Retries: [3]int64{1, 0, 2}, ConnEnded: metrics.ConnEnded{Unsent: 4, Failed: 1}, Balanced: true, Providers: []metrics.Provider{{ID: "p", Totals: &p1.Totals, Streams: 1}}},
			{Target: "Calc", Totals: &b.Totals, Retries: [3]int64{2, 1, 0}, ConnEnded: metrics.ConnEnded{Unsent: 2}, Balanced: true, Providers: []metrics.Provider{{ID: "p", Totals: &p2.Totals, Ejected: true, Streams: 2}}},
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
# HELP kiev_client_provider_streams_open Streams open to each provider.
# TYPE kiev_client_provider_streams_open gauge
kiev_client_provider_streams_open{provider="p",target="Calc"} 3
# HELP kiev_client_retries_total Retries a client sent, by target and reason: unsent (no server read the attempt: not sent, or not read by a server that drained), refused (the server refused it as overloaded or shutting down), idempotent (its outcome unknown, and the method idempotent).
# TYPE kiev_client_retries_total counter
kiev_client_retries_total{reason="idempotent",target="Calc"} 2
kiev_client_retries_total{reason="refused",target="Calc"} 1
kiev_client_retries_total{reason="unsent",target="Calc"} 3
# HELP kiev_client_connection_ended_calls_total Calls pending on a client's connections as they ended (the server closed one after draining, or it was lost), by target and outcome: unsent (the server said it never read them; they fail as not sent, and are retried as the retry policy allows), failed (sent, their outcome lost; they fail unless retried as idempotent).
# TYPE kiev_client_connection_ended_calls_total counter
kiev_client_connection_ended_calls_total{outcome="failed",target="Calc"} 1
kiev_client_connection_ended_calls_total{outcome="unsent",target="Calc"} 6
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kiev_client_calls_total", "kiev_client_provider_calls_total", "kiev_client_provider_ejected", "kiev_client_provider_streams_open", "kiev_client_retries_total", "kiev_client_connection_ended_calls_total"); err != nil {
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

// A stream method has its streams' series, each way; a unary one has
// none. Clients of one target add their streams up, the leaked ones too.
func TestStreamSeries(t *testing.T) {
	var s callstats.Stats
	srv := metrics.NewServerCollector(&names, func() metrics.Server {
		return metrics.Server{Methods: []metrics.Method{
			{Name: "Feed.Watch", Totals: &s.Totals, Streams: &metrics.Streams{Open: 2, Opened: 5, MsgsIn: 0, MsgsOut: 40, BytesIn: 0, BytesOut: 4000}},
			{Name: "Calc.Add", Totals: &s.Totals},
		}}
	})
	cl := metrics.NewClientCollector(&names, func() []metrics.Client {
		return []metrics.Client{
			{Target: "Feed", Totals: &s.Totals, Streams: metrics.Streams{Open: 1, Opened: 3, MsgsIn: 30, MsgsOut: 1, BytesIn: 3000, BytesOut: 10}, Leaked: 1},
			{Target: "Feed", Totals: &s.Totals, Streams: metrics.Streams{Open: 1, Opened: 2, MsgsIn: 10, BytesIn: 1000}, Leaked: 2},
		}
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(srv, cl)
	want := `
# HELP kiev_server_streams_open Streams open now (their handlers running), by method.
# TYPE kiev_server_streams_open gauge
kiev_server_streams_open{method="Feed.Watch"} 2
# HELP kiev_server_streams_opened_total Streams opened (accepted), by method.
# TYPE kiev_server_streams_opened_total counter
kiev_server_streams_opened_total{method="Feed.Watch"} 5
# HELP kiev_server_stream_messages_total Messages of streams, by method and direction: received from clients, or sent to them.
# TYPE kiev_server_stream_messages_total counter
kiev_server_stream_messages_total{direction="received",method="Feed.Watch"} 0
kiev_server_stream_messages_total{direction="sent",method="Feed.Watch"} 40
# HELP kiev_server_stream_bytes_total Encoded bytes of stream messages, by method and direction: received from clients, or sent to them.
# TYPE kiev_server_stream_bytes_total counter
kiev_server_stream_bytes_total{direction="received",method="Feed.Watch"} 0
kiev_server_stream_bytes_total{direction="sent",method="Feed.Watch"} 4000
# HELP kiev_client_streams_open Streams a client has open now, by target.
# TYPE kiev_client_streams_open gauge
kiev_client_streams_open{target="Feed"} 2
# HELP kiev_client_streams_opened_total Streams a client opened, by target.
# TYPE kiev_client_streams_opened_total counter
kiev_client_streams_opened_total{target="Feed"} 5
# HELP kiev_client_stream_messages_total Messages of a client's streams, by target and direction: received from servers, or sent to them.
# TYPE kiev_client_stream_messages_total counter
kiev_client_stream_messages_total{direction="received",target="Feed"} 40
kiev_client_stream_messages_total{direction="sent",target="Feed"} 1
# HELP kiev_client_stream_bytes_total Encoded bytes of a client's stream messages, by target and direction: received from servers, or sent to them.
# TYPE kiev_client_stream_bytes_total counter
kiev_client_stream_bytes_total{direction="received",target="Feed"} 4000
kiev_client_stream_bytes_total{direction="sent",target="Feed"} 10
# HELP kiev_client_streams_leaked_total Streams dropped without Close, nor an error from Recv, nor their context's end, which the garbage collector found and canceled, by target.
# TYPE kiev_client_streams_leaked_total counter
kiev_client_streams_leaked_total{target="Feed"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"kiev_server_streams_open", "kiev_server_streams_opened_total", "kiev_server_stream_messages_total", "kiev_server_stream_bytes_total",
		"kiev_client_streams_open", "kiev_client_streams_opened_total", "kiev_client_stream_messages_total", "kiev_client_stream_bytes_total",
		"kiev_client_streams_leaked_total"); err != nil {
		t.Error(err)
	}
}

package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kievrpc/kiev/internal/callstats"
	"github.com/kievrpc/kiev/shed"
)

// Metrics are Prometheus collectors that read kiev's own counters when
// scraped, so a call costs a few atomic adds, not a label lookup. Names
// follow Prometheus conventions; labels are bounded: a method, a code, a
// priority, a reason, a dialed target, a provider.

var (
	descServerCalls = prometheus.NewDesc("kiev_server_calls_total",
		"Calls a server answered, by method and code (OK, Application, Overloaded, ...; User for codes of 100 and up).",
		[]string{"method", "code"}, nil)
	descServerDuration = prometheus.NewDesc("kiev_server_call_duration_seconds",
		"How long handlers ran, by method.", []string{"method"}, nil)
	descServerInFlight = prometheus.NewDesc("kiev_server_calls_in_flight",
		"Handlers running now.", nil, nil)
	descServerConns = prometheus.NewDesc("kiev_server_connections",
		"Client connections open now.", nil, nil)
	descQueue = prometheus.NewDesc("kiev_server_queue_length",
		"Calls waiting in the overload scheduler's queue, by priority.", []string{"priority"}, nil)
	descShed = prometheus.NewDesc("kiev_server_shed_total",
		"Calls the overload scheduler answered without running, by reason.", []string{"reason"}, nil)
	descWorkerLimit = prometheus.NewDesc("kiev_server_concurrency_limit",
		"How many calls the overload scheduler lets run at once now: the fixed Workers, or the elastic limit.", nil, nil)
	descMethodLimit = prometheus.NewDesc("kiev_server_method_concurrency_limit",
		"A method's adaptive concurrency limit, by method; 0 while it is off.", []string{"method"}, nil)
	descMethodInFlight = prometheus.NewDesc("kiev_server_method_in_flight",
		"A method's calls past its adaptive limit, waiting for a worker or running, by method.", []string{"method"}, nil)
	descMethodQueued = prometheus.NewDesc("kiev_server_method_queued",
		"A method's calls waiting for room under its adaptive limit, by method.", []string{"method"}, nil)
	descOverloaded = prometheus.NewDesc("kiev_server_overloaded",
		"1 while the overload scheduler is in overload mode.", nil, nil)
	descUDPDuplicates = prometheus.NewDesc("kiev_server_udp_duplicates_total",
		"Retransmitted UDP requests answered from the duplicate cache or ignored while running.", nil, nil)
	descUDPMalformed = prometheus.NewDesc("kiev_server_udp_malformed_total",
		"Datagrams dropped as not kiev's.", nil, nil)
	descServerStreamsOpen = prometheus.NewDesc("kiev_server_streams_open",
		"Streams open now (their handlers running), by method.", []string{"method"}, nil)
	descServerStreamsOpened = prometheus.NewDesc("kiev_server_streams_opened_total",
		"Streams opened (accepted), by method.", []string{"method"}, nil)
	descServerStreamMsgs = prometheus.NewDesc("kiev_server_stream_messages_total",
		"Messages of streams, by method and direction: received from clients, or sent to them.", []string{"method", "direction"}, nil)
	descServerStreamBytes = prometheus.NewDesc("kiev_server_stream_bytes_total",
		"Encoded bytes of stream messages, by method and direction: received from clients, or sent to them.", []string{"method", "direction"}, nil)
	descLogSuppressed = prometheus.NewDesc("kiev_server_log_lines_suppressed_total",
		"Log lines not written because more than LogBurst of the same message came in one second (refusals, failed handshakes, protocol errors).", []string{"msg"}, nil)

	descClientCalls = prometheus.NewDesc("kiev_client_calls_total",
		"Calls a client made, retries included in one call, by target and code.", []string{"target", "code"}, nil)
	descClientDuration = prometheus.NewDesc("kiev_client_call_duration_seconds",
		"How long calls took, retries included, by target.", []string{"target"}, nil)
	descClientRetries = prometheus.NewDesc("kiev_client_retries_total",
		"Retries a client sent, by target and reason: unsent (no server read the attempt: not sent, or not read by a server that drained), refused (the server refused it as overloaded or shutting down), idempotent (its outcome unknown, and the method idempotent).", []string{"target", "reason"}, nil)
	descClientConnEnded = prometheus.NewDesc("kiev_client_connection_ended_calls_total",
		"Calls pending on a client's connections as they ended (the server closed one after draining, or it was lost), by target and outcome: unsent (the server said it never read them; they fail as not sent, and are retried as the retry policy allows), failed (sent, their outcome lost; they fail unless retried as idempotent).", []string{"target", "outcome"}, nil)
	descClientHedges = prometheus.NewDesc("kiev_client_hedges_total",
		"Hedged copies of calls, by target and outcome: sent, won (answered first), and not sent for want of retry budget (no_budget) or because of overload (overload).", []string{"target", "outcome"}, nil)
	descClientBudget = prometheus.NewDesc("kiev_client_retry_budget",
		"Retries the client's retry budget holds now, by target.", []string{"target"}, nil)
	descClientStreamsOpen = prometheus.NewDesc("kiev_client_streams_open",
		"Streams a client has open now, by target.", []string{"target"}, nil)
	descClientStreamsOpened = prometheus.NewDesc("kiev_client_streams_opened_total",
		"Streams a client opened, by target.", []string{"target"}, nil)
	descClientStreamMsgs = prometheus.NewDesc("kiev_client_stream_messages_total",
		"Messages of a client's streams, by target and direction: received from servers, or sent to them.", []string{"target", "direction"}, nil)
	descClientStreamBytes = prometheus.NewDesc("kiev_client_stream_bytes_total",
		"Encoded bytes of a client's stream messages, by target and direction: received from servers, or sent to them.", []string{"target", "direction"}, nil)
	descClientStreamsLeaked = prometheus.NewDesc("kiev_client_streams_leaked_total",
		"Streams dropped without Close, nor an error from Recv, nor their context's end, which the garbage collector found and canceled, by target.", []string{"target"}, nil)
	descProviderCalls = prometheus.NewDesc("kiev_client_provider_calls_total",
		"Attempts sent to each provider of a dialed service, by code.", []string{"target", "provider", "code"}, nil)
	descProviderDuration = prometheus.NewDesc("kiev_client_provider_call_duration_seconds",
		"How long attempts to each provider took.", []string{"target", "provider"}, nil)
	descProviderInFlight = prometheus.NewDesc("kiev_client_provider_in_flight",
		"Calls in flight to each provider.", []string{"target", "provider"}, nil)
	descProviderStreams = prometheus.NewDesc("kiev_client_provider_streams_open",
		"Streams open to each provider.", []string{"target", "provider"}, nil)
	descProviderEjected = prometheus.NewDesc("kiev_client_provider_ejected",
		"1 while a provider is out of balancing.", []string{"target", "provider"}, nil)
)

// Method is one method of a server, as its collector sees it.
type Method struct {
	Name   string // "Service.Method"
	Totals *callstats.Totals
	// Its adaptive concurrency limit (0 while off), its calls past the
	// limit, and those waiting for room under it.
	Limit, InFlight, Queued int
	// Streams counts a stream method's streams; nil for a unary method.
	Streams *Streams
}

// Streams counts streams, a method's or a client's: open now, opened, and
// their messages and encoded bytes, received (in) and sent (out).
type Streams struct {
	Open, Opened      int64
	MsgsIn, MsgsOut   int64
	BytesIn, BytesOut int64
}

// add adds o's counts to s.
func (s *Streams) add(o *Streams) {
	s.Open += o.Open
	s.Opened += o.Opened
	s.MsgsIn += o.MsgsIn
	s.MsgsOut += o.MsgsOut
	s.BytesIn += o.BytesIn
	s.BytesOut += o.BytesOut
}

// collect sends the series of s, whose labels are label, to ch.
func (s *Streams) collect(ch chan<- prometheus.Metric, open, opened, msgs, bytes *prometheus.Desc, label string) {
	ch <- prometheus.MustNewConstMetric(open, prometheus.GaugeValue, float64(s.Open), label)
	ch <- prometheus.MustNewConstMetric(opened, prometheus.CounterValue, float64(s.Opened), label)
	ch <- prometheus.MustNewConstMetric(msgs, prometheus.CounterValue, float64(s.MsgsIn), label, "received")
	ch <- prometheus.MustNewConstMetric(msgs, prometheus.CounterValue, float64(s.MsgsOut), label, "sent")
	ch <- prometheus.MustNewConstMetric(bytes, prometheus.CounterValue, float64(s.BytesIn), label, "received")
	ch <- prometheus.MustNewConstMetric(bytes, prometheus.CounterValue, float64(s.BytesOut), label, "sent")
}

// Server is a server's state, as its collector sees it at a scrape.
type Server struct {
	Methods                     []Method // kiev's own services left out
	InFlight                    int64    // handlers running
	Conns                       int      // client connections open
	Sched                       shed.Stats
	UDPDuplicates, UDPMalformed int64
	// Suppressed calls f for every log message with lines suppressed.
	Suppressed func(f func(msg string, n int64))
}

// NewServerCollector returns a collector of a server's metrics, which
// calls snapshot at every scrape. names are kiev's code names, by code.
func NewServerCollector(names *[callstats.NumCodes]string, snapshot func() Server) prometheus.Collector {
	return serverCollector{names, snapshot}
}

// serverCollector exports a server's metrics.
type serverCollector struct {
	names    *[callstats.NumCodes]string
	snapshot func() Server
}

func (c serverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descServerCalls, descServerDuration, descServerInFlight, descServerConns,
		descQueue, descShed, descOverloaded, descWorkerLimit, descMethodLimit, descMethodInFlight, descMethodQueued, descUDPDuplicates, descUDPMalformed, descLogSuppressed,
		descServerStreamsOpen, descServerStreamsOpened, descServerStreamMsgs, descServerStreamBytes} {
		ch <- d
	}
}

func (c serverCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	for _, m := range s.Methods {
		callstats.CodeCounters(ch, descServerCalls, m.Totals, c.names, m.Name)
		ch <- callstats.Histogram(descServerDuration, m.Totals, m.Name)
		ch <- prometheus.MustNewConstMetric(descMethodLimit, prometheus.GaugeValue, float64(m.Limit), m.Name)
		ch <- prometheus.MustNewConstMetric(descMethodInFlight, prometheus.GaugeValue, float64(m.InFlight), m.Name)
		ch <- prometheus.MustNewConstMetric(descMethodQueued, prometheus.GaugeValue, float64(m.Queued), m.Name)
		if m.Streams != nil {
			m.Streams.collect(ch, descServerStreamsOpen, descServerStreamsOpened, descServerStreamMsgs, descServerStreamBytes, m.Name)
		}
	}
	ch <- prometheus.MustNewConstMetric(descServerInFlight, prometheus.GaugeValue, float64(s.InFlight))
	ch <- prometheus.MustNewConstMetric(descServerConns, prometheus.GaugeValue, float64(s.Conns))
	st := s.Sched
	for p, n := range st.Queued {
		ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(n), strconv.Itoa(p))
	}
	for _, r := range shed.Reasons() {
		ch <- prometheus.MustNewConstMetric(descShed, prometheus.CounterValue, float64(st.DroppedFor(r)), r.String())
	}
	overloaded := 0.0
	if st.Overloaded {
		overloaded = 1
	}
	ch <- prometheus.MustNewConstMetric(descOverloaded, prometheus.GaugeValue, overloaded)
	ch <- prometheus.MustNewConstMetric(descWorkerLimit, prometheus.GaugeValue, float64(st.Workers))
	ch <- prometheus.MustNewConstMetric(descUDPDuplicates, prometheus.CounterValue, float64(s.UDPDuplicates))
	ch <- prometheus.MustNewConstMetric(descUDPMalformed, prometheus.CounterValue, float64(s.UDPMalformed))
	if s.Suppressed != nil {
		s.Suppressed(func(msg string, n int64) {
			ch <- prometheus.MustNewConstMetric(descLogSuppressed, prometheus.CounterValue, float64(n), msg)
		})
	}
}

// RetryReasons are the values of kiev_client_retries_total's reason
// label, in the order of Client.Retries.
var RetryReasons = [...]string{"unsent", "refused", "idempotent"}

// Client is one client, as the clients' collector sees it.
type Client struct {
	Target  string // as dialed
	Totals  *callstats.Totals
	Retries [len(RetryReasons)]int64 // by reason
	// ConnEnded counts the calls pending on its connections as they
	// ended.
	ConnEnded ConnEnded
	Hedges    Hedges
	Budget    float64 // retries its budget holds now
	Streams   Streams
	Leaked    int64      // streams dropped unclosed, which the garbage collector canceled
	Balanced  bool       // a client of a service, balancing over Providers
	Providers []Provider // when Balanced
}

// ConnEnded counts the calls pending on a client's connections as they
// ended: Unsent, those the server said it never read, and Failed, those
// whose outcome was lost.
type ConnEnded struct{ Unsent, Failed int64 }

// Hedges counts a client's hedged copies of calls: sent, won (answered
// first), and not sent for want of retry budget or because of overload.
type Hedges struct{ Sent, Won, NoBudget, Overload int64 }

// Provider is one provider of a Client's service.
type Provider struct {
	ID       string
	Totals   *callstats.Totals
	InFlight int
	Streams  int // streams open to it
	Ejected  bool
}

// NewClientCollector returns a collector of clients' metrics, which calls
// snapshot at every scrape. Clients of one target add up: one series per
// label set. names are kiev's code names, by code.
func NewClientCollector(names *[callstats.NumCodes]string, snapshot func() []Client) prometheus.Collector {
	return clientCollector{names, snapshot}
}

// clientCollector exports the metrics of clients.
type clientCollector struct {
	names    *[callstats.NumCodes]string
	snapshot func() []Client
}

func (clientCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descClientCalls, descClientDuration, descClientRetries, descClientConnEnded, descClientHedges, descClientBudget,
		descClientStreamsOpen, descClientStreamsOpened, descClientStreamMsgs, descClientStreamBytes, descClientStreamsLeaked,
		descProviderCalls, descProviderDuration, descProviderInFlight, descProviderStreams, descProviderEjected} {
		ch <- d
	}
}

func (cc clientCollector) Collect(ch chan<- prometheus.Metric) {
	cs := cc.snapshot()
	seen := map[string]bool{}
	for _, c := range cs {
		if seen[c.Target] {
			continue
		}
		seen[c.Target] = true
		var same []Client
		for _, o := range cs {
			if o.Target == c.Target {
				same = append(same, o)
			}
		}
		var total callstats.Totals
		var retries [len(RetryReasons)]int64
		var ended ConnEnded
		var hedges Hedges
		var budget float64
		var streams Streams
		var leaked int64
		for _, o := range same {
			streams.add(&o.Streams)
			leaked += o.Leaked
			total.Add(o.Totals)
			for i, n := range o.Retries {
				retries[i] += n
			}
			ended.Unsent += o.ConnEnded.Unsent
			ended.Failed += o.ConnEnded.Failed
			h := o.Hedges
			hedges.Sent, hedges.Won, hedges.NoBudget, hedges.Overload = hedges.Sent+h.Sent, hedges.Won+h.Won, hedges.NoBudget+h.NoBudget, hedges.Overload+h.Overload
			budget += o.Budget
		}
		callstats.CodeCounters(ch, descClientCalls, &total, cc.names, c.Target)
		ch <- callstats.Histogram(descClientDuration, &total, c.Target)
		for i, reason := range RetryReasons {
			ch <- prometheus.MustNewConstMetric(descClientRetries, prometheus.CounterValue, float64(retries[i]), c.Target, reason)
		}
		ch <- prometheus.MustNewConstMetric(descClientConnEnded, prometheus.CounterValue, float64(ended.Unsent), c.Target, "unsent")
		ch <- prometheus.MustNewConstMetric(descClientConnEnded, prometheus.CounterValue, float64(ended.Failed), c.Target, "failed")
		for _, o := range []struct {
			name string
			n    int64
		}{{"sent", hedges.Sent}, {"won", hedges.Won}, {"no_budget", hedges.NoBudget}, {"overload", hedges.Overload}} {
			ch <- prometheus.MustNewConstMetric(descClientHedges, prometheus.CounterValue, float64(o.n), c.Target, o.name)
		}
		ch <- prometheus.MustNewConstMetric(descClientBudget, prometheus.GaugeValue, budget, c.Target)
		streams.collect(ch, descClientStreamsOpen, descClientStreamsOpened, descClientStreamMsgs, descClientStreamBytes, c.Target)
		ch <- prometheus.MustNewConstMetric(descClientStreamsLeaked, prometheus.CounterValue, float64(leaked), c.Target)
		if c.Balanced {
			cc.collectProviders(ch, c.Target, same)
		}
	}
}

// collectProviders exports the providers of the clients same of target,
// adding up those of one ID.
func (cc clientCollector) collectProviders(ch chan<- prometheus.Metric, target string, same []Client) {
	provs := map[string]*callstats.Totals{}
	inflight := map[string]int{}
	streams := map[string]int{}
	ejected := map[string]bool{}
	for _, o := range same {
		for _, p := range o.Providers {
			if provs[p.ID] == nil {
				provs[p.ID] = new(callstats.Totals)
			}
			provs[p.ID].Add(p.Totals)
			inflight[p.ID] += p.InFlight
			streams[p.ID] += p.Streams
			ejected[p.ID] = ejected[p.ID] || p.Ejected
		}
	}
	for id, st := range provs {
		callstats.CodeCounters(ch, descProviderCalls, st, cc.names, target, id)
		ch <- callstats.Histogram(descProviderDuration, st, target, id)
		ch <- prometheus.MustNewConstMetric(descProviderInFlight, prometheus.GaugeValue, float64(inflight[id]), target, id)
		ch <- prometheus.MustNewConstMetric(descProviderStreams, prometheus.GaugeValue, float64(streams[id]), target, id)
		e := 0.0
		if ejected[id] {
			e = 1
		}
		ch <- prometheus.MustNewConstMetric(descProviderEjected, prometheus.GaugeValue, e, target, id)
	}
}

package kiev

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
	descLogSuppressed = prometheus.NewDesc("kiev_server_log_lines_suppressed_total",
		"Log lines not written because more than LogBurst of the same message came in one second (refusals, failed handshakes, protocol errors).", []string{"msg"}, nil)

	descClientCalls = prometheus.NewDesc("kiev_client_calls_total",
		"Calls a client made, retries included in one call, by target and code.", []string{"target", "code"}, nil)
	descClientDuration = prometheus.NewDesc("kiev_client_call_duration_seconds",
		"How long calls took, retries included, by target.", []string{"target"}, nil)
	descClientRetries = prometheus.NewDesc("kiev_client_retries_total",
		"Retries a client sent, by target.", []string{"target"}, nil)
	descClientHedges = prometheus.NewDesc("kiev_client_hedges_total",
		"Hedged copies of calls, by target and outcome: sent, won (answered first), and not sent for want of retry budget (no_budget) or because of overload (overload).", []string{"target", "outcome"}, nil)
	descClientBudget = prometheus.NewDesc("kiev_client_retry_budget",
		"Retries the client's retry budget holds now, by target.", []string{"target"}, nil)
	descProviderCalls = prometheus.NewDesc("kiev_client_provider_calls_total",
		"Attempts sent to each provider of a dialed service, by code.", []string{"target", "provider", "code"}, nil)
	descProviderDuration = prometheus.NewDesc("kiev_client_provider_call_duration_seconds",
		"How long attempts to each provider took.", []string{"target", "provider"}, nil)
	descProviderInFlight = prometheus.NewDesc("kiev_client_provider_in_flight",
		"Calls in flight to each provider.", []string{"target", "provider"}, nil)
	descProviderEjected = prometheus.NewDesc("kiev_client_provider_ejected",
		"1 while a provider is out of balancing.", []string{"target", "provider"}, nil)
)

// codeLabel names a callTotals.codes slot.
func codeLabel(i int) string {
	if i == numCodes {
		return "User"
	}
	return Code(i).String()
}

// histogram turns latency buckets into a Prometheus histogram, with a
// bound at each doubling of latBase: 10µs, 20µs, ... about 42s. The
// finer buckets between them serve the status page's percentiles.
func histogram(desc *prometheus.Desc, s *callTotals, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, latOctaves+1)
	var n uint64
	for i := range latBuckets {
		if i >= latSub && i%latSub == 0 { // a doubling of latBase
			buckets[latLower(i).Seconds()] = n
		}
		n += uint64(s.lat[i].Load())
	}
	return prometheus.MustNewConstHistogram(desc, n, time.Duration(s.latSum.Load()).Seconds(), buckets, labels...)
}

// codeCounters sends one counter per code a callTotals has seen.
func codeCounters(ch chan<- prometheus.Metric, desc *prometheus.Desc, s *callTotals, labels ...string) {
	for i := range s.codes {
		if n := s.codes[i].Load(); n > 0 {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(n), append(labels, codeLabel(i))...)
		}
	}
}

// serverCollector exports a Server's metrics.
type serverCollector struct{ s *Server }

func (c serverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descServerCalls, descServerDuration, descServerInFlight, descServerConns,
		descQueue, descShed, descOverloaded, descWorkerLimit, descMethodLimit, descMethodInFlight, descMethodQueued, descUDPDuplicates, descUDPMalformed, descLogSuppressed} {
		ch <- d
	}
}

func (c serverCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.mu.Lock()
	var methods []*method
	for name, ms := range s.services {
		if isBuiltin(name) {
			continue
		}
		for _, m := range ms {
			methods = append(methods, m)
		}
	}
	conns := len(s.conns)
	s.mu.Unlock()
	for _, m := range methods {
		codeCounters(ch, descServerCalls, &m.stats.callTotals, m.name)
		ch <- histogram(descServerDuration, &m.stats.callTotals, m.name)
		lim := m.cost.Limit()
		ch <- prometheus.MustNewConstMetric(descMethodLimit, prometheus.GaugeValue, float64(lim.Limit), m.name)
		ch <- prometheus.MustNewConstMetric(descMethodInFlight, prometheus.GaugeValue, float64(lim.InFlight), m.name)
		ch <- prometheus.MustNewConstMetric(descMethodQueued, prometheus.GaugeValue, float64(lim.Queued), m.name)
	}
	ch <- prometheus.MustNewConstMetric(descServerInFlight, prometheus.GaugeValue, float64(s.inFlight.Load()))
	ch <- prometheus.MustNewConstMetric(descServerConns, prometheus.GaugeValue, float64(conns))
	st := s.sched.Stats()
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
	ps := s.PacketStats()
	ch <- prometheus.MustNewConstMetric(descUDPDuplicates, prometheus.CounterValue, float64(ps.Duplicates))
	ch <- prometheus.MustNewConstMetric(descUDPMalformed, prometheus.CounterValue, float64(ps.Malformed))
	s.logLimits.suppressedLines(func(msg string, n int64) {
		ch <- prometheus.MustNewConstMetric(descLogSuppressed, prometheus.CounterValue, float64(n), msg)
	})
}

// clientCollector exports the metrics of every open Client of the
// process.
type clientCollector struct{}

func (clientCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descClientCalls, descClientDuration, descClientRetries, descClientHedges, descClientBudget,
		descProviderCalls, descProviderDuration, descProviderInFlight, descProviderEjected} {
		ch <- d
	}
}

func (clientCollector) Collect(ch chan<- prometheus.Metric) {
	liveClients.Lock()
	cs := make([]*Client, 0, len(liveClients.m))
	for c := range liveClients.m {
		cs = append(cs, c)
	}
	liveClients.Unlock()
	// Two clients of one target add up: one series per label set.
	seen := map[string]bool{}
	for _, c := range cs {
		if seen[c.target] {
			continue
		}
		seen[c.target] = true
		var same []*Client
		for _, o := range cs {
			if o.target == c.target {
				same = append(same, o)
			}
		}
		var total callTotals
		var retries int64
		var hedges HedgeStats
		var budget float64
		for _, o := range same {
			total.add(&o.stats.callTotals)
			retries += o.retries.Load()
			h := o.HedgeStats()
			hedges.Sent, hedges.Won, hedges.NoBudget, hedges.Overload = hedges.Sent+h.Sent, hedges.Won+h.Won, hedges.NoBudget+h.NoBudget, hedges.Overload+h.Overload
			budget += float64(o.budget.balance.Load()) / 1000
		}
		codeCounters(ch, descClientCalls, &total, c.target)
		ch <- histogram(descClientDuration, &total, c.target)
		ch <- prometheus.MustNewConstMetric(descClientRetries, prometheus.CounterValue, float64(retries), c.target)
		for outcome, n := range map[string]int64{"sent": hedges.Sent, "won": hedges.Won, "no_budget": hedges.NoBudget, "overload": hedges.Overload} {
			ch <- prometheus.MustNewConstMetric(descClientHedges, prometheus.CounterValue, float64(n), c.target, outcome)
		}
		ch <- prometheus.MustNewConstMetric(descClientBudget, prometheus.GaugeValue, budget, c.target)
		if c.group == nil {
			continue
		}
		now := time.Now()
		provs := map[string]*callTotals{}
		inflight := map[string]int{}
		ejected := map[string]bool{}
		for _, o := range same {
			o.group.mu.Lock()
			eps := append([]*endpoint(nil), o.group.endpoints...)
			o.group.mu.Unlock()
			for _, ep := range eps {
				if provs[ep.id] == nil {
					provs[ep.id] = new(callTotals)
				}
				provs[ep.id].add(&ep.stats.callTotals)
				inflight[ep.id] += ep.InFlight()
				ejected[ep.id] = ejected[ep.id] || ep.ejectedUntil().After(now)
			}
		}
		for id, st := range provs {
			codeCounters(ch, descProviderCalls, st, c.target, id)
			ch <- histogram(descProviderDuration, st, c.target, id)
			ch <- prometheus.MustNewConstMetric(descProviderInFlight, prometheus.GaugeValue, float64(inflight[id]), c.target, id)
			e := 0.0
			if ejected[id] {
				e = 1
			}
			ch <- prometheus.MustNewConstMetric(descProviderEjected, prometheus.GaugeValue, e, c.target, id)
		}
	}
}

// add adds o's counts to s.
func (s *callTotals) add(o *callTotals) {
	s.calls.Add(o.calls.Load())
	s.errors.Add(o.errors.Load())
	for i := range s.codes {
		s.codes[i].Add(o.codes[i].Load())
	}
	for i := range s.lat {
		s.lat[i].Add(o.lat[i].Load())
	}
	s.latSum.Add(o.latSum.Load())
}

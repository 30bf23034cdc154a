package kiev

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kievrpc/kiev/internal/metrics"
)

// registerMetrics registers the server's collectors; already registered
// ones (another server of the process sharing reg) are left as they are.
func (s *Server) registerMetrics() {
	s.registry = prometheus.NewRegistry()
	reg := s.opts.metrics
	if reg == nil {
		reg = s.registry
	}
	for _, c := range []prometheus.Collector{metrics.NewServerCollector(&codeNames, s.metricsSnapshot), metrics.NewClientCollector(&codeNames, clientMetrics)} {
		if err := reg.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			s.opts.logger.Warn("kiev: registering metrics failed", "err", err)
		}
	}
}

// metricsSnapshot is what the server's collector exports at a scrape.
func (s *Server) metricsSnapshot() metrics.Server {
	ms := metrics.Server{InFlight: s.inFlight.Load(), Sched: s.sched.Stats(), Suppressed: s.logLimits.suppressedLines}
	s.mu.Lock()
	for name, methods := range s.services {
		if isBuiltin(name) {
			continue
		}
		for _, m := range methods {
			lim := m.cost.Limit()
			mm := metrics.Method{Name: m.name, Totals: &m.stats.Totals, Limit: lim.Limit, InFlight: lim.InFlight, Queued: lim.Queued}
			if m.kind != Unary {
				st := m.streams.metrics()
				mm.Streams = &st
			}
			ms.Methods = append(ms.Methods, mm)
		}
	}
	ms.Conns = len(s.conns)
	s.mu.Unlock()
	ps := s.PacketStats()
	ms.UDPDuplicates, ms.UDPMalformed = ps.Duplicates, ps.Malformed
	return ms
}

// clientMetrics is what the clients' collector exports at a scrape: every
// open Client of the process.
func clientMetrics() []metrics.Client {
	liveClients.Lock()
	cs := make([]*Client, 0, len(liveClients.m))
	for c := range liveClients.m {
		cs = append(cs, c)
	}
	liveClients.Unlock()
	now := time.Now()
	out := make([]metrics.Client, 0, len(cs))
	for _, c := range cs {
		mc := metrics.Client{Target: c.target, Totals: &c.stats.Totals, Retries: c.retries.snapshot(),
			Budget: c.budget.Balance(), Balanced: c.group != nil,
			Streams: c.streamStats.metrics(), Leaked: c.streamsLeaked.Load()}
		mc.ConnEnded = metrics.ConnEnded{Unsent: c.connEnded.unsent.Load(), Failed: c.connEnded.failed.Load()}
		h := c.HedgeStats()
		mc.Hedges = metrics.Hedges{Sent: h.Sent, Won: h.Won, NoBudget: h.NoBudget, Overload: h.Overload}
		if c.group != nil {
			c.group.mu.Lock()
			eps := append([]*endpoint(nil), c.group.endpoints...)
			c.group.mu.Unlock()
			for _, ep := range eps {
				mc.Providers = append(mc.Providers, metrics.Provider{ID: ep.id, Totals: &ep.stats.Totals,
					InFlight: ep.InFlight(), Streams: ep.Streams(), Ejected: ep.ejectedUntil().After(now)})
			}
		}
		out = append(out, mc)
	}
	return out
}

package kiev

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kievrpc/kiev/admin"
	"github.com/kievrpc/kiev/shed"
)

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Status returns the server's status, as its status page shows it, with
// the results of its health checks, run within ctx unless a run less
// than health.CacheTTL old is at hand.
func (s *Server) Status(ctx context.Context) admin.Status {
	now := time.Now()
	st := admin.Status{Time: now, UptimeSec: now.Sub(s.started).Seconds(), InFlight: s.inFlight.Load(), AdminAddr: s.AdminAddr()}
	s.mu.Lock()
	st.Connections = len(s.conns)
	for name, methods := range s.services {
		if isBuiltin(name) {
			continue
		}
		ss := admin.ServiceStatus{Name: name}
		for mname, m := range methods {
			w := m.stats.Summary(now, s.started)
			lim := m.cost.Limit()
			ss.Methods = append(ss.Methods, admin.MethodStatus{
				Name: mname, Calls: m.stats.Calls.Load(), Errors: m.stats.Errors.Load(),
				MinuteCalls: w.Calls, MinuteErrs: w.Errors, Rate: w.Rate, ErrRate: w.ErrRate, WindowSec: w.Span.Seconds(),
				P50Ms: ms(w.P50), P99Ms: ms(w.P99),
				InFlight: lim.InFlight, Queued: lim.Queued, Limit: lim.Limit, FloorMs: ms(lim.Floor), LatencyMs: ms(lim.Latency), Limited: lim.Limited,
				LimitDecisions: lim.Decisions,
			})
			if m.kind != Unary {
				ss.Methods[len(ss.Methods)-1].Streams = m.streamStatus(now, s.started)
			}
		}
		slices.SortFunc(ss.Methods, func(a, b admin.MethodStatus) int { return strings.Compare(a.Name, b.Name) })
		st.Services = append(st.Services, ss)
	}
	s.mu.Unlock()
	slices.SortFunc(st.Services, func(a, b admin.ServiceStatus) int { return strings.Compare(a.Name, b.Name) })

	sched := s.sched.Stats()
	st.Scheduler = admin.SchedulerStatus{
		Workers: sched.Workers, Elastic: sched.Elastic, MaxInFlight: sched.MaxInFlight,
		CPUWaitMs: ms(sched.CPUWait), CPUCongested: sched.CPUCongested,
		Running: sched.Running, Queued: sched.Queued[:],
		Overloaded: sched.Overloaded, Ran: sched.Ran, Dropped: map[string]uint64{},
	}
	for _, r := range shed.Reasons() {
		st.Scheduler.Dropped[r.String()] = sched.DroppedFor(r)
	}
	st.Scheduler.DroppedByPriority = make([]uint64, len(s.hist.droppedAt))
	for p := range s.hist.droppedAt {
		st.Scheduler.DroppedByPriority[p] = s.hist.droppedAt[p].Load()
	}
	st.Clients = clientStatuses()
	st.Health = []admin.HealthStatus{}
	for _, h := range s.hooks.checks.Cached(ctx) {
		hs := admin.HealthStatus{Name: h.Name, OK: h.Err == nil, TookMs: ms(h.Took)}
		if h.Err != nil {
			hs.Error = h.Err.Error()
		}
		st.Health = append(st.Health, hs)
	}
	return st
}

// liveClients are the process's open Clients, for the status page.
var liveClients struct {
	sync.Mutex
	m map[*Client]struct{}
}

func trackClient(c *Client) {
	liveClients.Lock()
	defer liveClients.Unlock()
	if liveClients.m == nil {
		liveClients.m = make(map[*Client]struct{})
	}
	liveClients.m[c] = struct{}{}
}

func untrackClient(c *Client) {
	liveClients.Lock()
	defer liveClients.Unlock()
	delete(liveClients.m, c)
}

func clientStatuses() []admin.ClientStatus {
	liveClients.Lock()
	cs := make([]*Client, 0, len(liveClients.m))
	for c := range liveClients.m {
		cs = append(cs, c)
	}
	liveClients.Unlock()
	out := make([]admin.ClientStatus, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.status())
	}
	slices.SortFunc(out, func(a, b admin.ClientStatus) int { return strings.Compare(a.Target, b.Target) })
	return out
}

// status reports the client and its providers.
func (c *Client) status() admin.ClientStatus {
	cs := admin.ClientStatus{
		Target: c.target, Calls: c.stats.Calls.Load(), Errors: c.stats.Errors.Load(),
		Retries: c.retries.total(), Budget: c.budget.Balance(),
		ConnEnded: admin.ConnEndedStatus{Unsent: c.connEnded.unsent.Load(), Failed: c.connEnded.failed.Load()},
		Streams:   c.streamStatus(),
	}
	var eps []*endpoint
	if c.single != nil {
		eps = append(eps, c.single)
	}
	if c.group != nil {
		cs.Balancer = c.opts.balancer.Name()
		d := admin.DiscoveryStatus(c.group.discovery())
		cs.Discovery = &d
		if c.opts.hedging != nil || c.hedge.any.Load() {
			h := admin.HedgeStatus(c.HedgeStats())
			cs.Hedges = &h
		}
		c.group.mu.Lock()
		eps = slices.Clone(c.group.endpoints)
		c.group.mu.Unlock()
	}
	now := time.Now()
	for _, ep := range eps {
		until := ep.ejectedUntil()
		ps := admin.ProviderStatus{
			ID: ep.id, Address: ep.inst.Address, Weight: ep.Weight(), InFlight: ep.InFlight(), Streams: ep.Streams(),
			Calls: ep.stats.Calls.Load(), Errors: ep.stats.Errors.Load(), Unlisted: ep.unlisted.Load(),
			NotServing: ep.notServing.Load(),
		}
		if until.After(now) {
			ps.Ejected, ps.EjectedUntil = true, until
		}
		if c.group == nil { // one server: its calls are the client's
			ps.Calls, ps.Errors = cs.Calls, cs.Errors
		}
		cs.Providers = append(cs.Providers, ps)
	}
	return cs
}

package kiev

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kievrpc/kiev/shed"
)

// Status is a snapshot of a Server and of the Clients of its process, as
// the status page (/debug/kiev, see Server.AdminHandler) shows it and its
// JSON twin serves it. Latencies are in milliseconds. Rates cover the
// last minute, and the latency percentiles its last 55 to 60 seconds:
// they are interpolated within buckets at most an eighth of their lower
// bound wide, so up to 42s they are off by less than an eighth.
type Status struct {
	Time        time.Time       `json:"time"`
	UptimeSec   float64         `json:"uptime_sec"`
	Connections int             `json:"connections"`
	InFlight    int64           `json:"in_flight"`
	Services    []ServiceStatus `json:"services"`
	Scheduler   SchedulerStatus `json:"scheduler"`
	Clients     []ClientStatus  `json:"clients"`
	Health      []HealthStatus  `json:"health"` // [] with no checks, never null
}

// ServiceStatus is one registered service.
type ServiceStatus struct {
	Name    string         `json:"name"`
	Methods []MethodStatus `json:"methods"`
}

// MethodStatus is one method's calls: totals since the server started,
// and the last minute's.
type MethodStatus struct {
	Name        string  `json:"name"`
	Calls       int64   `json:"calls"`
	Errors      int64   `json:"errors"`
	MinuteCalls int64   `json:"minute_calls"`
	MinuteErrs  int64   `json:"minute_errors"`
	Rate        float64 `json:"rate"` // calls per second over the last minute
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	// InFlight is how many of its calls are past its limit (waiting for
	// a worker or running), and Queued how many wait in its lane for room
	// under the limit; Limit is its adaptive concurrency limit (0 while
	// off), driven by its service time (LatencyMs, the last window's
	// average) against its floor (FloorMs); Limited counts the calls
	// refused at the limit (ErrLimited).
	InFlight  int     `json:"in_flight"`
	Queued    int     `json:"queued"`
	Limit     int     `json:"limit"`
	FloorMs   float64 `json:"floor_ms"`
	LatencyMs float64 `json:"latency_ms"`
	Limited   uint64  `json:"limited"`
}

// SchedulerStatus is the overload scheduler's state. Workers is the limit
// on calls running at once now: fixed, or the elastic limit (Elastic)
// under its ceiling MaxInFlight, which stops growing while CPUCongested.
// CPUWaitMs is how long goroutines waited for a CPU (90th percentile) at
// the last reading.
type SchedulerStatus struct {
	Workers      int     `json:"workers"`
	Elastic      bool    `json:"elastic"`
	MaxInFlight  int     `json:"max_in_flight"`
	CPUWaitMs    float64 `json:"cpu_wait_ms"`
	CPUCongested bool    `json:"cpu_congested"`

	Running    int               `json:"running"`
	Queued     []int             `json:"queued"` // by priority, 0 to 9
	Overloaded bool              `json:"overloaded"`
	Ran        uint64            `json:"ran"`
	Dropped    map[string]uint64 `json:"dropped"` // by reason
}

// ClientStatus is one Client of the process and the providers it sees.
type ClientStatus struct {
	Target    string           `json:"target"`
	Balancer  string           `json:"balancer,omitempty"`
	Calls     int64            `json:"calls"`
	Errors    int64            `json:"errors"`
	Retries   int64            `json:"retries"`
	Budget    float64          `json:"retry_budget"` // retries the budget holds now
	Providers []ProviderStatus `json:"providers"`
	// Discovery is how the discovery of a service client's providers
	// fares (see Client.Discovery); nil for a client of one address.
	Discovery *DiscoveryStatus `json:"discovery,omitempty"`
	// Hedges counts the client's hedges (see Hedging); nil for a client
	// that hedges no method.
	Hedges *HedgeStats `json:"hedges,omitempty"`
}

// ProviderStatus is one provider as its client's balancer sees it.
type ProviderStatus struct {
	ID           string    `json:"id"`
	Address      string    `json:"address"`
	Weight       int       `json:"weight"`
	InFlight     int       `json:"in_flight"`
	Calls        int64     `json:"calls"`
	Errors       int64     `json:"errors"`
	Ejected      bool      `json:"ejected"`
	EjectedUntil time.Time `json:"ejected_until,omitzero"`
	Unlisted     bool      `json:"unlisted,omitempty"`
	NotServing   bool      `json:"not_serving,omitempty"` // its health service says so (WithHealthCheck)
}

// HealthStatus is the outcome of one health check.
type HealthStatus struct {
	Name   string  `json:"name"`
	OK     bool    `json:"ok"`
	Error  string  `json:"error,omitempty"`
	TookMs float64 `json:"took_ms"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Status returns the server's status, with the results of its health
// checks, run within ctx unless a run less than HealthCacheTTL old is at
// hand.
func (s *Server) Status(ctx context.Context) Status {
	now := time.Now()
	st := Status{Time: now, UptimeSec: now.Sub(s.started).Seconds(), InFlight: s.inFlight.Load()}
	s.mu.Lock()
	st.Connections = len(s.conns)
	for name, methods := range s.services {
		if isBuiltin(name) {
			continue
		}
		ss := ServiceStatus{Name: name}
		for mname, m := range methods {
			w := m.stats.summary(now)
			lim := m.cost.Limit()
			ss.Methods = append(ss.Methods, MethodStatus{
				Name: mname, Calls: m.stats.calls.Load(), Errors: m.stats.errors.Load(),
				MinuteCalls: w.Calls, MinuteErrs: w.Errors, Rate: w.Rate,
				P50Ms: ms(w.P50), P99Ms: ms(w.P99),
				InFlight: lim.InFlight, Queued: lim.Queued, Limit: lim.Limit, FloorMs: ms(lim.Floor), LatencyMs: ms(lim.Latency), Limited: lim.Limited,
			})
		}
		slices.SortFunc(ss.Methods, func(a, b MethodStatus) int { return strings.Compare(a.Name, b.Name) })
		st.Services = append(st.Services, ss)
	}
	s.mu.Unlock()
	slices.SortFunc(st.Services, func(a, b ServiceStatus) int { return strings.Compare(a.Name, b.Name) })

	sched := s.sched.Stats()
	st.Scheduler = SchedulerStatus{
		Workers: sched.Workers, Elastic: sched.Elastic, MaxInFlight: sched.MaxInFlight,
		CPUWaitMs: ms(sched.CPUWait), CPUCongested: sched.CPUCongested,
		Running: sched.Running, Queued: sched.Queued[:],
		Overloaded: sched.Overloaded, Ran: sched.Ran, Dropped: map[string]uint64{},
	}
	for _, r := range shed.Reasons() {
		st.Scheduler.Dropped[r.String()] = sched.DroppedFor(r)
	}
	st.Clients = clientStatuses()
	st.Health = []HealthStatus{}
	for _, h := range s.cachedHealth(ctx) {
		hs := HealthStatus{Name: h.Name, OK: h.Err == nil, TookMs: ms(h.Took)}
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

func clientStatuses() []ClientStatus {
	liveClients.Lock()
	cs := make([]*Client, 0, len(liveClients.m))
	for c := range liveClients.m {
		cs = append(cs, c)
	}
	liveClients.Unlock()
	out := make([]ClientStatus, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.status())
	}
	slices.SortFunc(out, func(a, b ClientStatus) int { return strings.Compare(a.Target, b.Target) })
	return out
}

// status reports the client and its providers.
func (c *Client) status() ClientStatus {
	cs := ClientStatus{
		Target: c.target, Calls: c.stats.calls.Load(), Errors: c.stats.errors.Load(),
		Retries: c.retries.Load(), Budget: float64(c.budget.balance.Load()) / 1000,
	}
	var eps []*endpoint
	if c.single != nil {
		eps = append(eps, c.single)
	}
	if c.group != nil {
		cs.Balancer = c.opts.balancer.Name()
		d := c.group.discovery()
		cs.Discovery = &d
		if c.opts.hedging != nil || c.hedge.any.Load() {
			h := c.HedgeStats()
			cs.Hedges = &h
		}
		c.group.mu.Lock()
		eps = slices.Clone(c.group.endpoints)
		c.group.mu.Unlock()
	}
	now := time.Now()
	for _, ep := range eps {
		until := ep.ejectedUntil()
		ps := ProviderStatus{
			ID: ep.id, Address: ep.inst.Address, Weight: ep.Weight(), InFlight: ep.InFlight(),
			Calls: ep.stats.calls.Load(), Errors: ep.stats.errors.Load(), Unlisted: ep.unlisted.Load(),
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

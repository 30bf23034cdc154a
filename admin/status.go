package admin

import (
	"time"

	"github.com/kievrpc/kiev/shed"
)

// Status is a snapshot of a kiev.Server and of the Clients of its
// process, as the status page (/debug/kiev, see NewHandler) shows it and its
// JSON twin serves it. Latencies are in milliseconds. Rates cover the
// last minute, or the time since the server started if that is shorter
// (a method's WindowSec says which), and the latency percentiles the
// last 55 to 60 seconds:
// they are interpolated within buckets at most an eighth of their lower
// bound wide, so up to 42s they are off by less than an eighth.
type Status struct {
	Time        time.Time       `json:"time"`
	UptimeSec   float64         `json:"uptime_sec"`
	AdminAddr   string          `json:"admin_addr,omitempty"` // where kiev.WithAdmin serves the admin pages, if it does
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
// and the last minute's. The minute's counts and rates cover WindowSec
// seconds: the last minute, or the time since the server started if that
// is shorter.
type MethodStatus struct {
	Name        string  `json:"name"`
	Calls       int64   `json:"calls"`
	Errors      int64   `json:"errors"`
	MinuteCalls int64   `json:"minute_calls"`
	MinuteErrs  int64   `json:"minute_errors"`
	WindowSec   float64 `json:"window_sec"` // the seconds MinuteCalls, Rate and ErrRate cover
	Rate        float64 `json:"rate"`       // calls per second over WindowSec
	ErrRate     float64 `json:"error_rate"` // errors per second over WindowSec
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	// InFlight is how many of its calls are past its limit (waiting for
	// a worker or running), and Queued how many wait in its lane for room
	// under the limit; Limit is its adaptive concurrency limit (0 while
	// off), driven by its service time (LatencyMs, the last window's
	// average) against its floor (FloorMs); Limited counts the calls
	// refused at the limit (kiev.ErrLimited).
	InFlight  int     `json:"in_flight"`
	Queued    int     `json:"queued"`
	Limit     int     `json:"limit"`
	FloorMs   float64 `json:"floor_ms"`
	LatencyMs float64 `json:"latency_ms"`
	Limited   uint64  `json:"limited"`
	// LimitDecisions are its limit's last decisions, oldest first: which
	// rule fired (a surge, congestion, the CPU's veto…), on what signal,
	// with how many calls in flight.
	LimitDecisions []shed.Decision `json:"limit_decisions,omitempty"`
	// Streams counts a stream method's streams and their messages; nil
	// for a unary method.
	Streams *StreamStatus `json:"streams,omitempty"`
}

// StreamStatus is a stream method's streams: open now (their handlers
// running), opened since the server started, and their messages and
// encoded bytes each way, in (from clients) and out (to them). A stream
// counts as a call once it ends, in its method's calls, errors and
// latencies. The rates are per second over WindowSec: the last minute,
// from the oldest of the readings the server's history takes every
// HistoryEvery in it (so that a message costs no clock read), or the time
// since the server started if there is none.
type StreamStatus struct {
	Kind        string  `json:"kind"` // "server stream", "client stream" or "bidirectional stream"
	Open        int64   `json:"open"`
	Opened      int64   `json:"opened"`
	MsgsIn      int64   `json:"messages_in"`
	MsgsOut     int64   `json:"messages_out"`
	BytesIn     int64   `json:"bytes_in"`
	BytesOut    int64   `json:"bytes_out"`
	MsgInRate   float64 `json:"message_in_rate"`
	MsgOutRate  float64 `json:"message_out_rate"`
	ByteInRate  float64 `json:"byte_in_rate"`
	ByteOutRate float64 `json:"byte_out_rate"`
	WindowSec   float64 `json:"window_sec"` // the seconds the rates cover
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
	// DroppedByPriority counts the calls the scheduler dropped (for any
	// reason but the server's WithMaxConcurrentCalls), by priority, 0 to 9.
	DroppedByPriority []uint64 `json:"dropped_by_priority"`
}

// ClientStatus is one kiev.Client of the process and the providers it sees.
type ClientStatus struct {
	Target    string           `json:"target"`
	Balancer  string           `json:"balancer,omitempty"`
	Calls     int64            `json:"calls"`
	Errors    int64            `json:"errors"`
	Retries   int64            `json:"retries"`
	Budget    float64          `json:"retry_budget"`           // retries the budget holds now
	ConnEnded ConnEndedStatus  `json:"connection_ended_calls"` // calls pending on its connections as they ended
	Providers []ProviderStatus `json:"providers"`
	// Discovery is how the discovery of a service client's providers
	// fares (kiev.Client.Discovery); nil for a client of one address.
	Discovery *DiscoveryStatus `json:"discovery,omitempty"`
	// Hedges counts the client's hedges (kiev.Hedging); nil for a client
	// that hedges no method.
	Hedges *HedgeStatus `json:"hedges,omitempty"`
	// Streams counts the client's streams; nil for a client that never
	// opened one.
	Streams *ClientStreamStatus `json:"streams,omitempty"`
}

// ConnEndedStatus counts the calls pending on a client's connections as
// they ended, the server closing one after draining, or it being lost:
// Unsent, those the server said it never read, which failed as not sent
// and were retried as the client's retry policy allowed, and Failed, those
// sent whose outcome was lost, which failed unless retried as idempotent.
type ConnEndedStatus struct {
	Unsent int64 `json:"unsent"`
	Failed int64 `json:"failed"`
}

// ClientStreamStatus is a client's streams: open now, opened, leaked
// (dropped without Close, nor an error from Recv, nor their context's
// end, and canceled once the garbage collector found them), and their
// messages and encoded bytes, in (from servers) and out (to them).
type ClientStreamStatus struct {
	Open     int64 `json:"open"`
	Opened   int64 `json:"opened"`
	Leaked   int64 `json:"leaked"`
	MsgsIn   int64 `json:"messages_in"`
	MsgsOut  int64 `json:"messages_out"`
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
}

// DiscoveryStatus is how a client's discovery of its providers fares, as
// kiev.DiscoveryStatus says.
type DiscoveryStatus struct {
	Resolved     bool      `json:"resolved"`
	Updated      time.Time `json:"updated,omitzero"`
	Error        string    `json:"error,omitempty"`
	FailingSince time.Time `json:"failing_since,omitzero"`
}

// HedgeStatus counts a client's hedged copies of calls, as kiev.HedgeStats
// says: sent, won, and not sent for want of budget or for overload.
type HedgeStatus struct {
	Sent     int64 `json:"sent"`
	Won      int64 `json:"won"`
	NoBudget int64 `json:"no_budget"`
	Overload int64 `json:"overload"`
}

// ProviderStatus is one provider as its client's balancer sees it.
type ProviderStatus struct {
	ID           string    `json:"id"`
	Address      string    `json:"address"`
	Weight       int       `json:"weight"`
	InFlight     int       `json:"in_flight"`
	Streams      int       `json:"streams,omitempty"` // streams open to it
	Calls        int64     `json:"calls"`
	Errors       int64     `json:"errors"`
	Ejected      bool      `json:"ejected"`
	EjectedUntil time.Time `json:"ejected_until,omitzero"`
	Unlisted     bool      `json:"unlisted,omitempty"`
	NotServing   bool      `json:"not_serving,omitempty"` // its health service says so (kiev.WithHealthCheck)
}

// HealthStatus is the outcome of one health check (kiev.Server.RegisterHealth).
type HealthStatus struct {
	Name   string  `json:"name"`
	OK     bool    `json:"ok"`
	Error  string  `json:"error,omitempty"`
	TookMs float64 `json:"took_ms"`
}

package mongo

import (
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Label bounds. A metric's series are bounded by the number of label
// values; command names are the driver's and the code's, and collections
// are the schema's, so both are bounded in a sane service. These caps keep
// one that names collections after users or dates from flooding the
// monitor: past them, new values count under OtherLabel.
const (
	MaxCommandLabels    = 64
	MaxCollectionLabels = 100
	// OtherLabel stands for the commands and collections past the caps.
	OtherLabel = "_other"
)

// Outcomes, the values of kiev_mongo_commands_total's outcome label.
const (
	outcomeOK       = "ok"       // the server answered ok
	outcomeError    = "error"    // the server answered with an error, or the connection failed
	outcomeTimeout  = "timeout"  // the operation's deadline passed, on either side
	outcomeCanceled = "canceled" // the operation's context was canceled
)

// durationBuckets are kiev_mongo_command_duration_seconds' buckets, from
// 0.5 ms to 10 s.
var durationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// metrics are a Client's collectors. Each carries the constant label
// client=Options.Name, so Clients of different names register side by side.
type metrics struct {
	commands    *prometheus.CounterVec   // command, collection, outcome
	duration    *prometheus.HistogramVec // command
	pool        *prometheus.GaugeVec     // state: open, in_use
	checkoutErr *prometheus.CounterVec   // reason
	poolCleared prometheus.Counter

	open, inUse prometheus.Gauge

	reg   prometheus.Registerer
	owned []prometheus.Collector // registered by this Client; unregistered by Close

	mu     sync.RWMutex
	series map[seriesKey]*series
}

type seriesKey struct{ command, collection string }

// series are the counters and histogram of one command on one
// collection, looked up once and kept, so that counting a command
// allocates nothing.
type series struct {
	ok, failed, timeout, canceled prometheus.Counter
	duration                      prometheus.Observer
}

func (s *series) count(outcome string) {
	switch outcome {
	case outcomeOK:
		s.ok.Inc()
	case outcomeTimeout:
		s.timeout.Inc()
	case outcomeCanceled:
		s.canceled.Inc()
	default:
		s.failed.Inc()
	}
}

// newMetrics makes the collectors of the Client named name and registers
// them on reg. Where reg already holds equal collectors, of another Client
// with the same name, they are shared: both Clients count into the same
// series, and only the first one's Close unregisters them.
func newMetrics(reg prometheus.Registerer, name string) (*metrics, error) {
	m := &metrics{reg: reg, series: make(map[seriesKey]*series)}
	client := prometheus.Labels{"client": name}
	var err error
	m.commands, err = register(m, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "kiev_mongo_commands_total",
		Help:        "MongoDB commands that got an answer or failed, by command, collection (for the commands that name one) and outcome (ok, error, timeout, canceled).",
		ConstLabels: client,
	}, []string{"command", "collection", "outcome"}))
	if err == nil {
		m.duration, err = register(m, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "kiev_mongo_command_duration_seconds",
			Help:        "Time from sending a MongoDB command to its answer or failure, by command.",
			ConstLabels: client,
			Buckets:     durationBuckets,
		}, []string{"command"}))
	}
	if err == nil {
		m.pool, err = register(m, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name:        "kiev_mongo_pool_connections",
			Help:        "Connections of the MongoDB pools, by state: open, and in_use (checked out); the idle ones are open minus in_use.",
			ConstLabels: client,
		}, []string{"state"}))
	}
	if err == nil {
		m.checkoutErr, err = register(m, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "kiev_mongo_pool_checkout_failures_total",
			Help:        "Failures to get a connection from a MongoDB pool, by reason: connectionError, timeout, poolClosed.",
			ConstLabels: client,
		}, []string{"reason"}))
	}
	if err == nil {
		m.poolCleared, err = register(m, prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "kiev_mongo_pool_cleared_total",
			Help:        "Times a MongoDB pool was cleared because its server failed; each clear closes the pool's connections.",
			ConstLabels: client,
		}))
	}
	if err != nil {
		m.unregister()
		return nil, fmt.Errorf("%w: Registerer refused the metrics of the client named %q: %w", ErrOptions, name, err)
	}
	m.open = m.pool.WithLabelValues("open")
	m.inUse = m.pool.WithLabelValues("in_use")
	return m, nil
}

// register registers c on m.reg, or returns the equal collector already
// there.
func register[C prometheus.Collector](m *metrics, c C) (C, error) {
	err := m.reg.Register(c)
	if err == nil {
		m.owned = append(m.owned, c)
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// unregister removes the collectors this Client registered.
func (m *metrics) unregister() {
	for _, c := range m.owned {
		m.reg.Unregister(c)
	}
	m.owned = nil
}

// seriesFor returns the series of command on collection.
func (m *metrics) seriesFor(command, collection string) *series {
	k := seriesKey{command, collection}
	m.mu.RLock()
	s := m.series[k]
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.series[k]; s != nil {
		return s
	}
	s = &series{
		ok:       m.commands.WithLabelValues(command, collection, outcomeOK),
		failed:   m.commands.WithLabelValues(command, collection, outcomeError),
		timeout:  m.commands.WithLabelValues(command, collection, outcomeTimeout),
		canceled: m.commands.WithLabelValues(command, collection, outcomeCanceled),
		duration: m.duration.WithLabelValues(command),
	}
	m.series[k] = s
	return s
}

// labelSet maps label values to themselves up to a number of them, and
// any more, and any that is not valid UTF-8, to OtherLabel. Its methods
// are safe for concurrent use.
type labelSet struct {
	max int
	mu  sync.RWMutex
	m   map[string]string
}

func newLabelSet(max int) *labelSet {
	return &labelSet{max: max, m: make(map[string]string)}
}

// of returns the label for v.
func (l *labelSet) of(v string) string {
	l.mu.RLock()
	s, ok := l.m[v]
	l.mu.RUnlock()
	if ok {
		return s
	}
	return l.add(v)
}

// ofBytes returns the label for string(b), allocating only the first time
// b is seen.
func (l *labelSet) ofBytes(b []byte) string {
	l.mu.RLock()
	s, ok := l.m[string(b)]
	l.mu.RUnlock()
	if ok {
		return s
	}
	return l.add(string(b))
}

func (l *labelSet) add(v string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.m[v]; ok {
		return s
	}
	if len(l.m) >= l.max || !utf8.ValidString(v) { // Prometheus refuses invalid UTF-8
		return OtherLabel
	}
	l.m[v] = v
	return v
}

package redis

import (
	"github.com/kievrpc/kiev/internal/promreg"

	"github.com/prometheus/client_golang/prometheus"
)

// The metrics of every Client, labelled with its Name as "client":
//
//	kiev_redis_commands_total{client,command,outcome}     counter
//	kiev_redis_command_duration_seconds{client,command}   histogram
//	kiev_redis_pool_connections{client,state}             gauge
//	kiev_redis_pool_timeouts_total{client}                counter
//
// command is go-redis's lower-case name ("get", "hset"); outcome is "ok"
// or "error": a missing key (redis.Nil) is "ok", a command not sent as
// its ctx had ended an "error". Each command of a
// pipeline counts under its name; the duration of a pipeline, one round
// trip, is observed under "pipeline" (or "multi" for a transaction). The
// pool's state is "idle" or "in_use"; timeouts are waits for a free
// connection that gave up.
const (
	metricCommands     = "kiev_redis_commands_total"
	metricDuration     = "kiev_redis_command_duration_seconds"
	metricPoolConns    = "kiev_redis_pool_connections"
	metricPoolTimeouts = "kiev_redis_pool_timeouts_total"
)

// maxCommandLabels caps the command names a Client labels; later names
// count as "other", so that a program sending made-up commands with Do
// cannot grow the metrics without bound.
const maxCommandLabels = 256

// vectors are the metric vectors, shared by the Clients of a Registerer.
type vectors struct {
	commands *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// registerVectors registers the vectors on reg, or finds those a Client
// registered before.
func registerVectors(reg prometheus.Registerer) (vectors, error) {
	var v vectors
	var err error
	v.commands, err = promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricCommands,
		Help: "Redis commands run by kiev's Redis clients, by command and outcome (ok or error; a missing key is ok).",
	}, []string{"client", "command", "outcome"}))
	if err != nil {
		return v, err
	}
	v.duration, err = promreg.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    metricDuration,
		Help:    "Time from sending a Redis command, or a pipeline, to its reply, retries included.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12), // 100µs to 2.4s
	}, []string{"client", "command"}))
	return v, err
}

// cmdMetrics are the metrics of one command name of one Client.
type cmdMetrics struct {
	ok, failed prometheus.Counter
	duration   prometheus.Observer
}

// commandMetrics holds a Client's cmdMetrics by command name.
type commandMetrics struct {
	client string
	v      vectors
	series promreg.Series[string, *cmdMetrics]
}

func newCommandMetrics(client string, v vectors) *commandMetrics {
	return &commandMetrics{client: client, v: v}
}

// get returns the metrics of the command name.
func (cm *commandMetrics) get(name string) *cmdMetrics {
	return cm.series.Get(name, maxCommandLabels, func(overflow bool) *cmdMetrics {
		label := commandLabel(name)
		if overflow {
			label = "other"
		}
		return &cmdMetrics{
			ok:       cm.v.commands.WithLabelValues(cm.client, label, "ok"),
			failed:   cm.v.commands.WithLabelValues(cm.client, label, "error"),
			duration: cm.v.duration.WithLabelValues(cm.client, label),
		}
	})
}

// forget removes the Client's series from the shared vectors.
func (cm *commandMetrics) forget() {
	l := prometheus.Labels{"client": cm.client}
	cm.v.commands.DeletePartialMatch(l)
	cm.v.duration.DeletePartialMatch(l)
}

// poolCollector exports a Client's pool statistics when scraped. Its
// descriptions carry the Client's name as a constant label, so each
// Client registers its own, and a second Client of the same name on a
// Registerer is refused.
type poolCollector struct {
	c        *Client
	conns    *prometheus.Desc
	timeouts *prometheus.Desc
}

func newPoolCollector(c *Client) *poolCollector {
	l := prometheus.Labels{"client": c.name}
	return &poolCollector{
		c:        c,
		conns:    prometheus.NewDesc(metricPoolConns, "Connections in the pools of kiev's Redis clients, by state (idle or in_use).", []string{"state"}, l),
		timeouts: prometheus.NewDesc(metricPoolTimeouts, "Waits for a free connection of kiev's Redis clients that timed out.", nil, l),
	}
}

func (p *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- p.conns
	ch <- p.timeouts
}

func (p *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := p.c.UniversalClient.PoolStats()
	idle := float64(s.IdleConns)
	ch <- prometheus.MustNewConstMetric(p.conns, prometheus.GaugeValue, idle, "idle")
	ch <- prometheus.MustNewConstMetric(p.conns, prometheus.GaugeValue, float64(s.TotalConns)-idle, "in_use")
	ch <- prometheus.MustNewConstMetric(p.timeouts, prometheus.CounterValue, float64(s.Timeouts))
}

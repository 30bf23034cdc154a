package mysql

import (
	"database/sql"
	"github.com/kievrpc/kiev/internal/promreg"

	"github.com/prometheus/client_golang/prometheus"
)

// The metrics of every DB, labelled with its Name as "client":
//
//	kiev_mysql_queries_total{client,table,operation,outcome}   counter
//	kiev_mysql_query_duration_seconds{client,table,operation}  histogram
//	kiev_mysql_pool_connections{client,state}                  gauge
//	kiev_mysql_pool_waits_total{client}                        counter
//	kiev_mysql_pool_wait_seconds_total{client}                 counter
//
// table is gorm's table name, empty for raw SQL; operation is gorm's
// processor: "create", "query", "update", "delete", "row" (Row, Rows, Raw
// with Scan) or "raw" (Exec);
// outcome is "ok" or "error", and gorm.ErrRecordNotFound is "ok". The
// pool's state is "idle" or "in_use", summed over the primary and the
// replicas; waits are those for a free connection.
const (
	metricQueries      = "kiev_mysql_queries_total"
	metricDuration     = "kiev_mysql_query_duration_seconds"
	metricPoolConns    = "kiev_mysql_pool_connections"
	metricPoolWaits    = "kiev_mysql_pool_waits_total"
	metricPoolWaitTime = "kiev_mysql_pool_wait_seconds_total"
)

// maxTableLabels caps the tables a DB labels; later tables count as
// "other", so that tables made per day or per tenant cannot grow the
// metrics without bound.
const maxTableLabels = 256

// vectors are the metric vectors, shared by the DBs of a Registerer.
type vectors struct {
	queries  *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// registerVectors registers the vectors on reg, or finds those a DB
// registered before.
func registerVectors(reg prometheus.Registerer) (vectors, error) {
	var v vectors
	var err error
	v.queries, err = promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricQueries,
		Help: "SQL statements run by kiev's MySQL clients, by table, gorm operation and outcome (ok or error; no record found is ok).",
	}, []string{"client", "table", "operation", "outcome"}))
	if err != nil {
		return v, err
	}
	v.duration, err = promreg.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    metricDuration,
		Help:    "Time of a gorm operation of kiev's MySQL clients, from its first callback to its last.",
		Buckets: prometheus.ExponentialBuckets(0.0002, 2.5, 12), // 200µs to 4.8s
	}, []string{"client", "table", "operation"}))
	return v, err
}

// opKey names the metrics of one table and operation.
type opKey struct{ table, op string }

// opMetrics are the metrics of one table and operation of one DB.
type opMetrics struct {
	ok, failed prometheus.Counter
	duration   prometheus.Observer
}

// queryMetrics holds a DB's opMetrics.
type queryMetrics struct {
	client string
	v      vectors
	series promreg.Series[opKey, *opMetrics]
}

func newQueryMetrics(client string, v vectors) *queryMetrics {
	return &queryMetrics{client: client, v: v}
}

// get returns the metrics of the table and operation.
func (qm *queryMetrics) get(table, op string) *opMetrics {
	return qm.series.Get(opKey{table, op}, maxTableLabels, func(overflow bool) *opMetrics {
		label := table
		if overflow {
			label = "other"
		}
		return &opMetrics{
			ok:       qm.v.queries.WithLabelValues(qm.client, label, op, "ok"),
			failed:   qm.v.queries.WithLabelValues(qm.client, label, op, "error"),
			duration: qm.v.duration.WithLabelValues(qm.client, label, op),
		}
	})
}

// forget removes the DB's series from the shared vectors.
func (qm *queryMetrics) forget() {
	l := prometheus.Labels{"client": qm.client}
	qm.v.queries.DeletePartialMatch(l)
	qm.v.duration.DeletePartialMatch(l)
}

// poolCollector exports a DB's pool statistics when scraped. Its
// descriptions carry the DB's name as a constant label, so each DB
// registers its own, and a second DB of the same name on a Registerer is
// refused.
type poolCollector struct {
	db                     *DB
	conns, waits, waitTime *prometheus.Desc
}

func newPoolCollector(db *DB) *poolCollector {
	l := prometheus.Labels{"client": db.name}
	return &poolCollector{
		db:       db,
		conns:    prometheus.NewDesc(metricPoolConns, "Connections in the pools of kiev's MySQL clients, by state (idle or in_use).", []string{"state"}, l),
		waits:    prometheus.NewDesc(metricPoolWaits, "Waits for a free connection of kiev's MySQL clients.", nil, l),
		waitTime: prometheus.NewDesc(metricPoolWaitTime, "Time spent waiting for a free connection by kiev's MySQL clients.", nil, l),
	}
}

func (p *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- p.conns
	ch <- p.waits
	ch <- p.waitTime
}

func (p *poolCollector) Collect(ch chan<- prometheus.Metric) {
	var sum sql.DBStats
	for _, s := range p.db.poolStats() {
		sum.Idle += s.Idle
		sum.InUse += s.InUse
		sum.WaitCount += s.WaitCount
		sum.WaitDuration += s.WaitDuration
	}
	ch <- prometheus.MustNewConstMetric(p.conns, prometheus.GaugeValue, float64(sum.Idle), "idle")
	ch <- prometheus.MustNewConstMetric(p.conns, prometheus.GaugeValue, float64(sum.InUse), "in_use")
	ch <- prometheus.MustNewConstMetric(p.waits, prometheus.CounterValue, float64(sum.WaitCount))
	ch <- prometheus.MustNewConstMetric(p.waitTime, prometheus.CounterValue, sum.WaitDuration.Seconds())
}

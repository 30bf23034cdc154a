package config

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Prometheus metrics of a Client, read from its Stats when scraped. Every
// series carries the Client's Options.Name as its "client" label.
var (
	descLoads   = prometheus.NewDesc("kiev_config_loads_total", "Successful reads of the config source.", []string{"client"}, nil)
	descChanges = prometheus.NewDesc("kiev_config_changes_total", "Configuration changes delivered.", []string{"client"}, nil)
	descErrors  = prometheus.NewDesc("kiev_config_errors_total", "Failed reads of the config source.", []string{"client"}, nil)
	descUp      = prometheus.NewDesc("kiev_config_source_up", "1 while the last read of the config source succeeded.", []string{"client"}, nil)
	descFetch   = prometheus.NewDesc("kiev_config_last_fetch_timestamp_seconds", "When the config source was last read successfully.", []string{"client"}, nil)
	descSnap    = prometheus.NewDesc("kiev_config_from_snapshot", "1 while the configuration is the snapshot file's.", []string{"client"}, nil)
)

type collector struct {
	c    *Client
	name string
}

func (col collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLoads, descChanges, descErrors, descUp, descFetch, descSnap} {
		ch <- d
	}
}

func (col collector) Collect(ch chan<- prometheus.Metric) {
	st := col.c.Stats()
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	fetch := 0.0
	if !st.LastFetch.IsZero() {
		fetch = float64(st.LastFetch.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(descLoads, prometheus.CounterValue, float64(st.Loads), col.name)
	ch <- prometheus.MustNewConstMetric(descChanges, prometheus.CounterValue, float64(st.Changes), col.name)
	ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(st.Errors), col.name)
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, b(st.Up), col.name)
	ch <- prometheus.MustNewConstMetric(descFetch, prometheus.GaugeValue, fetch, col.name)
	ch <- prometheus.MustNewConstMetric(descSnap, prometheus.GaugeValue, b(st.FromSnapshot), col.name)
}

// registerMetrics registers the Client's collector. A collector of the
// same Name already there is a configuration mistake, logged, not fatal.
func (c *Client) registerMetrics(reg prometheus.Registerer, name string) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	col := collector{c, name}
	if err := reg.Register(col); err != nil {
		if errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			c.log.Warn("kiev/clients/config: metrics not registered: another config Client has the same Options.Name", "name", name)
		} else {
			c.log.Warn("kiev/clients/config: metrics not registered", "err", err)
		}
		return
	}
	c.unregister = func() { reg.Unregister(col) }
}

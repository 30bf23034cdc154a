package callstats

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Histogram turns latency buckets into a Prometheus histogram, with a
// bound at each doubling of latBase: 10µs, 20µs, ... about 42s. The
// finer buckets between them serve the status page's percentiles.
func Histogram(desc *prometheus.Desc, s *Totals, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, latOctaves+1)
	var n uint64
	for i := range latBuckets {
		if i >= latSub && i%latSub == 0 { // a doubling of latBase
			buckets[latLower(i).Seconds()] = n
		}
		n += uint64(s.Lat[i].Load())
	}
	return prometheus.MustNewConstHistogram(desc, n, time.Duration(s.LatSum.Load()).Seconds(), buckets, labels...)
}

// CodeCounters sends one counter per code s has seen, labelled with
// labels and then the code's name: names[i] for code i, "User" for codes
// of NumCodes and up.
func CodeCounters(ch chan<- prometheus.Metric, desc *prometheus.Desc, s *Totals, names *[NumCodes]string, labels ...string) {
	for i := range s.Codes {
		if n := s.Codes[i].Load(); n > 0 {
			name := "User"
			if i < NumCodes {
				name = names[i]
			}
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(n), append(labels, name)...)
		}
	}
}

// Package metrics exports a kiev server's and its process's clients'
// metrics to Prometheus: collectors that read kiev's own counters, from a
// snapshot the root takes at each scrape.
package metrics

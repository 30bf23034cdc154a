// Package callstats counts calls for kiev's metrics and status page:
// totals since start by code, latency buckets, and a rolling window over
// the last minute for rates and percentiles, in a few atomic adds a call.
package callstats

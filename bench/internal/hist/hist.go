// Package hist is a log-linear latency histogram the benchmarks share.
package hist

import (
	"math/bits"
	"time"
)

// Hist is a log-linear latency histogram: 32 buckets per power of two,
// so a quantile read from it is within 3% of the true value. Recording
// allocates nothing; each goroutine has its own, merged at the end.
type Hist struct {
	n      uint64
	counts [histBuckets]uint32
}

const (
	histSub     = 32 // buckets per power of two
	histBuckets = 60 * histSub
)

func histIndex(v uint64) int {
	if v < 2*histSub {
		return int(v)
	}
	shift := bits.Len64(v) - 6 // v>>shift is in [32, 64)
	return (shift+1)*histSub + int(v>>shift) - histSub
}

// histValue is the middle of bucket i.
func histValue(i int) uint64 {
	if i < 2*histSub {
		return uint64(i)
	}
	shift := i/histSub - 1
	m := uint64(i%histSub + histSub)
	return m<<shift + (uint64(1)<<shift)/2
}

func (h *Hist) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[histIndex(uint64(d))]++
	h.n++
}

func (h *Hist) Merge(o *Hist) {
	h.n += o.n
	for i, c := range o.counts {
		h.counts[i] += c
	}
}

// Quantile returns the q-quantile, 0 < q <= 1, or 0 if h is empty.
func (h *Hist) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += uint64(c)
		if seen >= rank {
			return time.Duration(histValue(i))
		}
	}
	return time.Duration(histValue(histBuckets - 1))
}

// Count is the number of values recorded.
func (h *Hist) Count() uint64 { return h.n }

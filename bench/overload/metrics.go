package main

// Metrics from the recorded runs: one window of a run, over some of its
// streams.

import (
	"math"
	"slices"
	"time"

	"github.com/kievrpc/kiev/shed"
)

// phaseResult is one row of a table: one window of one system's run,
// over some of its streams. Rates are per second; capacity is what the
// report divides them by for its ×X columns.
type phaseResult struct {
	system     string
	phase      string
	spike      bool    // part of the cpu workload's spike run
	load       float64 // the load asked, as a multiple of the workload's capacity
	capacity   float64 // calls per second
	offered    float64 // attempts started per second (retries included)
	goodput    float64 // replies within the deadline per second
	p9Demand   float64 // priority-9 user requests offered per second
	p9Success  float64 // fraction of priority-9 user requests that succeeded; NaN if none
	users      int     // user requests that arrived in the window
	success    float64 // fraction of them that succeeded; NaN if none
	p99OK      time.Duration
	p99Rej     time.Duration    // -1 if there was no rejection
	rejPcts    [3]time.Duration // p50, p90, p99.9 of rejections; -1 if none
	rejections int              // attempts refused at once
	rejected   float64          // fraction of attempts rejected at once
	timedOut   float64          // fraction of attempts that timed out
	errors     int              // attempts that failed otherwise
	perUser    float64          // attempts made per user request (client side)
	lag        time.Duration    // p99 of how late the generator launched user requests
	floor      [2]time.Duration // p50 and p99 of the raw-TCP probe's round trips; -1 if none

	// From the server's counters over the window, the whole process's
	// (every stream's); hasServer is false when the row covers only some
	// of the streams.
	hasServer bool
	server    serverStats
	served    float64 // handler runs per second
	wasted    float64 // fraction of handler runs whose caller had given up; NaN if none
	ampl      float64 // requests received by the server ÷ user requests
	peakG     int     // the most goroutines the server process had
}

// measure computes the row of segments [i, j) of a run, for the streams
// keep accepts (nil: all, and the server's counters with them).
func measure(system string, res *loadResult, segs []segment, i, j int, keep func(stream uint8) bool, capacity float64) phaseResult {
	from, to := res.bounds[i], res.bounds[j]
	secs := (to - from).Seconds()
	in := func(t time.Duration) bool { return t >= from && t < to }
	ok := func(s uint8) bool { return keep == nil || keep(s) }
	pr := phaseResult{system: system, phase: segs[i].name, load: segs[i].load, capacity: capacity}

	var started, good, tmo int
	var okLat, rejLat []time.Duration
	for _, a := range res.attempts {
		if !ok(a.stream) {
			continue
		}
		if in(a.start) {
			started++
		}
		if !in(a.end) {
			continue
		}
		switch a.kind {
		case outOK:
			good++
			okLat = append(okLat, a.end-a.start)
		case outRejected:
			pr.rejections++
			rejLat = append(rejLat, a.end-a.start)
		case outTimeout:
			tmo++
		case outError:
			pr.errors++
		}
	}
	ended := good + pr.rejections + tmo + pr.errors
	pr.offered = float64(started) / secs
	pr.goodput = float64(good) / secs
	pr.p99OK = p99(okLat)
	pr.p99Rej = p99(rejLat)
	for k, q := range []float64{0.5, 0.9, 0.999} {
		pr.rejPcts[k] = quantile(rejLat, q)
	}
	pr.rejected = ratio(pr.rejections, ended)
	pr.timedOut = ratio(tmo, ended)

	var sent, okUsers, p9, p9ok int
	var lags []time.Duration
	for _, r := range res.requests {
		if !ok(r.stream) || !in(r.arrive) {
			continue
		}
		pr.users++
		sent += int(r.attempts)
		lags = append(lags, r.lag)
		if r.result == outOK {
			okUsers++
		}
		if r.prio == 9 {
			p9++
			if r.result == outOK {
				p9ok++
			}
		}
	}
	var rtts []time.Duration
	for _, p := range res.probes {
		if in(p.at) {
			rtts = append(rtts, p.rtt)
		}
	}
	pr.floor = [2]time.Duration{quantile(rtts, 0.5), p99(rtts)}

	pr.success = ratio(okUsers, pr.users)
	pr.p9Success = ratio(p9ok, p9)
	pr.p9Demand = float64(p9) / secs
	pr.perUser = ratio(sent, pr.users)
	pr.lag = max(p99(lags), 0)

	pr.wasted, pr.ampl = math.NaN(), math.NaN()
	for k := i; k < j; k++ {
		pr.peakG = max(pr.peakG, res.snaps[k+1].PeakGoroutines)
	}
	if keep == nil {
		d := res.snaps[j].sub(res.snaps[i])
		pr.hasServer = true
		pr.server = d
		pr.served = float64(d.Runs) / secs
		pr.wasted = ratio(int(d.Wasted), int(d.Runs))
		pr.ampl = ratio(int(d.Received), pr.users)
	}
	return pr
}

// x divides a rate by the row's capacity.
func (p phaseResult) x(rate float64) float64 { return rate / p.capacity }

func (s serverStats) sub(o serverStats) serverStats {
	d := serverStats{Received: s.Received - o.Received, Runs: s.Runs - o.Runs, Wasted: s.Wasted - o.Wasted, Dropped: s.Dropped - o.Dropped,
		BurnRuns: s.BurnRuns - o.BurnRuns, BurnNanos: s.BurnNanos - o.BurnNanos,
		Goroutines: s.Goroutines, PeakGoroutines: s.PeakGoroutines}
	if s.DropsBy != nil {
		d.DropsBy = map[string]uint64{}
		for k, v := range s.DropsBy {
			d.DropsBy[k] = v - o.DropsBy[k]
		}
	}
	if s.DropWait != nil {
		d.DropWait = make([]uint64, len(s.DropWait))
		for i, v := range s.DropWait {
			if i < len(o.DropWait) {
				v -= o.DropWait[i]
			}
			d.DropWait[i] = v
		}
	}
	return d
}

// queueWaitP99 is the upper bound of the bucket holding the 99th
// percentile of how long the server's dropped requests waited in its
// queue, or "—" if it dropped none.
func queueWaitP99(buckets []uint64) string {
	var n uint64
	for _, c := range buckets {
		n += c
	}
	if n == 0 {
		return "—"
	}
	rank := (n*99 + 99) / 100
	bounds := shed.DropWaitBounds()
	for i, c := range buckets {
		if rank <= c {
			if i == 0 {
				return "≤ " + ms(bounds[0])
			}
			if i >= len(bounds) {
				return "> " + ms(bounds[len(bounds)-1])
			}
			return "≤ " + ms(bounds[i])
		}
		rank -= c
	}
	return "—"
}

// timeline counts, per bucket of the given length from the run's start to
// its end, the replies within the deadline of the streams keep accepts
// (nil: all), as calls per second.
func timeline(res *loadResult, bucket time.Duration, keep func(stream uint8) bool) []float64 {
	n := int(res.bounds[len(res.bounds)-1] / bucket)
	counts := make([]float64, n)
	for _, a := range res.attempts {
		if a.kind == outOK && a.end >= 0 && a.end < time.Duration(n)*bucket && (keep == nil || keep(a.stream)) {
			counts[a.end/bucket]++
		}
	}
	for b := range counts {
		counts[b] /= bucket.Seconds()
	}
	return counts
}

// p99 returns the 99th percentile (nearest rank) of ds, or -1 if empty.
func p99(ds []time.Duration) time.Duration { return quantile(ds, 0.99) }

// quantile returns the q quantile (nearest rank) of ds, or -1 if empty.
// It sorts ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return -1
	}
	slices.Sort(ds)
	return ds[max(int(math.Ceil(q*float64(len(ds))))-1, 0)]
}

func ratio(a, b int) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

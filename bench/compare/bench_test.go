package main

import (
	"context"
	"fmt"
	"github.com/kievrpc/kiev/bench/internal/hist"
	"github.com/kievrpc/kiev/bench/internal/loadgen"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkEcho runs the closed-loop scenarios of the compare program as
// go test benchmarks: every system, payload and concurrency, server and
// client in this one process (so allocs/op counts both sides). Besides
// ns/op (the inverse of the throughput) each reports its latency
// quantiles, p50-ns, p99-ns and p999-ns. For the figures of separate
// processes, run the program. The pinned scenario is this one on one
// core: taskset -c 0 go test -cpu 1 -run '^$' -bench 'Echo/.*/small/c=128'.
//
//	go test -run '^$' -bench 'Echo/.*/small/c=128' -benchmem ./compare/
func BenchmarkEcho(b *testing.B) {
	srv, err := startServers()
	if err != nil {
		b.Fatal(err)
	}
	defer srv.stop()
	for _, sys := range allSystems {
		c, err := dialSystem(sys, srv.addrs)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range allPayloads {
			for _, n := range []int{1, 16, 128, 1024} {
				b.Run(fmt.Sprintf("%s/%s/c=%d", strings.ReplaceAll(sys, "/", "-"), p, n), func(b *testing.B) {
					benchClosed(b, c, p, n)
				})
			}
		}
		c.Close()
	}
}

// benchClosed shares b.N calls among n callers.
func benchClosed(b *testing.B, c loadgen.Conn, payload string, n int) {
	calls := make([]func(context.Context) error, n)
	for i := range calls {
		call, err := c.Caller(payload)
		if err != nil {
			b.Fatal(err)
		}
		calls[i] = call
	}
	ctx := context.Background()
	if err := calls[0](ctx); err != nil { // connected and warm
		b.Fatal(err)
	}
	if size := blobSize(payload); size > 0 {
		b.SetBytes(int64(size))
	}
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	var mu sync.Mutex
	left := b.N
	take := func() bool {
		mu.Lock()
		defer mu.Unlock()
		left--
		return left >= 0
	}
	hists := make([]hist.Hist, n)
	for i, call := range calls {
		h := &hists[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for take() {
				t0 := time.Now()
				if err := call(ctx); err != nil {
					b.Error(err)
					return
				}
				h.Record(time.Since(t0))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	var all hist.Hist
	for i := range hists {
		all.Merge(&hists[i])
	}
	reportLatency(b, all.Quantile(0.50), all.Quantile(0.99), all.Quantile(0.999))
}

func reportLatency(b *testing.B, p50, p99, p999 time.Duration) {
	b.ReportMetric(float64(p50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(p99.Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(p999.Nanoseconds()), "p999-ns")
}

// BenchmarkOpenLoop runs the open-loop scenario of the compare program as
// go test benchmarks, server and client in this one process: for every
// system, Poisson arrivals of small-payload calls at 25, 50, 75 and 90% of
// the rate that system reached in a closed loop at 128 callers, measured
// first. An op is one call due at that offered rate; each reports the
// achieved calls/s and the latency quantiles counted from each call's due
// time (p50-ns, p99-ns, p999-ns), as the program does, and no ns/op, which
// the offered rate sets.
//
//	go test -run '^$' -bench 'OpenLoop/kiev' ./compare/
func BenchmarkOpenLoop(b *testing.B) {
	l := startLoader(b)
	ctx := context.Background()
	for _, sys := range allSystems {
		// Measured once, by the first of its loads that -bench selects.
		top := sync.OnceValues(func() (float64, error) {
			r, err := l.Run(ctx, loadgen.Spec{System: sys, Payload: paySmall, Callers: 128, Warmup: 100 * time.Millisecond, Duration: 300 * time.Millisecond})
			if err == nil && r.Errors > 0 {
				err = fmt.Errorf("%d calls failed, the first: %s", r.Errors, r.FirstErr)
			}
			return r.QPS(), err
		})
		for _, load := range []int{25, 50, 75, 90} {
			b.Run(fmt.Sprintf("%s/%s/load=%d%%", strings.ReplaceAll(sys, "/", "-"), paySmall, load), func(b *testing.B) {
				b.StopTimer() // so that the first run's b.N is not its last
				qps, err := top()
				b.StartTimer()
				if err != nil {
					b.Fatalf("%s: measuring its closed-loop rate: %v", sys, err)
				}
				benchOpen(b, l, sys, qps*float64(load)/100)
			})
		}
	}
}

// benchOpen offers b.N calls at rate per second, after a warm-up that
// connects; a run too short to expect a few arrivals is lengthened to
// them.
func benchOpen(b *testing.B, l *loadgen.Loader, sys string, rate float64) {
	calls := max(b.N, 20)
	spec := loadgen.Spec{
		System:   sys,
		Payload:  paySmall,
		Rate:     rate,
		Warmup:   50 * time.Millisecond,
		Duration: time.Duration(float64(calls) / rate * float64(time.Second)),
	}
	res, err := l.Run(context.Background(), spec)
	if err != nil {
		b.Fatal(err)
	}
	if res.Errors > 0 {
		b.Fatalf("%d of %d calls failed, the first: %s", res.Errors, res.Calls+res.Errors, res.FirstErr)
	}
	b.ReportMetric(0, "ns/op") // the offered rate sets it, not the system
	b.ReportMetric(res.QPS(), "calls/s")
	reportLatency(b, res.P50, res.P99, res.P999)
}

// startLoader starts every system's server in this process and a loader
// of cells against them, both stopped when tb ends.
func startLoader(tb testing.TB) *loadgen.Loader {
	tb.Helper()
	srv, err := startServers()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.stop)
	l := loadgen.NewLoader(srv.addrs.Control, func(sys string) (loadgen.Conn, error) { return dialSystem(sys, srv.addrs) })
	tb.Cleanup(l.Close)
	return l
}

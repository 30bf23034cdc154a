// Command hedging measures what hedged calls (kiev.WithHedging) do to the
// tail, and what they cost, with three providers of which one stalls 1% of
// its calls by 100 ms.
//
// Two workloads, each run with hedging off, with a fixed delay, and with
// the adaptive delay (the method's recent p95):
//
//   - healthy: Poisson arrivals at -rate calls/s, well within capacity;
//     each call sleeps -service in the handler.
//   - shedding: each provider serves -slots calls at a time and refuses
//     (ErrOverloaded) any call beyond them, and calls arrive at twice the
//     three providers' capacity.
//
// For each run it reports the caller's p50, p99 and p99.9 latency of the
// calls that succeeded, the calls that failed, and the extra requests:
// hedges sent, and retries, per call; "healthy providers' p99.9" is the
// p99.9 of the calls the two providers that never stall answered. A first
// run with no stall at all is the baseline.
//
// Run it from the bench directory:
//
//	go run ./hedging                 # about 3 minutes
//	go run ./hedging -duration 2s    # a smoke test
//
// It prints a Markdown table on stdout.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/registry/memory"
	"github.com/kievrpc/kiev/shed"
)

func main() {
	var cfg config
	flag.DurationVar(&cfg.duration, "duration", 20*time.Second, "how long each run offers load")
	flag.Float64Var(&cfg.rate, "rate", 500, "calls per second in the healthy workload")
	flag.DurationVar(&cfg.service, "service", time.Millisecond, "the handler's service time")
	flag.DurationVar(&cfg.stall, "stall", 100*time.Millisecond, "how long the stalling provider stalls a call")
	flag.Float64Var(&cfg.stallP, "stall-fraction", 0.01, "the fraction of its calls the stalling provider stalls")
	flag.DurationVar(&cfg.fixed, "fixed", 5*time.Millisecond, "the fixed hedging delay")
	flag.IntVar(&cfg.slots, "slots", 2, "calls a provider serves at a time in the shedding workload")
	flag.DurationVar(&cfg.shedService, "shed-service", 10*time.Millisecond, "the handler's service time in the shedding workload")
	flag.Parse()
	if err := run(os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "hedging:", err)
		os.Exit(1)
	}
}

type config struct {
	duration, service, stall, fixed, shedService time.Duration
	rate, stallP                                 float64
	slots                                        int
}

// Feed is the service: Get sleeps its service time, longer 1% of the time
// on the stalling provider, and in the shedding workload refuses calls
// beyond its slots.
type Feed struct {
	name    string
	service time.Duration
	stall   time.Duration
	stallP  float64
	slots   chan struct{} // nil: no limit
	started atomic.Int64  // handler runs, refused ones included
}

func (f *Feed) Get(ctx context.Context, args int, reply *string) error {
	f.started.Add(1)
	if f.slots != nil {
		select {
		case f.slots <- struct{}{}:
			defer func() { <-f.slots }()
		default:
			return kiev.ErrOverloaded
		}
	}
	d := f.service
	if f.stallP > 0 && rand.Float64() < f.stallP {
		d += f.stall
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	*reply = f.name
	return nil
}

// result is one run's outcome.
type result struct {
	workload, mode      string
	calls, failed       int
	p50, p99, p999      time.Duration
	healthyP999         time.Duration // of the calls the healthy providers answered
	hedges, won         int64
	noBudget, overload  int64
	retries, handlerRun int64
}

func run(w io.Writer, cfg config) error {
	modes := []struct {
		name string
		h    *kiev.Hedging
	}{
		{"off, no stall", nil}, // the baseline: the same load, no provider stalls
		{"off", nil},
		{fmt.Sprintf("fixed %v", cfg.fixed), &kiev.Hedging{Delay: cfg.fixed}},
		{"adaptive (p95)", &kiev.Hedging{}},
	}
	var results []result
	for _, wl := range []string{"healthy", "shedding"} {
		for _, m := range modes {
			c := cfg
			if m.name == "off, no stall" {
				if wl != "healthy" {
					continue
				}
				c.stallP = 0
			}
			fmt.Fprintf(os.Stderr, "hedging: %s, hedging %s, %v...\n", wl, m.name, cfg.duration)
			r, err := runOne(c, wl, m.name, m.h)
			if err != nil {
				return err
			}
			results = append(results, r)
		}
	}
	report(w, cfg, results)
	return nil
}

// runOne starts three providers and offers one workload's load.
func runOne(cfg config, workload, mode string, h *kiev.Hedging) (result, error) {
	reg := memory.New()
	defer reg.Close()
	var feeds []*Feed
	rate := cfg.rate
	for i := range 3 {
		f := &Feed{name: fmt.Sprint("p", i), service: cfg.service}
		if i == 0 {
			f.stall, f.stallP = cfg.stall, cfg.stallP
		}
		if workload == "shedding" {
			f.service = cfg.shedService
			f.slots = make(chan struct{}, cfg.slots)
		}
		feeds = append(feeds, f)
		// A fixed pool, so that the scheduler does not shed calls when
		// the CPU is congested by others on a shared machine: here only
		// the handler's slots refuse calls.
		srv := kiev.NewServer(kiev.WithRegistry(reg), kiev.WithLogger(quiet), kiev.WithShed(shed.Options{Workers: 512}))
		if err := srv.Register(f); err != nil {
			return result{}, err
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return result{}, err
		}
		go srv.Serve(l)
		defer srv.Close()
	}
	if workload == "shedding" {
		capacity := 3 * float64(cfg.slots) / cfg.shedService.Seconds()
		rate = 2 * capacity
	}
	opts := []kiev.DialOption{kiev.WithRegistry(reg), kiev.WithLogger(quiet), kiev.WithRetry(kiev.RetryPolicy{Idempotent: kiev.IdempotentMethods("Feed.Get")})}
	if h != nil {
		opts = append(opts, kiev.WithHedging(*h))
	}
	c, err := kiev.Dial("Feed", opts...)
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	// Warm up: connections to all three, and the adaptive delay's samples.
	for range 300 {
		c.Call(context.Background(), "Feed.Get", 0, new(string))
	}
	before := c.HedgeStats()
	var started int64
	for _, f := range feeds {
		started -= f.started.Load()
	}
	retries0 := retries(c)

	type sample struct {
		d       time.Duration
		healthy bool
	}
	var mu sync.Mutex
	var samples []sample
	failed := 0
	var wg sync.WaitGroup
	start := time.Now()
	next := start
	for time.Since(start) < cfg.duration {
		next = next.Add(time.Duration(rand.ExpFloat64() / rate * float64(time.Second)))
		if d := time.Until(next); d > 0 {
			time.Sleep(d) // pacing the open-loop arrivals
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			t0 := time.Now()
			var name string
			err := c.Call(ctx, "Feed.Get", 0, &name)
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				return
			}
			samples = append(samples, sample{d, name != "p0"})
		})
	}
	wg.Wait()
	after := c.HedgeStats()
	for _, f := range feeds {
		started += f.started.Load()
	}
	all := make([]time.Duration, 0, len(samples))
	var healthy []time.Duration
	for _, s := range samples {
		all = append(all, s.d)
		if s.healthy {
			healthy = append(healthy, s.d)
		}
	}
	r := result{
		workload: workload, mode: mode, calls: len(samples) + failed, failed: failed,
		p50: quantile(all, 0.5), p99: quantile(all, 0.99), p999: quantile(all, 0.999),
		healthyP999: quantile(healthy, 0.999),
		hedges:      after.Sent - before.Sent, won: after.Won - before.Won,
		noBudget: after.NoBudget - before.NoBudget, overload: after.Overload - before.Overload,
		retries: retries(c) - retries0, handlerRun: started,
	}
	return r, nil
}

var quiet = slog.New(slog.DiscardHandler)

// statusServer reads the status page, which counts the clients' retries.
var statusServer = kiev.NewServer()

// retries returns the retries the client of "Feed" has sent.
func retries(c *kiev.Client) int64 {
	for _, cs := range statusServer.Status(context.Background()).Clients {
		if cs.Target == "Feed" {
			return cs.Retries
		}
	}
	return 0
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

func report(w io.Writer, cfg config, rs []result) {
	fmt.Fprintf(w, "Three providers; p0 stalls %.0f%% of its calls by %v. healthy: Poisson arrivals at %.0f/s, %v service time. shedding: each provider serves %d calls at a time (%v each) and refuses the rest; arrivals at 2x the capacity. %v per run.\n\n",
		cfg.stallP*100, cfg.stall, cfg.rate, cfg.service, cfg.slots, cfg.shedService, cfg.duration)
	fmt.Fprintln(w, "| workload | hedging | calls | failed | p50 | p99 | p99.9 | healthy providers' p99.9 | hedges sent | won | held back: budget / overload | extra requests (hedges) | retries |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }
	for _, r := range rs {
		fmt.Fprintf(w, "| %s | %s | %d | %d | %s | %s | %s | %s | %d | %d | %d / %d | %.2f%% | %d |\n",
			r.workload, r.mode, r.calls, r.failed, ms(r.p50), ms(r.p99), ms(r.p999), ms(r.healthyP999),
			r.hedges, r.won, r.noBudget, r.overload, 100*float64(r.hedges)/float64(max(r.calls, 1)), r.retries)
	}
}

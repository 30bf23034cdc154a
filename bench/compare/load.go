package main

// The load generator, run in a process of its own (`compare -load`), so
// that its allocations and CPU time are the client side's and nothing else.
// It reads the servers' addresses, then one cellSpec per line on stdin, and
// answers each with one cellResult line on stdout.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"github.com/kievrpc/kiev/bench/internal/hist"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// cellSpec is one measurement: a system, a payload, and a load.
type cellSpec struct {
	System   string
	Payload  string
	Callers  int     // closed loop: callers, each waiting for its reply
	Rate     float64 // open loop: Poisson arrivals per second (Callers is 0)
	Warmup   time.Duration
	Duration time.Duration
}

func (s cellSpec) open() bool { return s.Rate > 0 }

// cellResult is what a cell measured, client and server side.
type cellResult struct {
	Spec     cellSpec
	Calls    uint64        // calls completed in the window
	Errors   uint64        // calls that failed in the window
	FirstErr string        `json:",omitempty"`
	Elapsed  time.Duration // the measured window
	P50      time.Duration
	P99      time.Duration
	P999     time.Duration
	Client   procStats // the client process's cost over the window
	Server   procStats // the server process's cost over the window
	// WireBytes is the bytes the client's connections carried over the
	// window, both ways (TCP payload), for the systems that count them.
	WireBytes uint64 `json:",omitempty"`
	// GenLagP99 is, in open loop, how late the generator itself started
	// calls: the floor of every latency it reports.
	GenLagP99 time.Duration `json:",omitempty"`
}

func (r cellResult) qps() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Calls) / r.Elapsed.Seconds()
}

func (r cellResult) perCall(v uint64) float64 {
	if r.Calls == 0 {
		return 0
	}
	return float64(v) / float64(r.Calls)
}

// loader runs cells against one set of servers. Each cell gets a client
// of its own, connected during the cell's warm-up, so that no client-side
// state (kiev's adaptive throttle after an overloaded cell, grpc's flow
// control windows) carries over from one cell to the next.
type loader struct {
	addrs serverAddrs
	http  *http.Client
	conns map[string]conn
}

func newLoader(addrs serverAddrs) *loader {
	return &loader{
		addrs: addrs,
		http:  &http.Client{Timeout: 10 * time.Second},
		conns: make(map[string]conn),
	}
}

func (l *loader) close() {
	for _, c := range l.conns {
		c.close()
	}
	l.http.CloseIdleConnections()
}

func (l *loader) conn(system string) (conn, error) {
	if c, ok := l.conns[system]; ok {
		return c, nil
	}
	c, err := dialSystem(system, l.addrs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", system, err)
	}
	l.conns[system] = c
	return c, nil
}

// window measures both processes' costs over the measured part of a
// cell, and the bytes on the wire of a conn that counts them.
type window struct {
	l      *loader
	server procStats
	client procStats
	wire   wireCounter // nil if the system does not count
	wire0  uint64
	start  time.Time
}

func (l *loader) begin(ctx context.Context, c conn) (*window, error) {
	st, err := fetchStats(ctx, l.http, l.addrs.Control)
	if err != nil {
		return nil, err
	}
	w := &window{l: l, server: st}
	if wc, ok := c.(wireCounter); ok {
		if n, ok := wc.wireBytes(); ok {
			w.wire, w.wire0 = wc, n
		}
	}
	// The client's counters are read after the HTTP exchange, so that its
	// allocations stay out of the window.
	w.client, w.start = readProcStats(), time.Now()
	return w, nil
}

func (w *window) end(ctx context.Context, r *cellResult) error {
	r.Elapsed = time.Since(w.start)
	r.Client = readProcStats().sub(w.client)
	if w.wire != nil {
		if n, ok := w.wire.wireBytes(); ok {
			r.WireBytes = n - w.wire0
		}
	}
	st, err := fetchStats(ctx, w.l.http, w.l.addrs.Control)
	if err != nil {
		return err
	}
	r.Server = st.sub(w.server)
	return nil
}

// errOnce keeps the first error of a cell.
type errOnce struct {
	n     atomic.Uint64
	once  sync.Once
	first string
}

func (e *errOnce) add(err error) {
	e.n.Add(1)
	e.once.Do(func() { e.first = err.Error() })
}

// run runs one cell.
func (l *loader) run(ctx context.Context, spec cellSpec) (cellResult, error) {
	c, err := l.conn(spec.System)
	if err != nil {
		return cellResult{}, err
	}
	defer func() {
		c.close()
		delete(l.conns, spec.System)
	}()
	if spec.open() {
		return l.runOpen(ctx, c, spec)
	}
	return l.runClosed(ctx, c, spec)
}

// Phases of a run, read by its callers.
const (
	phaseWarmup = iota
	phaseMeasure
	phaseStop
)

// runClosed runs spec.Callers goroutines, each calling as soon as its
// previous reply arrived: throughput at a fixed concurrency.
func (l *loader) runClosed(ctx context.Context, c conn, spec cellSpec) (cellResult, error) {
	res := cellResult{Spec: spec}
	var phase atomic.Int32
	var errs errOnce
	hists := make([]hist.Hist, spec.Callers)
	var wg sync.WaitGroup
	for i := range spec.Callers {
		call, err := c.caller(spec.Payload)
		if err != nil {
			return res, err
		}
		h := &hists[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if phase.Load() == phaseStop {
					return
				}
				t0 := time.Now()
				err := call(ctx)
				// Calls that end in the window count: the window's throughput.
				if phase.Load() != phaseMeasure {
					continue
				}
				if err != nil {
					errs.add(err)
					continue
				}
				h.Record(time.Since(t0))
			}
		}()
	}
	defer func() {
		phase.Store(phaseStop)
		wg.Wait()
	}()
	if !sleepCtx(ctx, spec.Warmup) {
		return res, ctx.Err()
	}
	w, err := l.begin(ctx, c)
	if err != nil {
		return res, err
	}
	phase.Store(phaseMeasure)
	if !sleepCtx(ctx, spec.Duration) {
		return res, ctx.Err()
	}
	phase.Store(phaseStop)
	if err := w.end(ctx, &res); err != nil {
		return res, err
	}
	wg.Wait()
	var all hist.Hist
	for i := range hists {
		all.Merge(&hists[i])
	}
	res.finish(&all, &errs)
	return res, nil
}

func (r *cellResult) finish(h *hist.Hist, errs *errOnce) {
	r.Calls = h.Count()
	r.Errors = errs.n.Load()
	r.FirstErr = errs.first
	r.P50, r.P99, r.P999 = h.Quantile(0.50), h.Quantile(0.99), h.Quantile(0.999)
}

// openWorkers is how many calls an open-loop run may have in flight; more
// arrivals wait in the queue, their wait counted in their latency.
const openWorkers = 1024

// runOpen starts calls at Poisson arrival times, whatever the replies do,
// and measures each call's latency from the time it was due to start, not
// from when it could start: a stall delays every call due during it, and
// all of them count it (no coordinated omission).
func (l *loader) runOpen(ctx context.Context, c conn, spec cellSpec) (cellResult, error) {
	res := cellResult{Spec: spec}
	var errs errOnce
	type arrival struct {
		due      time.Time
		measured bool
	}
	queue := make(chan arrival, 1<<16)
	hists := make([]hist.Hist, openWorkers)
	lags := make([]hist.Hist, openWorkers)
	var wg sync.WaitGroup
	for i := range openWorkers {
		call, err := c.caller(spec.Payload)
		if err != nil {
			return res, err
		}
		h, lag := &hists[i], &lags[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := range queue {
				start := time.Now()
				err := call(ctx)
				if !a.measured {
					continue
				}
				if err != nil {
					errs.add(err)
					continue
				}
				h.Record(time.Since(a.due))
				lag.Record(start.Sub(a.due))
			}
		}()
	}
	closed := false
	defer func() {
		if !closed {
			close(queue)
		}
		wg.Wait()
	}()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	mean := float64(time.Second) / spec.Rate
	begin := time.Now()
	measureFrom := begin.Add(spec.Warmup)
	until := measureFrom.Add(spec.Duration)
	var w *window
	due := begin
	for {
		due = due.Add(time.Duration(rng.ExpFloat64() * mean))
		if !due.Before(until) {
			break
		}
		if d := time.Until(due); d > 0 {
			if !sleepCtx(ctx, d) {
				return res, ctx.Err()
			}
		}
		measured := !due.Before(measureFrom)
		if measured && w == nil {
			var err error
			if w, err = l.begin(ctx, c); err != nil {
				return res, err
			}
		}
		queue <- arrival{due: due, measured: measured}
	}
	close(queue)
	closed = true
	wg.Wait() // every call started is answered (or fails) before the window ends
	if w == nil {
		return res, fmt.Errorf("open loop at %.0f/s for %v: no call was due in the window", spec.Rate, spec.Duration)
	}
	if err := w.end(ctx, &res); err != nil {
		return res, err
	}
	res.Elapsed = spec.Duration // the arrivals' window; the tail's drain is in the latencies
	var all, lag hist.Hist
	for i := range hists {
		all.Merge(&hists[i])
		lag.Merge(&lags[i])
	}
	res.finish(&all, &errs)
	res.GenLagP99 = lag.Quantile(0.99)
	return res, nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// loadMain is the client process: the servers' addresses on the first
// line of stdin, then cells.
func loadMain(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	sc := bufio.NewScanner(stdin)
	if !sc.Scan() {
		return fmt.Errorf("no server addresses on stdin: %v", sc.Err())
	}
	var addrs serverAddrs
	if err := json.Unmarshal(sc.Bytes(), &addrs); err != nil {
		return fmt.Errorf("server addresses: %w", err)
	}
	l := newLoader(addrs)
	defer l.close()
	enc := json.NewEncoder(stdout)
	for sc.Scan() {
		var spec cellSpec
		if err := json.Unmarshal(sc.Bytes(), &spec); err != nil {
			return fmt.Errorf("cell: %w", err)
		}
		res, err := l.run(ctx, spec)
		if err != nil {
			return fmt.Errorf("%s %s: %w", spec.System, spec.Payload, err)
		}
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
	return sc.Err()
}

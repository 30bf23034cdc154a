// Package loadgen is bench/compare's load generator, run in a client
// process of its own (`compare -load`, and `peers -load` for the peers'
// module, bench/peers), so that its allocations and CPU time are the
// client side's and nothing else. Main reads the servers' addresses, then
// one Spec per line on stdin, and answers each with one Result line on
// stdout. The server process serves its counters (StatsHandler) on a
// control listener outside the systems under test, which the loader reads
// at each end of a measured window.
package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/bench/internal/hist"
)

// Conn is one system's client, shared by every caller of a cell.
type Conn interface {
	// Caller returns a function that makes one echo call of payload, for
	// one caller goroutine. Each call decodes into fresh reply storage,
	// as a real caller would.
	Caller(payload string) (func(ctx context.Context) error, error)
	Close()
}

// WireCounter is a Conn that counts the bytes its connections carry.
type WireCounter interface {
	// WireBytes returns the bytes sent and received so far, TCP payload
	// (as the kernel counts them), and false if it cannot tell.
	WireBytes() (uint64, bool)
}

// Dialer connects a Conn to system's server.
type Dialer func(system string) (Conn, error)

// Spec is one measurement: a system, a payload, and a load.
type Spec struct {
	System   string
	Payload  string
	Callers  int     // closed loop: callers, each waiting for its reply
	Rate     float64 // open loop: Poisson arrivals per second (Callers is 0)
	Warmup   time.Duration
	Duration time.Duration
}

// Open reports whether s is an open-loop cell.
func (s Spec) Open() bool { return s.Rate > 0 }

// Result is what a cell measured, client and server side.
type Result struct {
	Spec     Spec
	Calls    uint64        // calls completed in the window
	Errors   uint64        // calls that failed in the window
	FirstErr string        `json:",omitempty"`
	Elapsed  time.Duration // the measured window
	P50      time.Duration
	P99      time.Duration
	P999     time.Duration
	Client   Stats // the client process's cost over the window
	Server   Stats // the server process's cost over the window
	// WireBytes is the bytes the client's connections carried over the
	// window, both ways (TCP payload), for the systems that count them.
	WireBytes uint64 `json:",omitempty"`
	// GenLagP99 is, in open loop, how late the generator itself started
	// calls: the floor of every latency it reports.
	GenLagP99 time.Duration `json:",omitempty"`
}

// QPS is the calls completed per second of the window.
func (r Result) QPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Calls) / r.Elapsed.Seconds()
}

// PerCall is v per call completed.
func (r Result) PerCall(v uint64) float64 {
	if r.Calls == 0 {
		return 0
	}
	return float64(v) / float64(r.Calls)
}

// Loader runs cells against one set of servers. Each cell gets a client
// of its own, connected during the cell's warm-up, so that no client-side
// state (kiev's adaptive throttle after an overloaded cell, grpc's flow
// control windows) carries over from one cell to the next.
type Loader struct {
	control string // the server process's control address
	dial    Dialer
	http    *http.Client
	conns   map[string]Conn
}

// NewLoader returns a Loader whose cells dial their systems with dial and
// read the server process's counters from control.
func NewLoader(control string, dial Dialer) *Loader {
	return &Loader{
		control: control,
		dial:    dial,
		http:    &http.Client{Timeout: 10 * time.Second},
		conns:   make(map[string]Conn),
	}
}

// Close closes every Conn the Loader holds.
func (l *Loader) Close() {
	for _, c := range l.conns {
		c.Close()
	}
	l.http.CloseIdleConnections()
}

func (l *Loader) conn(system string) (Conn, error) {
	if c, ok := l.conns[system]; ok {
		return c, nil
	}
	c, err := l.dial(system)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", system, err)
	}
	l.conns[system] = c
	return c, nil
}

// window measures both processes' costs over the measured part of a
// cell, and the bytes on the wire of a conn that counts them.
type window struct {
	l      *Loader
	server Stats
	client Stats
	wire   WireCounter // nil if the system does not count
	wire0  uint64
	start  time.Time
}

func (l *Loader) begin(ctx context.Context, c Conn) (*window, error) {
	st, err := FetchStats(ctx, l.http, l.control)
	if err != nil {
		return nil, err
	}
	w := &window{l: l, server: st}
	if wc, ok := c.(WireCounter); ok {
		if n, ok := wc.WireBytes(); ok {
			w.wire, w.wire0 = wc, n
		}
	}
	// The client's counters are read after the HTTP exchange, so that its
	// allocations stay out of the window.
	w.client, w.start = ReadStats(), time.Now()
	return w, nil
}

func (w *window) end(ctx context.Context, r *Result) error {
	r.Elapsed = time.Since(w.start)
	r.Client = ReadStats().Sub(w.client)
	if w.wire != nil {
		if n, ok := w.wire.WireBytes(); ok {
			r.WireBytes = n - w.wire0
		}
	}
	st, err := FetchStats(ctx, w.l.http, w.l.control)
	if err != nil {
		return err
	}
	r.Server = st.Sub(w.server)
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

// Run runs one cell, on a Conn of its own: each cell gets a fresh client.
func (l *Loader) Run(ctx context.Context, spec Spec) (Result, error) {
	c, err := l.conn(spec.System)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		c.Close()
		delete(l.conns, spec.System)
	}()
	if spec.Open() {
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
func (l *Loader) runClosed(ctx context.Context, c Conn, spec Spec) (Result, error) {
	res := Result{Spec: spec}
	var phase atomic.Int32
	var errs errOnce
	hists := make([]hist.Hist, spec.Callers)
	var wg sync.WaitGroup
	for i := range spec.Callers {
		call, err := c.Caller(spec.Payload)
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

func (r *Result) finish(h *hist.Hist, errs *errOnce) {
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
func (l *Loader) runOpen(ctx context.Context, c Conn, spec Spec) (Result, error) {
	res := Result{Spec: spec}
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
		call, err := c.Caller(spec.Payload)
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

// Main is the client process: the servers' addresses on the first line of
// stdin, from which newDialer makes the Dialer and returns the control
// address, then one Spec a line, each answered with a Result line on
// stdout.
func Main(ctx context.Context, stdin io.Reader, stdout io.Writer, newDialer func(addrs []byte) (Dialer, string, error)) error {
	sc := bufio.NewScanner(stdin)
	if !sc.Scan() {
		return fmt.Errorf("no server addresses on stdin: %v", sc.Err())
	}
	dial, control, err := newDialer(sc.Bytes())
	if err != nil {
		return fmt.Errorf("server addresses: %w", err)
	}
	l := NewLoader(control, dial)
	defer l.Close()
	enc := json.NewEncoder(stdout)
	for sc.Scan() {
		var spec Spec
		if err := json.Unmarshal(sc.Bytes(), &spec); err != nil {
			return fmt.Errorf("cell: %w", err)
		}
		res, err := l.Run(ctx, spec)
		if err != nil {
			return fmt.Errorf("%s %s: %w", spec.System, spec.Payload, err)
		}
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
	return sc.Err()
}

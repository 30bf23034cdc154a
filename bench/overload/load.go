package main

// The load generator: open-loop Poisson arrivals, each user request on a
// goroutine of its own while it lasts (goroutines are reused once idle),
// with a deadline per attempt and retries on timeout.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/rpc"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/bench/internal/workpb"
)

// outcome is how one attempt ended.
type outcome uint8

const (
	outOK       outcome = iota // a reply within the deadline: goodput
	outTimeout                 // the deadline passed: retried
	outRejected                // the server refused it at once (kiev.ErrOverloaded): not retried
	outError                   // any other failure: not retried
	outAborted                 // the run ended under it: not recorded
)

// caller makes one attempt of Work on one system.
type caller interface {
	call(ctx context.Context, a Args) outcome
	close()
}

// dial connects to the server of system at addr with one connection.
// With bareKiev, the kiev client neither retries refused calls nor
// throttles (both are on by default), so that only the server's
// scheduler protects it.
func dial(system, addr string, bareKiev bool) (caller, error) {
	switch system {
	case sysKiev, sysKievNoShed:
		var opts []kiev.DialOption
		if bareKiev {
			opts = append(opts, kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1}), kiev.WithThrottle(kiev.Throttle{Disabled: true}))
		}
		c, err := kiev.Dial(addr, opts...)
		if err != nil {
			return nil, err
		}
		return kievCaller{c}, nil
	case sysNetRPC:
		c, err := rpc.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		return rpcCaller{c}, nil
	case sysGRPC:
		cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		return grpcCaller{cc, workpb.NewWorkClient(cc)}, nil
	}
	return nil, fmt.Errorf("unknown system %q", system)
}

// aborted reports whether ctx ended because the run did, not because the
// attempt's deadline passed.
func aborted(ctx context.Context) bool { return ctx.Err() == context.Canceled }

type kievCaller struct{ c *kiev.Client }

func (k kievCaller) call(ctx context.Context, a Args) outcome {
	var r Reply
	err := k.c.Call(kiev.WithPriority(ctx, kiev.Priority(a.Priority)), "Work.Work", a, &r)
	switch {
	case err == nil:
		return outOK
	case aborted(ctx):
		return outAborted
	case errors.Is(err, kiev.ErrOverloaded):
		return outRejected
	case errors.Is(err, context.DeadlineExceeded):
		return outTimeout
	}
	return outError
}

func (k kievCaller) close() { k.c.Close() }

// rpcCaller uses net/rpc, which has no context: the attempt gives up when
// ctx ends, and the late reply, if any, is discarded by net/rpc.
type rpcCaller struct{ c *rpc.Client }

func (r rpcCaller) call(ctx context.Context, a Args) outcome {
	call := r.c.Go("Work.Work", a, new(Reply), make(chan *rpc.Call, 1))
	select {
	case <-call.Done:
		if call.Error != nil {
			return outError
		}
		return outOK
	case <-ctx.Done():
		if aborted(ctx) {
			return outAborted
		}
		return outTimeout
	}
}

func (r rpcCaller) close() { r.c.Close() }

type grpcCaller struct {
	cc *grpc.ClientConn
	c  workpb.WorkClient
}

func (g grpcCaller) call(ctx context.Context, a Args) outcome {
	_, err := g.c.Work(ctx, &workpb.WorkRequest{Id: a.ID, DeadlineUnixNano: a.Deadline, Priority: int32(a.Priority)})
	switch {
	case err == nil:
		return outOK
	case aborted(ctx):
		return outAborted
	case status.Code(err) == codes.DeadlineExceeded:
		return outTimeout
	}
	return outError
}

func (g grpcCaller) close() { g.cc.Close() }

// segment is a stretch of constant offered load.
type segment struct {
	name     string
	load     float64 // user requests per second, as a multiple of the capacity X
	dur      time.Duration
	measured bool // reported; a warmup is not
}

// attempt records one attempt; times are since the run's start.
type attempt struct {
	start, end time.Duration
	kind       outcome
	prio       uint8
}

// request records one user request: its arrival and final outcome.
type request struct {
	arrive   time.Duration // when it was due
	lag      time.Duration // how late the generator launched it
	prio     uint8
	result   outcome
	attempts uint8
}

// loadConfig are the generator's settings.
type loadConfig struct {
	capacity float64       // X, calls per second
	deadline time.Duration // per attempt
	attempts int           // in all, per user request
	seed     uint64
}

// loadResult is everything a run recorded.
type loadResult struct {
	bounds   []time.Duration // segment boundaries since the start; len(segs)+1
	snaps    []serverStats   // the server's counters at each boundary
	snapErr  error
	attempts []attempt
	requests []request
	probes   []probe
}

// probe records one round trip of the raw-TCP probe.
type probe struct {
	at, rtt time.Duration // at: when it was sent, since the run's start
}

// probeRate is how many probe pings per second, on average, measure the
// machine's floor: few enough to add no load, enough for a p99 per phase.
const probeRate = 250

// gen runs one schedule of segments against one caller.
type gen struct {
	c     caller
	cfg   loadConfig
	ctx   context.Context // ends when the run does; attempts derive from it
	start time.Time

	all      sync.WaitGroup // every user request
	workers  sync.WaitGroup // every generator goroutine
	idle     chan task      // unbuffered: a send succeeds only if a goroutine is idle
	measured sync.WaitGroup // user requests that arrived in a measured segment

	mu       sync.Mutex
	attempts []attempt
	requests []request
}

// maxLag is how far behind its schedule the generator may fall.
const maxLag = 2 * time.Second

// tailSlack bounds how long after the last attempt deadline the run waits
// for the measured requests to resolve.
const tailSlack = 500 * time.Millisecond

// runLoad offers segs to c in order, then keeps offering the last
// segment's load, unmeasured, until every measured user request has its
// outcome (at most attempts × deadline + tailSlack). snap reads the
// server's counters; it is called at each segment boundary. If probeAddr
// is set, a raw-TCP echo in the server's process there is pinged all the
// while (see probeLoop).
func runLoad(ctx context.Context, c caller, segs []segment, cfg loadConfig, snap func() (serverStats, error), probeAddr string) (*loadResult, error) {
	if len(segs) == 0 {
		return nil, errors.New("no segments")
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := &gen{c: c, cfg: cfg, ctx: runCtx, start: time.Now(), idle: make(chan task)}
	// Room for every record up front: growing a slice of a hundred
	// thousand records copies megabytes under g.mu, a stall of the
	// generator that would show as slow answers from the server.
	expect := 0.0
	for _, s := range segs {
		expect += s.load * cfg.capacity * s.dur.Seconds()
	}
	expect += segs[len(segs)-1].load * cfg.capacity * (time.Duration(cfg.attempts)*cfg.deadline + tailSlack).Seconds()
	n := int(expect*1.2) + 1024
	g.requests = make([]request, 0, n)
	g.attempts = make([]attempt, 0, n*cfg.attempts)
	res := &loadResult{bounds: make([]time.Duration, len(segs)+1), snaps: make([]serverStats, len(segs)+1)}
	for i, s := range segs {
		res.bounds[i+1] = res.bounds[i] + s.dur
	}

	// The server's counters are read on a clock of their own, so that
	// they cover the segments even if the generator falls behind, and a
	// slow read does not delay arrivals.
	snapDone := make(chan struct{})
	go func() {
		defer close(snapDone)
		t := time.NewTimer(time.Hour)
		defer t.Stop()
		for i, b := range res.bounds {
			if d := time.Until(g.start.Add(b)); d > 0 {
				t.Reset(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					return
				}
			}
			st, err := snap()
			if err != nil && res.snapErr == nil {
				res.snapErr = fmt.Errorf("server counters at boundary %d: %w", i, err)
			}
			res.snaps[i] = st
		}
	}()

	var probes []probe
	probeDone := make(chan error, 1)
	if probeAddr != "" {
		end := res.bounds[len(segs)]
		go func() {
			var err error
			probes, err = probeLoop(runCtx, probeAddr, g.start, end, cfg.seed)
			probeDone <- err
		}()
	} else {
		probeDone <- nil
	}

	rng := rand.New(rand.NewPCG(cfg.seed, 0x6b696576))
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// wait sleeps until offset t since the start; false if stop or the
	// run ended first.
	wait := func(t time.Duration, stop <-chan struct{}) bool {
		d := time.Until(g.start.Add(t))
		if d <= 0 {
			select {
			case <-stop:
				return false
			default:
				return runCtx.Err() == nil
			}
		}
		timer.Reset(d)
		select {
		case <-timer.C:
			return true
		case <-stop:
			return false
		case <-runCtx.Done():
			return false
		}
	}
	var id uint64
	// arrivals launches the Poisson arrivals of rate per second from from
	// until to or stop; Poisson arrivals are memoryless, so each stretch
	// may start afresh at its boundary.
	arrivals := func(from, to time.Duration, load float64, measured bool, stop <-chan struct{}) {
		rate := load * cfg.capacity
		if rate <= 0 {
			wait(to, stop)
			return
		}
		// Bound the count as well as the time: the mean count is
		// rate × duration; ten times that never happens by chance.
		limit := int(10*rate*(to-from).Seconds()) + 100
		// A generator starved of CPU catches up by launching what is due
		// at once; if it falls further behind than maxLag, it gives up on
		// the stretch (the lag shows in the report).
		giveUp := g.start.Add(to + maxLag)
		next := from
		for range limit {
			next += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
			if next >= to {
				wait(to, stop)
				return
			}
			if !wait(next, stop) || time.Now().After(giveUp) {
				return
			}
			prio := uint8(9)
			if rng.Float64() >= 0.1 {
				prio = uint8(rng.IntN(9)) // 0..8
			}
			id++
			g.launch(id, next, prio, measured)
		}
	}

	for i, s := range segs {
		arrivals(res.bounds[i], res.bounds[i+1], s.load, s.measured, nil)
		if runCtx.Err() != nil {
			break
		}
	}

	resolved := make(chan struct{})
	go func() {
		g.measured.Wait()
		close(resolved)
	}()
	end := res.bounds[len(segs)]
	tail := time.Duration(cfg.attempts)*cfg.deadline + tailSlack
	arrivals(end, end+tail, segs[len(segs)-1].load, false, resolved)

	cancel() // every attempt still running returns at once
	if !waitTimeout(&g.all, 10*time.Second) {
		return nil, errors.New("user requests did not end within 10s of the run's end")
	}
	g.workers.Wait() // each returns at once: its request has ended and the run is over
	<-resolved
	<-snapDone
	probeErr := <-probeDone
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if probeErr != nil {
		return nil, fmt.Errorf("raw-TCP probe: %w", probeErr)
	}
	res.attempts, res.requests, res.probes = g.attempts, g.requests, probes
	return res, res.snapErr
}

// probeLoop pings the raw-TCP echo at addr, one ping at a time, at Poisson
// times at probeRate from start until offset end or ctx ends. Its round
// trips are the floor under any RPC's between the same two processes at
// the same moment: the two wake-ups, the loopback and the scheduling of
// this machine, and no framework. On a virtual machine whose idle CPUs
// sleep, that floor is far above a busy CPU's.
func probeLoop(ctx context.Context, addr string, start time.Time, end time.Duration, seed uint64) ([]probe, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	rng := rand.New(rand.NewPCG(seed, 0x70726f6265))
	limit := int(10*probeRate*end.Seconds()) + 100 // ten times the mean count never happens by chance
	probes := make([]probe, 0, limit/10+16)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var b [probeSize]byte
	next := time.Duration(0)
	for range limit {
		next += time.Duration(rng.ExpFloat64() / probeRate * float64(time.Second))
		if next >= end {
			break
		}
		if d := time.Until(start.Add(next)); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return probes, nil
			}
		}
		t0 := time.Now()
		if _, err := c.Write(b[:]); err != nil {
			return probes, ignoreEnd(ctx, err)
		}
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return probes, ignoreEnd(ctx, err)
		}
		probes = append(probes, probe{at: t0.Sub(start), rtt: time.Since(t0)})
	}
	return probes, nil
}

// ignoreEnd drops err if ctx has ended: the connection was closed to stop
// a ping in flight.
func ignoreEnd(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// task is one user request for a generator goroutine.
type task struct {
	id       uint64
	arrive   time.Duration
	prio     uint8
	measured bool
}

// launch starts one user request arriving at offset arrive, on an idle
// generator goroutine if there is one, else on a new one. Reusing the
// goroutines keeps their grown stacks: a fresh goroutine per request
// spent a third of the generator's CPU growing its stack, and the
// generator, on one CPU, answers for every microsecond of its own in the
// latencies it measures.
func (g *gen) launch(id uint64, arrive time.Duration, prio uint8, measured bool) {
	g.all.Add(1)
	if measured {
		g.measured.Add(1)
	}
	t := task{id: id, arrive: arrive, prio: prio, measured: measured}
	select {
	case g.idle <- t:
	default:
		g.workers.Add(1)
		go g.work(t)
	}
}

// work runs t, then the tasks handed to it while idle, until the run ends.
func (g *gen) work(t task) {
	defer g.workers.Done()
	for {
		g.user(t.id, t.arrive, t.prio, time.Since(g.start)-t.arrive)
		if t.measured {
			g.measured.Done()
		}
		g.all.Done()
		select {
		case t = <-g.idle:
		case <-g.ctx.Done():
			return
		}
	}
}

// user runs one user request: up to cfg.attempts attempts, each with its
// own deadline, retrying only on timeout.
func (g *gen) user(id uint64, arrive time.Duration, prio uint8, lag time.Duration) {
	a := Args{ID: id, Priority: int(prio)}
	result := outAborted
	n := 0
	for n < g.cfg.attempts {
		n++
		ctx, cancel := context.WithTimeout(g.ctx, g.cfg.deadline)
		dl, _ := ctx.Deadline()
		a.Deadline = dl.UnixNano()
		t0 := time.Now()
		result = g.c.call(ctx, a)
		t1 := time.Now()
		cancel()
		if result == outAborted {
			break
		}
		g.mu.Lock()
		g.attempts = append(g.attempts, attempt{start: t0.Sub(g.start), end: t1.Sub(g.start), kind: result, prio: prio})
		g.mu.Unlock()
		if result != outTimeout {
			break
		}
	}
	g.mu.Lock()
	g.requests = append(g.requests, request{arrive: arrive, lag: lag, prio: prio, result: result, attempts: uint8(n)})
	g.mu.Unlock()
}

// waitTimeout waits for wg, at most d; false if d passed first.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

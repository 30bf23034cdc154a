package main

// The open-loop load generator: Poisson arrivals, each user request on a
// goroutine of its own while it lasts (goroutines are reused once idle),
// with a deadline per attempt and retries on timeout. Arrivals come from
// one or more streams, each a method called over one of the run's
// connections at a rate of its own.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// stream is one source of user requests: one method, called over one of
// the run's connections.
type stream struct {
	conn   int    // index into the run's callers
	method method // what it calls
	prio   int    // every request's priority, 0 to 9; or mixedPriority
}

// mixedPriority draws each request's priority: 9 for a tenth of them, the
// others uniformly from 0 to 8.
const mixedPriority = -1

// segment is a stretch of constant offered load.
type segment struct {
	name     string
	load     float64   // the load as the report names it: a multiple of the workload's capacity
	rates    []float64 // user requests per second, per stream
	dur      time.Duration
	measured bool          // reported; a warmup is not
	service  time.Duration // if positive, the dependency's service time from the segment's start
}

// attempt records one attempt; times are since the run's start.
type attempt struct {
	start, end time.Duration
	kind       outcome
	prio       uint8
	stream     uint8
}

// request records one user request: its arrival and final outcome.
type request struct {
	arrive   time.Duration // when it was due
	lag      time.Duration // how late the generator launched it
	prio     uint8
	stream   uint8
	result   outcome
	attempts uint8
}

// loadConfig are the generator's settings.
type loadConfig struct {
	streams  []stream
	deadline time.Duration // per attempt
	attempts int           // in all, per user request
	seed     uint64
}

// loadResult is everything a run recorded.
type loadResult struct {
	began    time.Time       // the run's start
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

// gen runs one schedule of segments against a set of callers.
type gen struct {
	callers []caller
	cfg     loadConfig
	ctx     context.Context // ends when the run does; attempts derive from it
	start   time.Time

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

// snapFunc reads the server's counters at boundary i of the segments
// (0 their start, len(segs) their end). At the start of a segment whose
// service is set, it first changes the dependency's service time.
type snapFunc func(i int) (serverStats, error)

// takeSnapshots reads the server's counters at each of bounds since start,
// on a clock of its own, so that they cover the segments even if the
// generator falls behind, and a slow read does not delay arrivals. It
// fills res.snaps and res.snapErr, and closes the returned channel when
// done.
func takeSnapshots(ctx context.Context, start time.Time, res *loadResult, snap snapFunc) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(time.Hour)
		defer t.Stop()
		for i, b := range res.bounds {
			if d := time.Until(start.Add(b)); d > 0 {
				t.Reset(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					return
				}
			}
			st, err := snap(i)
			if err != nil && res.snapErr == nil {
				res.snapErr = fmt.Errorf("server counters at boundary %d: %w", i, err)
			}
			res.snaps[i] = st
		}
	}()
	return done
}

// newResult returns a result with the boundaries of segs.
func newResult(segs []segment) *loadResult {
	res := &loadResult{bounds: make([]time.Duration, len(segs)+1), snaps: make([]serverStats, len(segs)+1)}
	for i, s := range segs {
		res.bounds[i+1] = res.bounds[i] + s.dur
	}
	return res
}

// totalRate is the sum of a segment's stream rates.
func (s segment) totalRate() float64 {
	r := 0.0
	for _, x := range s.rates {
		r += x
	}
	return r
}

// runLoad offers segs to callers in order, then keeps offering the last
// segment's load, unmeasured, until every measured user request has its
// outcome (at most attempts × deadline + tailSlack). snap reads the
// server's counters at each segment boundary. If probeAddr is set, a
// raw-TCP echo in the server's process there is pinged all the while (see
// probeLoop).
func runLoad(ctx context.Context, callers []caller, segs []segment, cfg loadConfig, snap snapFunc, probeAddr string) (*loadResult, error) {
	if len(segs) == 0 {
		return nil, errors.New("no segments")
	}
	for _, s := range segs {
		if len(s.rates) != len(cfg.streams) {
			return nil, fmt.Errorf("segment %q has %d rates for %d streams", s.name, len(s.rates), len(cfg.streams))
		}
	}
	for _, st := range cfg.streams {
		if st.conn < 0 || st.conn >= len(callers) {
			return nil, fmt.Errorf("a stream uses connection %d of %d", st.conn, len(callers))
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := &gen{callers: callers, cfg: cfg, ctx: runCtx, start: time.Now(), idle: make(chan task)}
	// Room for every record up front: growing a slice of a hundred
	// thousand records copies megabytes under g.mu, a stall of the
	// generator that would show as slow answers from the server.
	expect := 0.0
	for _, s := range segs {
		expect += s.totalRate() * s.dur.Seconds()
	}
	tail := time.Duration(cfg.attempts)*cfg.deadline + tailSlack
	expect += segs[len(segs)-1].totalRate() * tail.Seconds()
	n := int(expect*1.2) + 1024
	g.requests = make([]request, 0, n)
	g.attempts = make([]attempt, 0, n*cfg.attempts)
	res := newResult(segs)
	res.began = g.start
	snapDone := takeSnapshots(ctx, g.start, res, snap)

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
	// arrivals launches the Poisson arrivals of s's rates from from until
	// to or stop. The streams' arrivals are one Poisson process of their
	// total rate, each arrival given to a stream with a probability
	// proportional to its rate, which makes each stream a Poisson process
	// of its own rate. Poisson arrivals are memoryless, so each stretch
	// may start afresh at its boundary.
	arrivals := func(from, to time.Duration, s segment, measured bool, stop <-chan struct{}) {
		rate := s.totalRate()
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
			si := 0
			if len(s.rates) > 1 {
				x := rng.Float64() * rate
				for si < len(s.rates)-1 && x >= s.rates[si] {
					x -= s.rates[si]
					si++
				}
			}
			prio := g.cfg.streams[si].prio
			if prio == mixedPriority {
				prio = 9
				if rng.Float64() >= 0.1 {
					prio = rng.IntN(9) // 0..8
				}
			}
			id++
			g.launch(task{id: id, arrive: next, prio: uint8(prio), stream: uint8(si), measured: measured})
		}
	}

	for i, s := range segs {
		arrivals(res.bounds[i], res.bounds[i+1], s, s.measured, nil)
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
	arrivals(end, end+tail, segs[len(segs)-1], false, resolved)

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
	stream   uint8
	measured bool
}

// launch starts user request t, on an idle generator goroutine if there
// is one, else on a new one. Reusing the goroutines keeps their grown
// stacks: a fresh goroutine per request spent a third of the generator's
// CPU growing its stack, and the generator, on one CPU, answers for every
// microsecond of its own in the latencies it measures.
func (g *gen) launch(t task) {
	g.all.Add(1)
	if t.measured {
		g.measured.Add(1)
	}
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
		g.user(t, time.Since(g.start)-t.arrive)
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
func (g *gen) user(t task, lag time.Duration) {
	st := g.cfg.streams[t.stream]
	c := g.callers[st.conn]
	a := Args{ID: t.id, Priority: int(t.prio)}
	result := outAborted
	n := 0
	for n < g.cfg.attempts {
		n++
		ctx, cancel := context.WithTimeout(g.ctx, g.cfg.deadline)
		dl, _ := ctx.Deadline()
		a.Deadline = dl.UnixNano()
		t0 := time.Now()
		result = c.call(ctx, st.method, a)
		t1 := time.Now()
		cancel()
		if result == outAborted {
			break
		}
		g.mu.Lock()
		g.attempts = append(g.attempts, attempt{start: t0.Sub(g.start), end: t1.Sub(g.start), kind: result, prio: t.prio, stream: t.stream})
		g.mu.Unlock()
		if result != outTimeout {
			break
		}
	}
	g.mu.Lock()
	g.requests = append(g.requests, request{arrive: t.arrive, lag: lag, prio: t.prio, stream: t.stream, result: result, attempts: uint8(n)})
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

package kiev_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/admin"
	"github.com/kievrpc/kiev/shed"
)

// Backend is a service whose calls wait as handlers that call a
// database or another service do.
type Backend struct {
	hold  time.Duration // how long Sleep and Use take
	slots chan struct{} // the dependency Use holds a slot of while it works
}

func newBackend(hold time.Duration, slots int) *Backend {
	return &Backend{hold: hold, slots: make(chan struct{}, slots)}
}

// Sleep waits b.hold, as a handler blocked on I/O with no limit of its
// own.
func (b *Backend) Sleep(_ int, _ *int) error {
	time.Sleep(b.hold)
	return nil
}

// Use takes one of the dependency's slots for b.hold, as a handler
// calling a pool of connections: past that pool's capacity the calls
// wait for a slot, and the method slows down.
func (b *Backend) Use(ctx context.Context, _ int, _ *int) error {
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	time.Sleep(b.hold)
	<-b.slots
	return nil
}

// Fast returns at once.
func (b *Backend) Fast(_ int, r *int) error {
	*r = 1
	return nil
}

// loop counts the outcomes of a closed-loop load.
type loop struct {
	mu       sync.Mutex
	ok       int
	limited  int             // ErrLimited: refused at the method's adaptive limit
	refusals []time.Duration // how long each ErrOverloaded took
	refusal  error           // the first ErrOverloaded
	served   []time.Duration // how long each call that succeeded took
	other    []error         // anything but success and ErrOverloaded
	elapsed  time.Duration
}

func (l *loop) add(err error, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.ok++
		l.served = append(l.served, took)
	case errors.Is(err, kiev.ErrOverloaded):
		l.refusals = append(l.refusals, took)
		if l.refusal == nil {
			l.refusal = err
		}
		if errors.Is(err, kiev.ErrLimited) {
			l.limited++
		}
	default:
		if len(l.other) < 10 {
			l.other = append(l.other, err)
		}
	}
}

func (l *loop) calls() int { return l.ok + len(l.refusals) + len(l.other) }

// successRate is the share of l's calls that succeeded.
func (l *loop) successRate() float64 {
	if l.calls() == 0 {
		return 0
	}
	return float64(l.ok) / float64(l.calls())
}

// median returns the median of ds, or 0 if there are none.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	r := slices.Clone(ds)
	slices.Sort(r)
	return r[len(r)/2]
}

// closedLoop runs callers goroutines that each call method on c, wait for
// the answer and, after pause, call again, until until or maxCalls calls
// each, and returns once they are all done.
func closedLoop(c *kiev.Client, method string, callers, maxCalls int, until time.Time, pause time.Duration) *loop {
	l := &loop{}
	start := time.Now()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range maxCalls {
				if time.Now().After(until) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				t0 := time.Now()
				err := c.Call(ctx, method, 0, new(int))
				l.add(err, time.Since(t0))
				cancel()
				if pause > 0 {
					time.Sleep(pause) // the caller's pace, not synchronisation
				}
			}
		})
	}
	wg.Wait()
	l.elapsed = time.Since(start)
	return l
}

// unlimited is what a flooding client dials with: no retries and no
// client-side throttle, so that every call reaches the server once.
var unlimited = []kiev.DialOption{
	kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1}),
	kiev.WithThrottle(kiev.Throttle{Disabled: true}),
}

// methodStatus returns the status page's entry for service.method.
func methodStatus(t *testing.T, srv *kiev.Server, service, method string) admin.MethodStatus {
	t.Helper()
	for _, s := range srv.Status(context.Background()).Services {
		if s.Name != service {
			continue
		}
		for _, m := range s.Methods {
			if m.Name == method {
				return m
			}
		}
	}
	t.Fatalf("the status page lists no %s.%s", service, method)
	return admin.MethodStatus{}
}

// waitingLoad runs callers in closed loop for ten round trips of hold
// (and no less than a second) against a server with default settings, whose method sleeps hold, as handlers
// waiting on I/O do, while burners goroutines of the process keep the
// CPU busy. It returns what the callers saw, and the most the pool's
// limit reached while they called (it decays once the calls stop).
func waitingLoad(t *testing.T, callers int, hold time.Duration, burners int) (l *loop, workers int) {
	srv := kiev.NewServer()
	srv.Register(newBackend(hold, 0))
	c := dial(t, startServer(t, srv), unlimited...)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range burners {
		wg.Go(func() {
			for x := 0; ; x++ {
				if x%(1<<16) == 0 {
					select {
					case <-stop:
						return
					default:
					}
				}
			}
		})
	}
	peak := make(chan int)
	go func() {
		most := 0
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			most = max(most, srv.Status(context.Background()).Scheduler.Workers)
			select {
			case <-tick.C:
			case <-stop:
				peak <- most
				return
			}
		}
	}()
	// Ten round trips: a method is bounded from its first call, its
	// bound doubling each round trip (shed's slow start), so the first
	// three or four serve fewer calls than come.
	l = closedLoop(c, "Backend.Sleep", callers, 100, time.Now().Add(max(time.Second, 10*hold)), 0)
	close(stop)
	workers = <-peak
	wg.Wait()

	rate := float64(l.ok) / l.elapsed.Seconds()
	ideal := float64(callers) / hold.Seconds()
	t.Logf("%d calls in %v: %.0f/s of an ideal %.0f/s (%.2f); %d refused (%d at the adaptive limit; first: %v), %d other errors; pool peaked at %d (starts at %d); scheduler %+v; method %+v",
		l.calls(), l.elapsed.Round(time.Millisecond), rate, ideal, rate/ideal, len(l.refusals), l.limited, l.refusal, len(l.other),
		workers, shed.DefaultWorkers(), srv.Status(context.Background()).Scheduler, methodStatus(t, srv, "Backend", "Sleep"))
	return l, workers
}

// A server with default settings runs as many handlers that wait on I/O
// as come: 400 callers of a 20 ms method are all served, none refused,
// and the pool grows past where it starts.
//
// Under the race detector the client and server need some ten times the
// CPU, and 2 CPUs do not keep up with 20,000 calls a second: the method
// sleeps 200 ms instead, so that the CPU keeps up, which is the case
// this test is about (TestElasticPoolServesWaitingHandlersBesideCPUWork
// is the other).
func TestElasticPoolServesWaitingHandlers(t *testing.T) {
	noLeaks(t)
	const callers = 400
	hold := 20 * time.Millisecond
	if raceEnabled {
		hold = 200 * time.Millisecond
	}
	l, workers := waitingLoad(t, callers, hold, 0)
	// Under the race detector the 400 callers starting at once keep the
	// CPU busy for a moment, which the pool takes for calls that want the
	// CPU (TestElasticPoolServesWaitingHandlersBesideCPUWork's fault):
	// one run in eight saw a call expire in the queue so. A refusal in a
	// hundred is let pass there; none without it.
	refusable := 0
	if raceEnabled {
		refusable = l.calls() / 100
	}
	if len(l.refusals) > refusable || len(l.other) != 0 {
		t.Errorf("%d calls refused (first: %v) and %d failed (%v); a server on defaults must run every waiting handler",
			len(l.refusals), l.refusal, len(l.other), l.other)
	}
	// The point is that calls are not refused or held back, not speed.
	// Under the race detector the loop holds ten rounds of 200 ms, the
	// first slowed by 400 goroutines starting, and the first three or
	// four by the method's slow start: 0.39 to 0.76 of the ideal was
	// measured on 2 CPUs shared with a benchmark, over five rounds and
	// before the slow start.
	want := 0.6
	if raceEnabled {
		want = 0.3
	}
	rate, ideal := float64(l.ok)/l.elapsed.Seconds(), callers/hold.Seconds()
	if rate < want*ideal {
		t.Errorf("throughput %.0f calls/s, want at least %.0f (%.0f%% of %d callers / %v)", rate, want*ideal, 100*want, callers, hold)
	}
	if workers <= shed.DefaultWorkers() {
		t.Errorf("the pool's limit peaked at %d, want it above DefaultWorkers() = %d while %d handlers wait", workers, shed.DefaultWorkers(), callers)
	}
}

// Handlers that wait on I/O are not refused at their method's limit when
// other work of the process keeps the CPU busy: they hold no CPU, and no
// dependency is slow. They may take longer.
//
// The elastic pool reads the CPU from the Go runtime, which cannot tell
// the server's goroutines from the others of the process: with the
// burners and the 400 callers in the same process, the pool stops
// growing at times, and a few calls then wait in its queue past MaxWait.
// That is the queue's overload rule on a CPU that is truly starved, not a
// dependency blamed; up to a tenth is let pass.
//
// Under the race detector the process needs some ten times the CPU, and
// the 400 callers' calls stall together for tens of milliseconds at a
// time, which now and then reads as a surge before the method: in 30
// runs on 2 CPUs, 5 had calls refused at its limit, 66 to 1,005 of 1,200
// to 2,200. There a tenth of the calls may be refused, at its limit or
// not; none without the race detector.
func TestElasticPoolServesWaitingHandlersBesideCPUWork(t *testing.T) {
	noLeaks(t)
	l, _ := waitingLoad(t, 400, 20*time.Millisecond, 2*runtime.GOMAXPROCS(0))
	limited := 0
	if raceEnabled {
		limited = l.calls() / 10
	}
	if l.limited > limited || len(l.refusals) > l.calls()/10 {
		t.Errorf("%d of %d calls of a method that only sleeps were refused, %d at its adaptive limit (first: %v); the CPU is busy with other work, not with them, and no dependency is slow",
			len(l.refusals), l.calls(), l.limited, l.refusal)
	}
}

// A method whose dependency saturates is held to its adaptive limit: its
// calls beyond it wait in its lane or, those that could not start in
// time, are refused at once, and another method of the same server goes
// on answering.
func TestBulkheadHoldsSlowMethod(t *testing.T) {
	noLeaks(t)
	srv := kiev.NewServer()
	srv.Register(newBackend(20*time.Millisecond, 8)) // 8 slots × 20 ms: 400 calls/s
	addr := startServer(t, srv)
	flood := dial(t, addr, unlimited...)
	other := dial(t, addr, unlimited...)

	until := time.Now().Add(1500 * time.Millisecond)
	var slow, fast *loop
	var wg sync.WaitGroup
	wg.Go(func() { slow = closedLoop(flood, "Backend.Use", 300, 5000, until, 0) })
	wg.Go(func() { fast = closedLoop(other, "Backend.Fast", 4, 2000, until, time.Millisecond) })
	wg.Wait()

	use := methodStatus(t, srv, "Backend", "Use")
	fastSt := methodStatus(t, srv, "Backend", "Fast")
	t.Logf("Use: %d calls, %d ok (median %v), %d refused (%d at the adaptive limit, median %v), %d other errors; status %+v",
		slow.calls(), slow.ok, median(slow.served), len(slow.refusals), slow.limited, median(slow.refusals), len(slow.other), use)
	t.Logf("Fast: %d calls, %d ok (%.2f%%, median %v), %d refused, %d other errors; status %+v",
		fast.calls(), fast.ok, 100*fast.successRate(), median(fast.served), len(fast.refusals), len(fast.other), fastSt)

	if len(slow.other) != 0 {
		t.Errorf("the slow method's calls failed otherwise than ErrOverloaded: %v", slow.other)
	}
	if len(slow.refusals) == 0 || slow.limited == 0 {
		t.Errorf("%d of the slow method's calls refused, %d at its adaptive limit; want the flood refused at the limit", len(slow.refusals), slow.limited)
	}
	// A refusal is answered at once, a served call after its wait for
	// the dependency. The 300 callers share one connection, so a round
	// trip there takes 300 calls' worth of the client's and server's CPU:
	// under the race detector some 20 to 35 ms on 2 CPUs, whence its
	// looser absolute bound.
	bound := 10 * time.Millisecond
	if raceEnabled {
		bound = 100 * time.Millisecond
	}
	if m, w := median(slow.refusals), median(slow.served); m >= bound || m >= w/4 {
		t.Errorf("median refusal took %v, a served call %v; a refusal at the limit must come at once (under %v), not after a wait for the 20 ms dependency", m, w, bound)
	}
	if use.Limit == 0 && use.Limited == 0 {
		t.Errorf("status of Backend.Use shows no limit and no call limited: %+v", use)
	}
	if fast.calls() < 100 || fast.successRate() < 0.99 || len(fast.other) != 0 {
		t.Errorf("the fast method: %d calls, %.2f%% ok, %d refused, errors %v; want at least 100 calls, 99%% ok, beside a slow neighbour",
			fast.calls(), 100*fast.successRate(), len(fast.refusals), fast.other)
	}
	if fastSt.Limited != 0 {
		t.Errorf("the fast method had calls refused at an adaptive limit beside its slow neighbour: %+v", fastSt)
	}
}

// A refusal at a method's adaptive limit is ErrLimited (and
// ErrOverloaded): the client throttles that method alone on the server,
// and goes on sending the server's other methods, as the server goes on
// answering them. A client with its defaults (retries, throttle) floods a
// slow method and calls a quick one beside it.
func TestLimitedRefusalThrottlesTheMethodAlone(t *testing.T) {
	noLeaks(t)
	srv := kiev.NewServer(kiev.WithShed(shed.Options{MaxWait: 10 * time.Millisecond}))
	srv.Register(newBackend(20*time.Millisecond, 4)) // 4 slots × 20 ms: 200 calls/s
	c := dial(t, startServer(t, srv))

	until := time.Now().Add(1500 * time.Millisecond)
	var slow, fast *loop
	var wg sync.WaitGroup
	wg.Go(func() { slow = closedLoop(c, "Backend.Use", 100, 5000, until, 0) })
	wg.Go(func() { fast = closedLoop(c, "Backend.Fast", 4, 2000, until, time.Millisecond) })
	wg.Wait()
	t.Logf("Use: %d calls, %d ok, %d refused (%d ErrLimited; first: %v); Fast: %d calls, %d ok, %d refused (first: %v)",
		slow.calls(), slow.ok, len(slow.refusals), slow.limited, slow.refusal, fast.calls(), fast.ok, len(fast.refusals), fast.refusal)
	if slow.limited == 0 {
		t.Errorf("none of the slow method's %d calls was refused with ErrLimited; want its flood refused at its limit", slow.calls())
	}
	if slow.limited != len(slow.refusals) {
		t.Errorf("%d of the slow method's refusals were ErrOverloaded without ErrLimited; the server is not overloaded, the method is", len(slow.refusals)-slow.limited)
	}
	if len(fast.refusals) != 0 || len(fast.other) != 0 || fast.calls() < 100 {
		t.Errorf("the quick method beside it: %d calls, %d refused (first: %v), errors %v; want every call sent and served", fast.calls(), len(fast.refusals), fast.refusal, fast.other)
	}
}

// A method that returns at once is not held by an adaptive limit on an
// idle server: eight callers of one client, each calling every
// millisecond, are all served.
func TestBulkheadSparesQuickMethod(t *testing.T) {
	noLeaks(t)
	srv := kiev.NewServer()
	srv.Register(newBackend(time.Millisecond, 8))
	c := dial(t, startServer(t, srv), unlimited...)
	l := closedLoop(c, "Backend.Fast", 8, 1500, time.Now().Add(1500*time.Millisecond), time.Millisecond)
	m := methodStatus(t, srv, "Backend", "Fast")
	t.Logf("%d calls, %d refused (%d at the limit); status %+v", l.calls(), len(l.refusals), l.limited, m)
	if len(l.refusals) != 0 || len(l.other) != 0 {
		t.Errorf("%d of %d calls of a method that returns at once refused (%d at its adaptive limit), errors %v; want all served",
			len(l.refusals), l.calls(), l.limited, l.other)
	}
}

// A method whose dependency is saturated from its first calls is limited
// as one that slowed later is.
func TestBulkheadLimitsMethodSaturatedFromStart(t *testing.T) {
	noLeaks(t)
	srv := kiev.NewServer()
	srv.Register(newBackend(2*time.Millisecond, 8))
	c := dial(t, startServer(t, srv), unlimited...)
	l := closedLoop(c, "Backend.Use", 100, 5000, time.Now().Add(1500*time.Millisecond), 0)
	m := methodStatus(t, srv, "Backend", "Use")
	t.Logf("%d calls, %d refused (%d at the limit); status %+v", l.calls(), len(l.refusals), l.limited, m)
	if m.Limit == 0 && m.Limited == 0 {
		t.Errorf("100 callers held a dependency of 8 slots for 1.5 s (service time %.1f ms, floor %.1f ms for a 2 ms hold) and its method was never limited",
			m.LatencyMs, m.FloorMs)
	}
}

// fairnessRun serves a method that holds one of 8 slots for 2 ms (4000
// calls/s) to 11 connections: 10 honest ones that call one at a time,
// every 10 ms (a quarter of the dependency's capacity in all), and one
// that floods with 100 callers (a queue of 25 ms before the dependency,
// past the server's wait limit of 15 ms). The honest ones call first; it
// returns what the flooder and the honest connections saw while it
// flooded.
func fairnessRun(t *testing.T) (flood, honest *loop) {
	srv := kiev.NewServer(kiev.WithShed(shed.Options{MaxWait: 15 * time.Millisecond}))
	srv.Register(newBackend(2*time.Millisecond, 8))
	addr := startServer(t, srv)
	flooder := dial(t, addr, unlimited...)
	clients := make([]*kiev.Client, 10)
	for i := range clients {
		clients[i] = dial(t, addr, unlimited...)
	}

	const pace = 10 * time.Millisecond
	warm := time.Now().Add(300 * time.Millisecond)
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() { closedLoop(c, "Backend.Use", 1, 50, warm, pace) })
	}
	wg.Wait()

	until := time.Now().Add(1200 * time.Millisecond)
	polite := make([]*loop, len(clients))
	wg.Go(func() { flood = closedLoop(flooder, "Backend.Use", 100, 5000, until, 0) })
	for i, c := range clients {
		wg.Go(func() { polite[i] = closedLoop(c, "Backend.Use", 1, 200, until, pace) })
	}
	wg.Wait()

	honest = &loop{}
	for _, l := range polite {
		honest.ok += l.ok
		honest.limited += l.limited
		honest.refusals = append(honest.refusals, l.refusals...)
		if honest.refusal == nil {
			honest.refusal = l.refusal
		}
		honest.other = append(honest.other, l.other...)
	}
	use := methodStatus(t, srv, "Backend", "Use")
	t.Logf("flooder: %d calls, %.2f%% ok, %d refused (%d at the limit); honest: %d calls, %.2f%% ok, %d refused (%d at the limit; first: %v), %d other errors; status %+v; scheduler %+v",
		flood.calls(), 100*flood.successRate(), len(flood.refusals), flood.limited,
		honest.calls(), 100*honest.successRate(), len(honest.refusals), honest.limited, honest.refusal, len(honest.other), use, srv.Status(context.Background()).Scheduler)
	if len(flood.refusals) == 0 {
		t.Errorf("the flooder's %d calls were all served; want the limit to bind and refuse some", flood.calls())
	}
	if len(flood.other) != 0 || len(honest.other) != 0 {
		t.Errorf("calls failed otherwise than ErrOverloaded: flooder %v, honest %v", flood.other, honest.other)
	}
	// Enough calls for the success rate to mean something: each honest
	// connection makes up to 120 in the 1.2 s, paced; on a machine
	// loaded by parallel test packages, the flood's queue slowed them to
	// 193 in all once, every one served.
	if honest.calls() < 100 {
		t.Errorf("the honest connections made %d calls; want at least 100 (10 each)", honest.calls())
	}
	return flood, honest
}

// Under a binding limit, connections that stay within their share are
// served, and the one that floods gets what is left.
//
// When the flood starts, the method is not limited yet, and its calls
// pile before the dependency for a window or two; the honest calls wait
// behind them, and a few are refused as the limit starts. In 20 runs on
// 2 CPUs, the honest connections were served 98.1% to 100% (median
// 100%), and in 10 under the race detector 99.0% to 100%; 97% is asked.
// bench/overload's neighbour workload, each client a process of its own,
// serves them 100%.
func TestFairnessBetweenConnections(t *testing.T) {
	noLeaks(t)
	_, honest := fairnessRun(t)
	const want = 0.97
	if honest.successRate() < want {
		t.Errorf("honest connections: %.2f%% of %d calls ok (%d refused at the limit); want %.0f%%",
			100*honest.successRate(), honest.calls(), honest.limited, 100*want)
	}
}

// WithPriorityPolicy decides the priority a call runs at, and the
// handler sees it.
func TestPriorityPolicyCapsUntrustedCallers(t *testing.T) {
	noLeaks(t)
	const token = "ops-7f3a"
	var policySaw sync.Map // ServiceMethod -> struct{}
	cap2 := func(req *kiev.Request, claimed kiev.Priority) kiev.Priority {
		policySaw.Store(req.ServiceMethod, struct{}{})
		if req.Metadata.Get(kiev.AuthorizationKey) == token {
			return claimed
		}
		return min(claimed, 2)
	}
	srv := kiev.NewServer(kiev.WithPriorityPolicy(cap2))
	srv.Register(&Hop{})
	addr := startServer(t, srv)
	clients := map[string]*kiev.Client{
		"none":    dial(t, addr),
		"trusted": dial(t, addr, kiev.WithToken(token)),
		"wrong":   dial(t, addr, kiev.WithToken("guess")),
	}
	for _, tc := range []struct {
		client string
		claim  int // -1: none
		want   kiev.Priority
	}{
		{"none", -1, 2},
		{"none", 8, 2},
		{"none", 2, 2},
		{"none", 1, 1},
		{"none", 0, 0},
		{"wrong", 9, 2},
		{"trusted", -1, kiev.DefaultPriority},
		{"trusted", 8, 8},
		{"trusted", 9, 9},
		{"trusted", 1, 1},
	} {
		ctx := context.Background()
		if tc.claim >= 0 {
			ctx = kiev.WithPriority(ctx, kiev.Priority(tc.claim))
		}
		var r HopReport
		if err := clients[tc.client].Call(ctx, "Hop.Report", 0, &r); err != nil {
			t.Fatalf("%s token, claim %d: %v", tc.client, tc.claim, err)
		}
		if r.Priority != tc.want {
			t.Errorf("%s token, claim %d: handler ran at %d, want %d", tc.client, tc.claim, r.Priority, tc.want)
		}
	}
	if _, ok := policySaw.Load("Hop.Report"); !ok {
		t.Error("the policy was never given the call's ServiceMethod")
	}
}

// NewServer refuses shed settings that are not valid, naming the field.
func TestNewServerRefusesBadShedSettings(t *testing.T) {
	noLeaks(t)
	newServer := func(o shed.Options) (err error) {
		defer func() {
			if r := recover(); r != nil {
				e, ok := r.(error)
				if !ok {
					e = fmt.Errorf("panic with a %T: %v", r, r)
				}
				err = e
			}
		}()
		srv := kiev.NewServer(kiev.WithShed(o))
		srv.Close()
		return nil
	}
	for _, tc := range []struct {
		opts  shed.Options
		field string
	}{
		{shed.Options{Workers: -1}, "Options.Workers"},
		{shed.Options{MaxInFlight: 4, Workers: 8}, "Options.MaxInFlight"},
		{shed.Options{MaxWait: -time.Second}, "Options.MaxWait"},
		{shed.Options{QueueSize: -1}, "Options.QueueSize"},
		{shed.Options{Target: -time.Millisecond}, "Options.Target"},
		{shed.Options{Interval: -time.Millisecond}, "Options.Interval"},
		{shed.Options{MaxInFlight: -1}, "Options.MaxInFlight"},
	} {
		err := newServer(tc.opts)
		if err == nil {
			t.Errorf("NewServer(WithShed(%+v)) did not panic", tc.opts)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "kiev: NewServer: WithShed: shed: ") || !strings.Contains(msg, tc.field) {
			t.Errorf("NewServer(WithShed(%+v)) panicked with %q; want it to name WithShed and %s", tc.opts, msg, tc.field)
		}
		verr := tc.opts.Validate()
		if verr == nil || !strings.HasSuffix(err.Error(), verr.Error()) {
			t.Errorf("%+v.Validate() = %v; want the error NewServer panics with, %q", tc.opts, verr, err)
		}
	}
	for _, ok := range []shed.Options{{}, {Workers: 8, MaxInFlight: 8}, {Workers: 8}, {MaxInFlight: 4}, {Disabled: true}} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%+v.Validate() = %v, want nil", ok, err)
		}
		if err := newServer(ok); err != nil {
			t.Errorf("NewServer(WithShed(%+v)) panicked: %v", ok, err)
		}
	}
}

// The status page and the metrics show the pool's limit and each
// method's.
func TestStatusAndMetricsShowLimits(t *testing.T) {
	noLeaks(t)
	srv := kiev.NewServer()
	srv.Register(newBackend(time.Millisecond, 8))
	c := dial(t, startServer(t, srv))
	for range 20 {
		if err := c.Call(context.Background(), "Backend.Use", 0, new(int)); err != nil {
			t.Fatal(err)
		}
	}
	st := srv.Status(context.Background()).Scheduler
	// The limit starts at DefaultWorkers() and, with few calls running,
	// decays toward twice their number: any value up to the ceiling.
	if !st.Elastic || st.MaxInFlight != shed.DefaultMaxInFlight || st.Workers <= 0 || st.Workers > st.MaxInFlight {
		t.Errorf("scheduler status on defaults %+v; want elastic, MaxInFlight %d, Workers above 0 up to it", st, shed.DefaultMaxInFlight)
	}
	if _, ok := st.Dropped["limited"]; !ok {
		t.Errorf("scheduler status counts no drops for reason limited: %v", st.Dropped)
	}
	if m := methodStatus(t, srv, "Backend", "Use"); m.Calls != 20 || m.Limit != 0 || m.Limited != 0 {
		t.Errorf("Backend.Use after 20 calls within its dependency's capacity: %+v; want no limit", m)
	}

	hs := httptest.NewServer(srv.AdminHandler())
	t.Cleanup(hs.Close)
	body := get(t, hs.URL+"/metrics")
	for _, want := range []string{
		"\nkiev_server_concurrency_limit ",
		`kiev_server_method_concurrency_limit{method="Backend.Use"} 0`,
		`kiev_server_method_concurrency_limit{method="Backend.Fast"} 0`,
		`kiev_server_method_in_flight{method="Backend.Use"} `,
		`kiev_server_shed_total{reason="limited"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

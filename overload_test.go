package kiev_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/shed"
)

// Hop reports what the handler's ctx carried; Relay calls Hop on another
// server with its own ctx, as a service in the middle of a chain would.
type Hop struct {
	next *kiev.Client
}

type HopReport struct {
	Priority kiev.Priority
	Left     time.Duration // until the deadline; -1 if none
}

func (h *Hop) Report(ctx context.Context, _ int, r *HopReport) error {
	r.Priority = kiev.PriorityFrom(ctx)
	r.Left = -1
	if d, ok := ctx.Deadline(); ok {
		r.Left = time.Until(d)
	}
	return nil
}

func (h *Hop) Relay(ctx context.Context, override int, r *HopReport) error {
	if override >= 0 {
		ctx = kiev.WithPriority(ctx, kiev.Priority(override))
	}
	return h.next.Call(ctx, "Hop.Report", 0, r)
}

func TestPriorityAndDeadlineInheritAcrossHop(t *testing.T) {
	back := kiev.NewServer()
	back.Register(&Hop{})
	backClient := dial(t, startServer(t, back))
	front := kiev.NewServer()
	front.Register(&Hop{next: backClient})
	c := dial(t, startServer(t, front))

	var r HopReport
	if err := c.Call(context.Background(), "Hop.Relay", -1, &r); err != nil {
		t.Fatal(err)
	}
	if r.Priority != kiev.DefaultPriority || r.Left != -1 {
		t.Errorf("plain call arrived two hops on with %v, deadline %v; want the default and none", r.Priority, r.Left)
	}

	ctx, cancel := context.WithTimeout(kiev.WithPriority(context.Background(), 8), 2*time.Second)
	defer cancel()
	if err := c.Call(ctx, "Hop.Relay", -1, &r); err != nil {
		t.Fatal(err)
	}
	if r.Priority != 8 || r.Left <= time.Second || r.Left > 2*time.Second {
		t.Errorf("second hop saw %v with %v left; want priority 8 and just under 2s", r.Priority, r.Left)
	}
	if err := c.Call(ctx, "Hop.Relay", 2, &r); err != nil || r.Priority != 2 {
		t.Errorf("handler that overrides the priority: second hop saw %v, %v", r.Priority, err)
	}
}

// waitQueued waits until srv's scheduler holds n queued calls.
func waitQueued(t *testing.T, srv *kiev.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := srv.Scheduler().Stats()
		total := 0
		for _, q := range st.Queued {
			total += q
		}
		if total == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("scheduler holds %d queued calls, want %d", total, n)
		}
	}
}

var noRetry = kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1})

// The scheduler guards calls over UDP as over TCP: a full queue refuses
// a call of no higher priority and evicts a less important one for a
// more important one, each answered ErrOverloaded at once.
func TestFullQueueRefusesAndEvictsWithErrOverloaded(t *testing.T) {
	serve := map[string]func(*testing.T, *kiev.Server) string{
		"tcp": func(t *testing.T, srv *kiev.Server) string { return startServer(t, srv) },
		"udp": func(t *testing.T, srv *kiev.Server) string { return servePacket(t, srv, nil) },
	}
	for name, serve := range serve {
		t.Run(name, func(t *testing.T) { fullQueueRefusesAndEvicts(t, serve) })
	}
}

func fullQueueRefusesAndEvicts(t *testing.T, serve func(*testing.T, *kiev.Server) string) {
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 1)}
	srv := kiev.NewServer(kiev.WithShed(shed.Options{Workers: 1, QueueSize: 1}))
	srv.Register(svc)
	c := dial(t, serve(t, srv), noRetry)
	bg := context.Background()

	blocked := c.Go(bg, "Arith.Block", Args{A: 1}, &Reply{}, nil)
	<-svc.started
	queued := c.Go(kiev.WithPriority(bg, 3), "Arith.Add", Args{1, 1}, &Reply{}, nil)
	waitQueued(t, srv, 1)

	// Same priority as the queued call: refused at once.
	start := time.Now()
	err := c.Call(kiev.WithPriority(bg, 3), "Arith.Add", Args{}, &Reply{})
	if !errors.Is(err, kiev.ErrOverloaded) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("call to a full queue = %v; want ErrOverloaded (refused)", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("refusal took %v; it must come at once", d)
	}

	// More important: takes the queued call's place, which is answered.
	important := c.Go(kiev.WithPriority(bg, 9), "Arith.Add", Args{2, 2}, &Reply{}, nil)
	<-queued.Done
	if !errors.Is(queued.Error, kiev.ErrOverloaded) || !strings.Contains(queued.Error.Error(), "more important call") {
		t.Fatalf("evicted call = %v; want ErrOverloaded saying it was evicted", queued.Error)
	}
	close(svc.block)
	<-blocked.Done
	<-important.Done
	if important.Error != nil || important.Reply.(*Reply).C != 4 {
		t.Fatalf("important call = %v, %v", important.Reply, important.Error)
	}
	st := srv.Scheduler().Stats()
	if st.DroppedFor(shed.Refused) != 1 || st.DroppedFor(shed.Evicted) != 1 {
		t.Errorf("drops = %v; want one refused and one evicted", st.Dropped)
	}
}

func TestCallPastItsDeadlineInTheQueueIsNeverRun(t *testing.T) {
	var adds atomic.Int32
	count := func(next kiev.Handler) kiev.Handler {
		return func(ctx context.Context, req *kiev.Request) error {
			if req.ServiceMethod == "Arith.Add" {
				adds.Add(1)
			}
			return next(ctx, req)
		}
	}
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 1)}
	srv := kiev.NewServer(kiev.WithShed(shed.Options{Workers: 1, MaxWait: time.Minute}), kiev.WithServerInterceptor(count))
	srv.Register(svc)
	c := dial(t, startServer(t, srv), noRetry)

	blocked := c.Go(context.Background(), "Arith.Block", Args{}, &Reply{}, nil)
	<-svc.started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	deadline, _ := ctx.Deadline()
	sent := time.Now()
	queued := c.Go(ctx, "Arith.Add", Args{1, 1}, &Reply{}, nil)
	// The server's deadline for the call is the caller's plus the
	// request's transit, which ended before the server queued it.
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	waitFor(t, wctx, "the call queued", func() bool {
		return srv.Scheduler().Stats().Queued[kiev.DefaultPriority] == 1
	})
	transit := time.Since(sent)
	if err := (<-queued.Done).Error; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued call = %v; want DeadlineExceeded", err)
	}
	// Free the worker only once the server's deadline has passed too:
	// a call may run until then, as its caller's clock runs ahead by
	// the transit.
	<-time.After(time.Until(deadline.Add(transit)))
	close(svc.block)
	<-blocked.Done
	// Once the worker is free, a fresh call runs; the expired one did not.
	var r Reply
	if err := c.Call(context.Background(), "Arith.Add", Args{2, 3}, &r); err != nil || r.C != 5 {
		t.Fatal(r, err)
	}
	if n := adds.Load(); n != 1 {
		t.Fatalf("Arith.Add ran %d times; the call whose caller had gone must not run", n)
	}
	if d := srv.Scheduler().Stats().DroppedFor(shed.Deadline); d != 1 {
		t.Errorf("deadline drops = %d, want 1", d)
	}
}

// refuser answers every call as an overloaded server would, counting
// them.
func refuser(attempts *atomic.Int32, refuse func(n int32) bool) kiev.ServerInterceptor {
	return func(next kiev.Handler) kiev.Handler {
		return func(ctx context.Context, req *kiev.Request) error {
			if n := attempts.Add(1); refuse(n) {
				return &kiev.ServerError{Code: kiev.CodeOverloaded, Message: "kiev: shed"}
			}
			return next(ctx, req)
		}
	}
}

func TestRetryBudgetBoundsRetries(t *testing.T) {
	var attempts atomic.Int32
	srv := kiev.NewServer(kiev.WithServerInterceptor(refuser(&attempts, func(int32) bool { return true })))
	srv.Register(&Arith{})
	c := dial(t, startServer(t, srv), kiev.WithThrottle(kiev.Throttle{Disabled: true}))
	const calls = 500
	for range calls {
		if err := c.Call(context.Background(), "Arith.Add", Args{}, &Reply{}); !errors.Is(err, kiev.ErrOverloaded) {
			t.Fatalf("call = %v; want ErrOverloaded", err)
		}
	}
	// The budget starts with 10 retries, earns 0.1 per call, and loses one
	// per refusal: far fewer than the 2 retries per call MaxAttempts allows.
	extra := float64(attempts.Load()-calls) / calls
	if extra > 0.1 {
		t.Fatalf("%d attempts for %d calls: %.0f%% extra load, want at most 10%%", attempts.Load(), calls, 100*extra)
	}
}

func TestRetryRecoversFromTransientRefusal(t *testing.T) {
	var attempts atomic.Int32
	srv := kiev.NewServer(kiev.WithServerInterceptor(refuser(&attempts, func(n int32) bool { return n%2 == 1 })))
	srv.Register(&Arith{})
	c := dial(t, startServer(t, srv), kiev.WithThrottle(kiev.Throttle{Disabled: true}))
	var r Reply
	if err := c.Call(context.Background(), "Arith.Add", Args{2, 2}, &r); err != nil || r.C != 4 {
		t.Fatalf("call = %v, %v; want a retry to succeed", r.C, err)
	}
	if n := attempts.Load(); n != 2 {
		t.Fatalf("%d attempts, want 2", n)
	}
	// A handler's own error is an answer, never retried.
	attempts.Store(1) // the next attempt is let through
	if err := c.Call(context.Background(), "Arith.Div", Args{1, 0}, &r); err == nil || attempts.Load() != 2 {
		t.Fatalf("handler error: %v after %d attempts; want 1 attempt", err, attempts.Load()-1)
	}
}

func TestThrottleRefusesLocallyPerPriority(t *testing.T) {
	var attempts atomic.Int32
	lowOnly := func(next kiev.Handler) kiev.Handler {
		return func(ctx context.Context, req *kiev.Request) error {
			attempts.Add(1)
			if kiev.PriorityFrom(ctx) < 9 {
				return &kiev.ServerError{Code: kiev.CodeOverloaded, Message: "kiev: shed"}
			}
			return next(ctx, req)
		}
	}
	srv := kiev.NewServer(kiev.WithServerInterceptor(lowOnly))
	srv.Register(&Arith{})
	c := dial(t, startServer(t, srv), noRetry)
	const calls = 400
	local := 0
	low := kiev.WithPriority(context.Background(), 1)
	for range calls {
		err := c.Call(low, "Arith.Add", Args{}, &Reply{})
		if !errors.Is(err, kiev.ErrOverloaded) {
			t.Fatalf("low-priority call = %v", err)
		}
		if strings.Contains(err.Error(), "refused by the client") {
			local++
		}
	}
	if sent := int(attempts.Load()); sent+local != calls || local < calls/2 {
		t.Fatalf("%d calls sent, %d refused locally; want most refused without reaching the server", sent, local)
	}
	high := kiev.WithPriority(context.Background(), 9)
	for range 50 {
		if err := c.Call(high, "Arith.Add", Args{1, 1}, &Reply{}); err != nil {
			t.Fatalf("priority-9 call throttled by low-priority refusals: %v", err)
		}
	}
}

func TestShedDisabledRunsEveryCall(t *testing.T) {
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 20)}
	srv := kiev.NewServer(kiev.WithShed(shed.Options{Workers: 1, QueueSize: 1, Disabled: true}))
	srv.Register(svc)
	c := dial(t, startServer(t, srv))
	var calls []*kiev.Call
	for range 10 {
		calls = append(calls, c.Go(context.Background(), "Arith.Block", Args{A: 1}, &Reply{}, nil))
	}
	for range 10 {
		<-svc.started // all ten run at once, past Workers and QueueSize
	}
	close(svc.block)
	for _, call := range calls {
		<-call.Done
		if call.Error != nil {
			t.Fatal(call.Error)
		}
	}
}

// TestDropHookSeesShedCalls: WithDropHook hears of every call the
// scheduler drops unrun, with its Request and metadata and why, before
// the caller is answered.
func TestDropHookSeesShedCalls(t *testing.T) {
	type drop struct {
		method, trace string
		reason        shed.Reason
		priority      kiev.Priority
	}
	drops := make(chan drop, 4)
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 1)}
	srv := kiev.NewServer(kiev.WithShed(shed.Options{Workers: 1, QueueSize: 1}), kiev.WithDropHook(func(ctx context.Context, req *kiev.Request, r shed.Reason) {
		drops <- drop{req.ServiceMethod, req.Metadata.Get("trace-id"), r, kiev.PriorityFrom(ctx)}
	}))
	srv.Register(svc)
	c := dial(t, startServer(t, srv), noRetry)
	bg := context.Background()

	blocked := c.Go(bg, "Arith.Block", Args{A: 1}, &Reply{}, nil)
	<-svc.started
	queued := c.Go(kiev.WithMetadata(kiev.WithPriority(bg, 3), "trace-id", "q"), "Arith.Add", Args{1, 1}, &Reply{}, nil)
	waitQueued(t, srv, 1)
	if err := c.Call(kiev.WithMetadata(kiev.WithPriority(bg, 3), "trace-id", "r"), "Arith.Mul", &Args{}, &Reply{}); !errors.Is(err, kiev.ErrOverloaded) {
		t.Fatalf("call to a full queue = %v; want ErrOverloaded", err)
	}
	if d := <-drops; d != (drop{"Arith.Mul", "r", shed.Refused, 3}) {
		t.Errorf("the hook saw %+v; want the refused Arith.Mul", d)
	}
	important := c.Go(kiev.WithPriority(bg, 9), "Arith.Add", Args{2, 2}, &Reply{}, nil)
	<-queued.Done
	if d := <-drops; d != (drop{"Arith.Add", "q", shed.Evicted, 3}) {
		t.Errorf("the hook saw %+v; want the evicted Arith.Add", d)
	}
	close(svc.block)
	<-blocked.Done
	<-important.Done
	select {
	case d := <-drops:
		t.Errorf("the hook saw %+v, a call that ran", d)
	default:
	}
}

// Pool's Query fails as a handler does when its dependency's
// shed.Resource refuses it a slot.
type Pool struct{}

func (Pool) Query(ctx context.Context, _ int, _ *int) error {
	return fmt.Errorf("orders-db: %w", shed.ErrResourceBusy)
}

// A handler that returns a shed.Resource's ErrResourceBusy answers its
// call as overloaded: the caller sees kiev.ErrOverloaded, and can retry
// elsewhere.
func TestResourceBusyIsOverloaded(t *testing.T) {
	srv := kiev.NewServer()
	srv.Register(Pool{})
	c := dial(t, startServer(t, srv), kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1}))
	err := c.Call(context.Background(), "Pool.Query", 0, new(int))
	if !errors.Is(err, kiev.ErrOverloaded) {
		t.Fatalf("a handler refused a slot: %v, want kiev.ErrOverloaded", err)
	}
	if !strings.Contains(err.Error(), "resource busy") {
		t.Fatalf("error %q does not say why", err)
	}
}

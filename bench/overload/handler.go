package main

// The handlers every system serves, and what they wait on: Work waits on
// a dependency (a pool of connections to a downstream service, or an
// unbounded one), Burn burns a fixed amount of CPU.

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/kievrpc/kiev/bench/internal/workpb"
	"github.com/kievrpc/kiev/shed"
)

// method is one of the handlers.
type method uint8

const (
	methodWork method = iota // waits on the dependency
	methodBurn               // burns CPU
)

// Args are the arguments of Work and Burn for kiev and net/rpc; grpc
// sends the same fields in a workpb.WorkRequest.
type Args struct {
	ID       uint64 // the user request; its retries share it
	Deadline int64  // the attempt's absolute deadline, unix nanoseconds
	Priority int    // 0 to 9, 9 the most important
}

// Reply is the reply of Work and Burn.
type Reply struct {
	ID uint64
}

// slot is one connection of the dependency. due is the nominal end of its
// previous run.
type slot struct{ due time.Time }

// hold occupies the slot for d, starting now. time.Sleep overshoots (by
// about 0.25ms here) and a goroutine waiting for a slot wakes some time
// after it is released; together they would cut the capacity of a 2 ms
// slot by a tenth or more. So a run that starts within catchUp of the
// slot's previous nominal end continues from that end instead of from
// now: a busy slot completes exactly one run per d, and the runs' nominal
// intervals never overlap, so no slot exceeds one run per d either. A run
// that starts within catchUp of an idle slot's last end is shortened by
// as much (at most one run per idle period): with catchUp = d, as the cpu
// workload has it, to as little as nothing; the io workload's slots catch
// up by 1 ms at most, so that their runs last at least d − 1 ms, as a real
// dependency's would.
func (s *slot) hold(now time.Time, d, catchUp time.Duration) (begin time.Time) {
	begin = now
	if late := now.Sub(s.due); late >= 0 && late < catchUp {
		begin = s.due
	}
	s.due = begin.Add(d)
	time.Sleep(time.Until(s.due))
	return begin
}

// The dependency's own account of its slots, by tick since it was made:
// how long its slots were busy, and how many runs ended, in each tick, so
// that a dip in goodput can be told apart: slots left idle (the server
// did not feed them) or runs that took longer than the service time (a
// starved CPU woke them late).
const (
	depTick  = 10 * time.Millisecond
	depTicks = 12000 // two minutes
)

// depLedger is the dependency's account, safe for concurrent use.
type depLedger struct {
	born time.Time
	busy [depTicks]atomic.Int64 // slot-nanoseconds busy
	ends [depTicks]atomic.Int32
}

// ran records a run of a slot from begin to end.
func (l *depLedger) ran(begin, end time.Time) {
	if i := int(end.Sub(l.born) / depTick); i >= 0 && i < depTicks {
		l.ends[i].Add(1)
	}
	for t := begin; t.Before(end); {
		i := int(t.Sub(l.born) / depTick)
		next := l.born.Add(time.Duration(i+1) * depTick)
		if i >= depTicks {
			return
		}
		if i >= 0 {
			stop := next
			if end.Before(stop) {
				stop = end
			}
			l.busy[i].Add(int64(stop.Sub(t)))
		}
		t = next
	}
}

// depAccount is the ledger as the stats command reports it: the ticks up
// to the last with anything in it.
type depAccount struct {
	Born int64   // unix nanoseconds of tick 0
	Busy []int64 // slot-nanoseconds busy, by tick
	Ends []int32 // runs ended, by tick
}

func (l *depLedger) account() *depAccount {
	a := &depAccount{Born: l.born.UnixNano()}
	last := -1
	for i := range depTicks {
		if l.busy[i].Load() != 0 || l.ends[i].Load() != 0 {
			last = i
		}
	}
	for i := range last + 1 {
		a.Busy = append(a.Busy, l.busy[i].Load())
		a.Ends = append(a.Ends, l.ends[i].Load())
	}
	return a
}

// dependency is what Work waits on: a pool of slots, each serving one
// call at a time for the service time, or, with no slots, a plain sleep
// of the service time (a dependency without a bound).
type dependency struct {
	slots   chan *slot // nil: unbounded
	service atomic.Int64
	catchUp time.Duration
	ledger  *depLedger // with slots
}

func newDependency(slots int, service, catchUp time.Duration) *dependency {
	d := &dependency{catchUp: catchUp}
	d.service.Store(int64(service))
	if slots > 0 {
		d.slots = make(chan *slot, slots)
		d.ledger = &depLedger{born: time.Now()}
		for range slots {
			d.slots <- &slot{}
		}
	}
	return d
}

// setService changes the service time of the calls that start from now
// on: the dependency slows down or recovers.
func (d *dependency) setService(t time.Duration) { d.service.Store(int64(t)) }

// handlers serve Work and Burn and count what they do. Neither looks at
// its context (net/rpc has none): like most handlers they do their work
// once they start. Calls beyond the dependency's capacity wait for a slot.
type handlers struct {
	dep       *dependency
	burnIters int // rounds of burn per Burn call

	received  atomic.Uint64 // calls that reached a handler
	runs      atomic.Uint64 // calls whose work started: a slot taken, or CPU burnt
	wasted    atomic.Uint64 // runs that started after their caller's deadline
	burnNanos atomic.Int64  // time spent in Burn's loop
	burnRuns  atomic.Uint64
}

// start counts a run starting now for a caller whose deadline is
// deadline.
func (h *handlers) start(deadline int64) time.Time {
	now := time.Now()
	h.runs.Add(1)
	if now.UnixNano() > deadline {
		h.wasted.Add(1)
	}
	return now
}

// work waits on the dependency and returns id.
func (h *handlers) work(id uint64, deadline int64) uint64 {
	h.received.Add(1)
	if h.dep.slots == nil {
		h.start(deadline)
		time.Sleep(time.Duration(h.dep.service.Load()))
		return id
	}
	s := <-h.dep.slots
	now := h.start(deadline)
	// The service time as the call starts, not as it arrived: a call
	// that waited for a connection through a slowdown is served slowly.
	begin := s.hold(now, time.Duration(h.dep.service.Load()), h.dep.catchUp)
	h.dep.ledger.ran(begin, time.Now())
	h.dep.slots <- s
	return id
}

// sink keeps the compiler from dropping burn's loop.
var sink atomic.Uint64

// burn runs n rounds of xorshift: CPU work of a known size, with no
// memory traffic and no allocation.
func burn(n int, seed uint64) uint64 {
	x := seed | 1
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// burnCPU does Burn's work and returns id.
func (h *handlers) burnCPU(id uint64, deadline int64) uint64 {
	h.received.Add(1)
	t0 := h.start(deadline)
	sink.Store(burn(h.burnIters, id))
	h.burnNanos.Add(int64(time.Since(t0)))
	h.burnRuns.Add(1)
	return id
}

// calibrate returns how many rounds of burn take about d on this CPU: the
// fastest of a few timed trials, the one least disturbed.
func calibrate(d time.Duration) int {
	const probe = 1 << 18
	best := time.Duration(1 << 62)
	for i := range 7 {
		t0 := time.Now()
		sink.Store(burn(probe, uint64(i)))
		best = min(best, time.Since(t0))
	}
	return max(1, int(float64(probe)*float64(d)/float64(max(best, 1))))
}

// KievWork serves Work and Burn on kiev.
type KievWork struct {
	h   *handlers
	res *shed.Resource // kiev-resource: the dependency's connections, acquired first
}

// Work waits on the dependency. With a Resource, it acquires a slot
// first: in priority order, and not at all if it could not finish by
// its deadline.
func (s *KievWork) Work(ctx context.Context, a Args, r *Reply) error {
	if s.res != nil {
		slot, err := s.res.Acquire(ctx)
		if err != nil {
			return err // shed.ErrResourceBusy: kiev answers it as overloaded
		}
		defer slot.Release()
	}
	r.ID = s.h.work(a.ID, a.Deadline)
	return nil
}

// Burn burns CPU.
func (s *KievWork) Burn(ctx context.Context, a Args, r *Reply) error {
	r.ID = s.h.burnCPU(a.ID, a.Deadline)
	return nil
}

// RPCWork serves Work and Burn on net/rpc.
type RPCWork struct{ h *handlers }

// Work waits on the dependency.
func (s *RPCWork) Work(a Args, r *Reply) error {
	r.ID = s.h.work(a.ID, a.Deadline)
	return nil
}

// Burn burns CPU.
func (s *RPCWork) Burn(a Args, r *Reply) error {
	r.ID = s.h.burnCPU(a.ID, a.Deadline)
	return nil
}

// grpcWork serves Work on grpc-go.
type grpcWork struct {
	workpb.UnimplementedWorkServer
	h *handlers
}

func (s *grpcWork) Work(ctx context.Context, req *workpb.WorkRequest) (*workpb.WorkReply, error) {
	return &workpb.WorkReply{Id: s.h.work(req.GetId(), req.GetDeadlineUnixNano())}, nil
}

// grpcBurnMethod is Burn's full name on grpc-go.
const grpcBurnMethod = "/kievbench.work.Burn/Burn"

// grpcBurnService declares Burn for grpc-go by hand, beside the Work
// service generated from work.proto: it takes and returns the same
// messages, so no code needs generating for it. Its implementation is a
// *handlers.
var grpcBurnService = grpc.ServiceDesc{
	ServiceName: "kievbench.work.Burn",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Burn",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			req := new(workpb.WorkRequest)
			if err := dec(req); err != nil {
				return nil, err
			}
			return &workpb.WorkReply{Id: srv.(*handlers).burnCPU(req.GetId(), req.GetDeadlineUnixNano())}, nil
		},
	}},
	Metadata: "overload/handler.go",
}

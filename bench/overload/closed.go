package main

// The closed-loop load generator: a fixed number of callers, each calling
// again as soon as its reply arrives.

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

// closedConfig are the closed loop's settings.
type closedConfig struct {
	callers  int
	method   method
	deadline time.Duration // per call; a call that times out is not retried, the caller calls again
	perCall  time.Duration // the shortest a call can take (the handler's wait), to bound each caller's count
	seed     uint64
}

// runClosed runs cfg.callers callers over c from the start of segs to
// their end: each calls, waits for the reply (or its deadline), records
// the call, and calls again at once. The segments' rates are ignored;
// their boundaries are where snap reads the server's counters. Every call
// is a user request of one attempt, arriving when it starts.
func runClosed(ctx context.Context, c caller, segs []segment, cfg closedConfig, snap snapFunc) (*loadResult, error) {
	if len(segs) == 0 || cfg.callers < 1 {
		return nil, errors.New("no segments or no callers")
	}
	res := newResult(segs)
	end := res.bounds[len(segs)]
	runCtx, cancel := context.WithTimeout(ctx, end)
	defer cancel()
	start := time.Now()
	snapDone := takeSnapshots(ctx, start, res, snap)

	// Bound the count as well as the time: a caller makes at most
	// end/perCall calls that wait in the handler; ten times that allows
	// for calls answered at once (refused) without letting one spin.
	limit := 10*int(end/max(cfg.perCall, time.Millisecond)) + 10
	var mu sync.Mutex
	var wg sync.WaitGroup
	atts := make([]attempt, 0, min(cfg.callers*limit/10, 1<<22))
	reqs := make([]request, 0, cap(atts))
	for i := range cfg.callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.seed, uint64(i)))
			a := Args{ID: uint64(i) << 32}
			for range limit {
				if runCtx.Err() != nil {
					return
				}
				a.ID++
				a.Priority = 9
				if rng.Float64() >= 0.1 {
					a.Priority = rng.IntN(9)
				}
				cctx, ccancel := context.WithTimeout(runCtx, cfg.deadline)
				dl, _ := cctx.Deadline()
				a.Deadline = dl.UnixNano()
				t0 := time.Now()
				kind := c.call(cctx, cfg.method, a)
				t1 := time.Now()
				ccancel()
				if kind == outAborted || (runCtx.Err() != nil && kind != outOK) {
					return // the run ended under it
				}
				at := attempt{start: t0.Sub(start), end: t1.Sub(start), kind: kind, prio: uint8(a.Priority)}
				mu.Lock()
				atts = append(atts, at)
				reqs = append(reqs, request{arrive: at.start, prio: at.prio, result: kind, attempts: 1})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	<-snapDone
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res.attempts, res.requests = atts, reqs
	return res, res.snapErr
}

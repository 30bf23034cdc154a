package kiev

import (
	"context"
	"errors"
	"fmt"
	"github.com/kievrpc/kiev/internal/throttle"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
)

// Hedging says how a Client hedges a method's calls: when a call has had
// no answer for Delay, the client sends a copy of it to another provider,
// and so on up to MaxCopies copies in flight; the first answer wins, and
// the client cancels the other copies, whose handlers see their context
// canceled. A hedge cuts the tail that one slow provider (a GC pause, a
// cold cache) adds to a call, for a few percent more requests.
//
// Only methods safe to run twice are hedged: a hedged call may run on
// several providers, all to the end, since a cancel can arrive after the
// handler has done its work. The client hedges a method only if its
// RetryPolicy.Idempotent reports the method safe to repeat; WithHedging
// given to MethodOf fails for any other method, and WithHedging given to
// Dial leaves the others alone.
//
// Hedges never feed an overload. Each hedge draws a retry from the
// client's retry budget (see RetryPolicy), and none is sent without one,
// nor beyond Ratio hedges per call.
// After any provider answers a call of the client with ErrOverloaded or
// ErrLimited, the client sends no hedge for a throttle window (see
// Throttle; 1 s by default), nor while its throttle refuses calls, so
// under overload hedging adds no load. A hedge goes only to a provider
// that the call has not tried, so a client of one server, or of a
// service with one provider, does not hedge.
//
// Client.HedgeStats counts the hedges sent, those that won, and those
// that were not sent for want of budget or because of overload; the
// status page and metrics show them.
type Hedging struct {
	// Delay is how long a call waits for an answer before its next copy
	// goes out. 0 means adaptive: the 95th percentile of the method's
	// recent answer times on this client (over its last 256 answered
	// calls, a call that a hedge answered counting as long as it had
	// waited by then), so that about one call in twenty is hedged; until
	// 64 calls have been answered, the method's calls are not hedged.
	Delay time.Duration
	// MaxCopies is the most copies of one call in flight, the first
	// included (default 2: one hedge; at most 3).
	MaxCopies int
	// Ratio is the hedges allowed per call of the method, on average
	// (default 0.05), with bursts of up to 10 hedges: it bounds the
	// extra load when latency shifts faster than the adaptive delay
	// follows. A hedge must also find a retry in the retry budget.
	Ratio float64
}

// HedgeStats counts a Client's hedges (see Hedging).
type HedgeStats struct {
	// Sent is the hedges sent: copies of calls beyond the first.
	Sent int64 `json:"sent"`
	// Won is the hedges that answered first.
	Won int64 `json:"won"`
	// NoBudget is the hedges not sent because the retry budget was
	// empty, or the method had used its Hedging.Ratio; Overload those not sent because a provider had answered
	// ErrOverloaded or ErrLimited within a throttle window, or the
	// client's throttle was refusing calls.
	NoBudget int64 `json:"no_budget"`
	Overload int64 `json:"overload"`
}

// hedgeOption is WithHedging, a DialOption and a MethodOption.
type hedgeOption struct{ h Hedging }

func (o hedgeOption) applyDial(d *dialOptions)     { d.hedging = &o.h }
func (o hedgeOption) applyMethod(m *methodOptions) { m.hedging = &o.h }

// HedgeOption is WithHedging's option, which both Dial and MethodOf
// (and NetRPCMethodOf) accept.
type HedgeOption interface {
	DialOption
	MethodOption
}

// WithHedging hedges calls as h says (see Hedging). Given to Dial, it
// hedges the calls of every method the client's RetryPolicy.Idempotent
// reports safe to repeat; given to MethodOf or NetRPCMethodOf, it hedges
// that method's calls on the client, however they are made, and the
// method must be one that Idempotent reports safe to repeat.
func WithHedging(h Hedging) HedgeOption { return hedgeOption{h} }

func newHedger(h Hedging) *hedger {
	if h.Ratio <= 0 {
		h.Ratio = 0.05
	}
	return &hedger{h, throttle.NewHedger(h.Delay, h.Ratio)}
}

// hedger hedges one method's calls on one client.
type hedger struct {
	h Hedging
	*throttle.Hedger
}

// hedgeState is a Client's hedging: its policies and counts.
type hedgeState struct {
	methods sync.Map     // "Service.Method" → *hedger, or nil for a method not hedged
	any     atomic.Bool  // a policy was set for some method
	holdEnd atomic.Int64 // UnixNano until which no hedge is sent: overload
	stats   struct{ sent, won, noBudget, overload atomic.Int64 }
}

// HedgeStats returns the client's hedge counts.
func (c *Client) HedgeStats() HedgeStats {
	s := &c.hedge.stats
	return HedgeStats{Sent: s.sent.Load(), Won: s.won.Load(), NoBudget: s.noBudget.Load(), Overload: s.overload.Load()}
}

// hedgeMethod hedges method's calls as the options of MethodOf say.
func (c *Client) hedgeMethod(method string, opts []MethodOption) error {
	var o methodOptions
	for _, opt := range opts {
		opt.applyMethod(&o)
	}
	if o.hedging == nil {
		return nil
	}
	if idem := c.budget.p.Idempotent; idem == nil || !idem(method) {
		return fmt.Errorf("kiev: WithHedging for %s, which the client's RetryPolicy.Idempotent does not report safe to repeat: a hedged call may run on several providers; if it may, Dial with WithRetry(kiev.RetryPolicy{Idempotent: kiev.IdempotentMethods(%q)})", method, method)
	}
	c.hedge.methods.Store(method, newHedger(*o.hedging))
	c.hedge.any.Store(true)
	return nil
}

// hedgerFor returns method's hedger, or nil if its calls are not hedged.
func (c *Client) hedgerFor(method string) *hedger {
	if c.group == nil || c.opts.hedging == nil && !c.hedge.any.Load() {
		return nil
	}
	if v, ok := c.hedge.methods.Load(method); ok {
		return v.(*hedger)
	}
	var h *hedger
	if idem := c.budget.p.Idempotent; c.opts.hedging != nil && idem != nil && idem(method) {
		h = newHedger(*c.opts.hedging)
	}
	v, _ := c.hedge.methods.LoadOrStore(method, h)
	return v.(*hedger)
}

// overloaded holds hedging back for a throttle window: a provider
// answered ErrOverloaded or ErrLimited.
func (c *Client) overloaded(now time.Time) {
	if c.opts.hedging != nil || c.hedge.any.Load() {
		c.hedge.holdEnd.Store(now.Add(c.hedgeHold()).UnixNano())
	}
}

// hedgeHold is how long an overload answer holds hedging back.
func (c *Client) hedgeHold() time.Duration {
	if w := c.opts.throttle.Window; w > 0 {
		return w
	}
	return time.Second
}

// copyResult is how one copy of a hedged call ended.
type copyResult struct {
	call  *Call
	err   error
	hedge bool
}

// hedgedCall is one call hedged by h: its copies in flight and how they
// ended. Only the goroutine of hedged uses it; each copy runs on a
// goroutine of its own and reports on results.
type hedgedCall struct {
	c       *Client
	call    *Call // the first copy, whose Reply the caller reads
	h       *hedger
	ctx     context.Context // the copies' context, canceled once one wins
	tried   triedSet
	results chan copyResult
	timer   *time.Timer
	tick    <-chan time.Time // the next hedge is due; nil for no more
	// inFlight counts the copies running, copies those sent.
	inFlight, copies, maxCopies int
}

// hedged runs call, hedged by h, and then retries it as the policy and
// budget allow, as attempts does for a call not hedged.
func (c *Client) hedged(ctx context.Context, call *Call, h *hedger) error {
	c.budget.Deposit()
	h.Deposit()
	start := time.Now()
	if call.codec == nil { // set before the copies read it
		call.codec = c.opts.codec
	}
	hctx, cancel := context.WithCancel(ctx)
	hc := &hedgedCall{c: c, call: call, h: h, ctx: hctx}
	hc.results = make(chan copyResult, len(hc.tried.eps))
	hc.maxCopies = min(max(h.h.MaxCopies, 2), len(hc.tried.eps))
	hc.launch(call, false)
	win, lastErr := hc.race()
	cancel()
	origOK := hc.drain(win)
	if win == nil {
		call.Error = nil
		return c.retry(ctx, call, &hc.tried, start, lastErr)
	}
	// The first copy's answer time, or, when a hedge answered first, the
	// time it had taken by then: at least as long.
	h.Observe(time.Since(start))
	if win.hedge {
		c.hedge.stats.won.Add(1)
		if call.Reply != nil && !origOK { // else call.Reply holds the first copy's own reply
			reflect.ValueOf(call.Reply).Elem().Set(reflect.ValueOf(win.call.Reply).Elem())
		}
	}
	end := time.Now()
	c.stats.record(end, end.Sub(start), CodeOK)
	return nil
}

// launch sends cp, a copy of the call, to a provider the call has not
// tried, and reports whether it went. A first copy that cannot be sent
// ends at once with its error.
func (hc *hedgedCall) launch(cp *Call, hedge bool) bool {
	a, err := hc.c.begin(hc.ctx, cp, &hc.tried, time.Now())
	if err != nil {
		if hedge {
			return false
		}
		hc.results <- copyResult{cp, err, false}
	} else {
		go func() {
			err := hc.c.finish(hc.ctx, cp, &a, hc.c.roundTrip(a.ctx, a.ep, cp))
			hc.results <- copyResult{cp, err, hedge}
		}()
	}
	hc.inFlight++
	hc.copies++
	hc.arm()
	return true
}

// arm sets the timer for the next hedge, if one may follow.
func (hc *hedgedCall) arm() {
	d, ok := hc.h.Wait()
	if !ok || hc.copies >= hc.maxCopies {
		hc.tick = nil
		return
	}
	if hc.timer == nil {
		hc.timer = time.NewTimer(d)
	} else {
		hc.timer.Reset(d)
	}
	hc.tick = hc.timer.C
}

// race waits for the first copy to answer, sending hedges as they fall
// due, and returns it; or, if every copy failed, nil and the last error.
func (hc *hedgedCall) race() (*copyResult, error) {
	var lastErr error
	for hc.inFlight > 0 {
		select {
		case r := <-hc.results:
			hc.inFlight--
			if r.err == nil {
				return &r, nil
			}
			lastErr = r.err
			if errors.Is(r.err, ErrOverloaded) {
				hc.tick = nil // no hedge into an overload
			}
		case <-hc.tick:
			if !hc.c.sendHedge(hc) {
				hc.tick = nil // no more hedges for this call
			}
		}
	}
	return nil, lastErr
}

// drain waits for the copies still in flight, canceled by now, which end
// at once, and reports whether the first copy answered.
func (hc *hedgedCall) drain(win *copyResult) (firstOK bool) {
	if hc.timer != nil {
		hc.timer.Stop()
	}
	firstOK = win != nil && !win.hedge
	for ; hc.inFlight > 0; hc.inFlight-- {
		if r := <-hc.results; r.err == nil && r.call == hc.call {
			firstOK = true
		}
	}
	return firstOK
}

// sendHedge sends a copy of the call to a provider it has not tried, if
// the budgets allow and no provider is overloaded, and reports whether it
// did.
func (c *Client) sendHedge(hc *hedgedCall) bool {
	now := time.Now()
	if len(c.group.state.Load().ready) <= hc.tried.n {
		return false // no provider left to try
	}
	if now.UnixNano() < c.hedge.holdEnd.Load() || c.throttling(hc.ctx, now) {
		c.hedge.stats.overload.Add(1)
		return false
	}
	if !hc.h.Take() || !c.budget.Withdraw(now) {
		c.hedge.stats.noBudget.Add(1)
		return false
	}
	call := hc.call
	cp := &Call{ServiceMethod: call.ServiceMethod, Args: call.Args, Target: call.Target, codec: call.codec, signal: make(chan *Call, 1)}
	if call.Reply != nil {
		cp.Reply = reflect.New(reflect.TypeOf(call.Reply).Elem()).Interface()
	}
	if !hc.launch(cp, true) {
		return false
	}
	c.hedge.stats.sent.Add(1)
	return true
}

// throttling reports whether the client's throttle refuses any call of
// ctx's priority to a ready provider.
func (c *Client) throttling(ctx context.Context, now time.Time) bool {
	prio := PriorityFrom(ctx)
	for _, ep := range c.group.state.Load().ready {
		if ep.throttle != nil && ep.throttle[prio].Refusing(now) {
			return true
		}
	}
	return false
}

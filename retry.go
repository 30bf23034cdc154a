package kiev

import (
	"context"
	"errors"
	"fmt"
	"github.com/kievrpc/kiev/internal/throttle"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/internal/metrics"
)

// RetryPolicy says which failed calls a Client tries again, and bounds how
// many retries it sends so that retries cannot grow an overload into an
// avalanche.
//
// A call is retried only when it surely did not run: the server shed it
// (ErrOverloaded) or was shutting down, or the client never sent it (the
// dial was refused, or the connection broke before the request was
// written). Calls whose outcome is unknown (a connection that broke under
// them, an attempt past AttemptTimeout) are retried only for methods
// Idempotent says may run twice. A service client retries on another
// provider than those the call has tried. Calls are never retried past
// their context's deadline.
//
// Retries draw on a budget: every call adds Ratio of a retry to it (at
// most 10% extra load by default), a floor of MinPerSecond retries per
// second keeps rare failures retried, and every ErrOverloaded answer takes
// a retry away, so a refusing server gets fewer retries, not more.
type RetryPolicy struct {
	// MaxAttempts is the most attempts per call, the first included
	// (default 3). 1 turns retries off.
	MaxAttempts int
	// Ratio is the retries allowed per call made (default 0.1).
	Ratio float64
	// MinPerSecond is the retries allowed per second whatever the call
	// rate (default 10).
	MinPerSecond float64
	// Idempotent reports whether a method may safely run more than once,
	// so that calls whose outcome is unknown may be retried too. nil
	// means no method is.
	Idempotent func(serviceMethod string) bool
	// AttemptTimeout, if set, bounds each attempt within the call's own
	// deadline. An attempt that times out has an unknown outcome, so it
	// is retried (on another provider, for a service client) only for
	// methods Idempotent says may run twice. 0 means attempts run to the
	// call's deadline.
	AttemptTimeout time.Duration
}

// retryBudget is a client's retry budget under its policy.
type retryBudget struct {
	p RetryPolicy
	*throttle.Budget
}

func newRetryBudget(p RetryPolicy) retryBudget {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 3
	}
	if p.Ratio <= 0 {
		p.Ratio = 0.1
	}
	if p.MinPerSecond <= 0 {
		p.MinPerSecond = 10
	}
	return retryBudget{p, throttle.NewBudget(p.Ratio, p.MinPerSecond)}
}

// throttled marks the error of an attempt the client's throttle refused.
type throttled struct{ *callError }

func (e throttled) Unwrap() error { return e.callError }

// notSent marks an error from a call the client never sent.
type notSent struct{ error }

func (e notSent) Unwrap() error { return e.error }

// retryReason is why a Client retried a call, as the reason label of
// kiev_client_retries_total says.
type retryReason uint8

const (
	// retryUnsent is the retry of an attempt no server read: the client
	// never sent it, or the server's last GoAway said it never read it.
	retryUnsent retryReason = iota
	// retryRefused is the retry of an attempt the server refused without
	// running it, as overloaded or shutting down.
	retryRefused
	// retryIdempotent is the retry of an attempt whose outcome is unknown
	// (its connection broke under it, or it ran past AttemptTimeout), of
	// a method RetryPolicy.Idempotent says may run twice.
	retryIdempotent
	numRetryReasons
)

// The retry reasons are those internal/metrics names, in its order: this
// fails to compile if their numbers differ.
var _ [numRetryReasons]int = [len(metrics.RetryReasons)]int{}

// retryCounts counts a Client's retries, by reason.
type retryCounts [numRetryReasons]atomic.Int64

// total returns the retries of every reason.
func (r *retryCounts) total() (n int64) {
	for i := range r {
		n += r[i].Load()
	}
	return n
}

// snapshot returns the retries, by reason.
func (r *retryCounts) snapshot() (out [numRetryReasons]int64) {
	for i := range r {
		out[i] = r[i].Load()
	}
	return out
}

// retryable reports whether err shows the call did not run, or may run
// again because the method is idempotent, and why.
func (c *Client) retryable(method string, err error) (retryReason, bool) {
	var ns notSent
	var se *ServerError
	switch {
	case errors.As(err, &ns):
		return retryUnsent, !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
	case errors.As(err, &se):
		return retryRefused, se.Code == CodeOverloaded || se.Code == CodeShutdown
	case errors.As(err, new(attemptTimeout)), errors.Is(err, ErrShutdown):
		return retryIdempotent, c.budget.p.Idempotent != nil && c.budget.p.Idempotent(method)
	}
	return 0, false
}

// attempts runs call, retrying as the policy and budget allow; it is the
// Invoker beneath the client's interceptors.
func (c *Client) attempts(ctx context.Context, call *Call) error {
	if h := c.hedgerFor(call.ServiceMethod); h != nil {
		return c.hedged(ctx, call, h)
	}
	c.budget.Deposit()
	start := time.Now()
	var tried triedSet
	err := c.attempt(ctx, call, &tried, start)
	return c.retry(ctx, call, &tried, start, err)
}

// retry retries call, whose first attempt ended with err, as the policy
// and budget allow, and records the call's end.
func (c *Client) retry(ctx context.Context, call *Call, tried *triedSet, start time.Time, err error) error {
	for attempt := 1; ; attempt++ {
		if err == nil || attempt >= c.budget.p.MaxAttempts || ctx.Err() != nil {
			break
		}
		why, ok := c.retryable(call.ServiceMethod, err)
		if !ok || !c.budget.Withdraw(time.Now()) {
			break
		}
		c.retries[why].Add(1)
		call.Error = nil
		next := c.attempt(ctx, call, tried, start)
		if errors.As(next, new(throttled)) {
			// The client's own throttle kept the retry back: the
			// server's refusal before it says more.
			break
		}
		err = next
	}
	end := time.Now()
	c.stats.record(end, end.Sub(start), errCode(err))
	return err
}

// goSent is Client.Go for a client without interceptors: the first
// attempt is sent from the caller's goroutine, as net/rpc's Go sends, so
// that calls leave in the order Go is called, and a call Go returned is
// written by then when the connection is idle (a client that half-closes
// the connection next loses none); the wait, and any retry, run on a
// goroutine of their own.
func (c *Client) goSent(ctx context.Context, call *Call) {
	call.signal = make(chan *Call, 1)
	c.budget.Deposit()
	start := time.Now()
	var tried triedSet
	a, err := c.begin(ctx, call, &tried, start)
	var t clientTransport
	if err == nil {
		if t, err = c.start(a.ctx, a.ep, call, false); err != nil {
			err = c.finish(ctx, call, &a, err)
		}
	}
	go func() {
		if t != nil { // over UDP, the datagrams go from here
			err = c.finish(ctx, call, &a, t.wait(a.ctx, call))
		}
		err = c.retry(ctx, call, &tried, start, err)
		call.signal = nil
		call.Error = err
		call.complete()
	}()
}

// errCode is the Code a call's error stands for, as metrics count it.
func errCode(err error) Code {
	if err == nil {
		return CodeOK // without errorCode's allocation
	}
	return errorCode(err)
}

func errorCode(err error) Code {
	// Failures on the client's side; a handler's error of the same kind
	// would not be retried, so the server's codeOf leaves them out.
	switch {
	case errors.Is(err, ErrTooLarge):
		return CodeTooLarge
	case errors.Is(err, ErrShutdown), errors.Is(err, ErrUnavailable):
		return CodeShutdown
	}
	return codeOr(err, CodeInternal)
}

// attempt sends call once: to the client's server, or to the provider
// the balancer picks, skipping providers whose throttle refuses it.
//
// now, the call's start, is the throttle's clock: its windows are seconds
// long, and a clock read costs more than the throttle itself.
func (c *Client) attempt(ctx context.Context, call *Call, tried *triedSet, now time.Time) error {
	a, err := c.begin(ctx, call, tried, now)
	if err != nil {
		return err
	}
	return c.finish(ctx, call, &a, c.roundTrip(a.ctx, a.ep, call))
}

// attemptState is one attempt between begin and finish.
type attemptState struct {
	ep     *endpoint
	done   func(error)         // the balancer's, if any
	t, mt  *throttle.Throttler // the server's and the method's throttle, if any
	ctx    context.Context
	cancel context.CancelFunc // ends ctx, if the attempt has a timeout of its own
	sent   time.Time          // for a provider's stats
}

// begin picks the server for one attempt of call, skipping providers
// whose throttle refuses it.
func (c *Client) begin(ctx context.Context, call *Call, tried *triedSet, now time.Time) (attemptState, error) {
	var a attemptState
	if err := ctx.Err(); err != nil {
		return a, &callError{call.ServiceMethod, err}
	}
	ep := c.single
	prio := PriorityFrom(ctx)
	for range len(tried.eps) {
		if c.group != nil {
			var err error
			if ep, a.done, err = c.group.pick(ctx, call, tried); err != nil {
				return a, &callError{call.ServiceMethod, err}
			}
			tried.add(ep)
		}
		if ep.throttle == nil {
			break
		}
		a.t = &ep.throttle[prio]
		a.mt = ep.methodThrottle(call.ServiceMethod, prio, false)
		ok := a.t.Allow(now)
		if ok && (a.mt == nil || a.mt.Allow(now)) {
			break
		}
		if c.group == nil || len(c.group.state.Load().ready) <= tried.n {
			if !ok {
				return a, notSent{throttled{&callError{call.ServiceMethod, fmt.Errorf("%w: refused by the client: the server has refused most recent calls of this priority", ErrOverloaded)}}}
			}
			return a, notSent{throttled{&callError{call.ServiceMethod, fmt.Errorf("%w: refused by the client: the server has refused most recent calls of this method and priority at the method's adaptive limit: %w", ErrOverloaded, ErrLimited)}}}
		}
	}
	a.ep, a.ctx = ep, ctx
	if d := c.budget.p.AttemptTimeout; d > 0 {
		a.ctx, a.cancel = context.WithTimeout(ctx, d)
	}
	if c.group != nil {
		ep.inflight.Add(1)
		a.sent = time.Now()
	}
	return a, nil
}

// finish accounts for an attempt that ended with err and returns err.
func (c *Client) finish(ctx context.Context, call *Call, a *attemptState, err error) error {
	ep := a.ep
	if a.cancel != nil {
		a.cancel()
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = attemptTimeout{err}
		}
	}
	if c.group != nil {
		ep.inflight.Add(-1)
		ep.record(err)
		if a.done != nil {
			a.done(err)
		}
		end := time.Now()
		ep.stats.record(end, end.Sub(a.sent), errCode(err))
	}
	overloaded := errors.Is(err, ErrOverloaded)
	limited := overloaded && errors.Is(err, ErrLimited)
	if overloaded {
		c.budget.Penalize()
		c.overloaded(time.Now())
	}
	if a.t != nil && (overloaded || err == nil || isServerAnswer(err)) {
		// A refusal at the method's limit is the server answering: the
		// method's own throttle counts it.
		a.t.Done(!overloaded || limited)
		mt := a.mt
		if limited && mt == nil {
			mt = ep.methodThrottle(call.ServiceMethod, PriorityFrom(ctx), true)
		}
		if mt != nil {
			mt.Done(!overloaded)
		}
	}
	return err
}

// attemptTimeout marks an attempt cut short by RetryPolicy.AttemptTimeout
// while the call's own context still had time.
type attemptTimeout struct{ error }

func (e attemptTimeout) Unwrap() error { return e.error }

// IdempotentMethods returns a RetryPolicy.Idempotent function that
// reports true for exactly the named "Service.Method"s.
func IdempotentMethods(names ...string) func(serviceMethod string) bool {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return func(m string) bool { return set[m] }
}

// isServerAnswer reports whether err is an answer the server gave (and so
// an accepted call, for throttling), other than an overload refusal.
func isServerAnswer(err error) bool {
	var se *ServerError
	return errors.As(err, &se) && se.Code != CodeOverloaded
}

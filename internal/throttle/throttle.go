// Package throttle holds the counts a kiev client keeps to send less to
// servers that refuse its calls: adaptive throttling, as in the Google
// SRE book (Throttler), the retry budget (Budget), and a hedged method's
// tokens and adaptive delay (Hedger). Their policies, kiev.Throttle,
// kiev.RetryPolicy and kiev.Hedging, are the root package's.
package throttle

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

const throttleBuckets = 30

// throttlePadding damps the refusal probability while counts are small.
const throttlePadding = 8

// Throttler holds one priority's counts in a ring of time buckets. The
// current bucket is updated with atomics; the sums of the older buckets
// change only when a bucket ends, under mu, so the common path takes no
// lock.
//
// A bucket's counts join the past sums when it ends, and leave them, as
// they joined, when it falls out of the window: a count that lands in a
// bucket after it ended (a race with advance) is lost, never subtracted
// without having been added.
type Throttler struct {
	k     float64
	width int64 // nanoseconds per bucket

	epoch   atomic.Int64 // number of the current bucket
	calls   [throttleBuckets]atomic.Int64
	accepts [throttleBuckets]atomic.Int64

	mu          sync.Mutex   // guards the fields below
	pastCalls   atomic.Int64 // sums over the buckets before the current one
	pastAccepts atomic.Int64
	// joined holds what each ended bucket added to the past sums.
	joinedCalls, joinedAccepts [throttleBuckets]int64
}

// Init sets t up to refuse once its calls exceed k times those accepted
// over the last window.
func (t *Throttler) Init(k float64, window time.Duration) {
	t.k = k
	t.width = int64(max(window/throttleBuckets, time.Millisecond))
}

// bucket returns the index of the current bucket, first moving the
// window forward to now if a bucket has ended.
func (t *Throttler) bucket(now time.Time) int {
	e := now.UnixNano() / t.width
	if t.epoch.Load() != e {
		t.advance(e)
	}
	return int(e % throttleBuckets)
}

func (t *Throttler) advance(e int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.epoch.Load()
	if old >= e {
		return
	}
	// The current bucket joins the past sums; buckets that fall out of
	// the window leave them and are cleared for reuse.
	cur := int(old % throttleBuckets)
	t.joinedCalls[cur], t.joinedAccepts[cur] = t.calls[cur].Load(), t.accepts[cur].Load()
	t.pastCalls.Add(t.joinedCalls[cur])
	t.pastAccepts.Add(t.joinedAccepts[cur])
	for n, b := 0, old+1; b <= e && n < throttleBuckets; b, n = b+1, n+1 {
		i := int(b % throttleBuckets)
		t.pastCalls.Add(-t.joinedCalls[i])
		t.pastAccepts.Add(-t.joinedAccepts[i])
		t.joinedCalls[i], t.joinedAccepts[i] = 0, 0
		t.calls[i].Store(0)
		t.accepts[i].Store(0)
	}
	if e-old >= throttleBuckets { // idle for a whole window
		t.pastCalls.Store(0)
		t.pastAccepts.Store(0)
	}
	t.epoch.Store(e)
}

// Allow reports whether to send a new call. Only calls sent are counted,
// by Done once their outcome is known, so calls in flight do not count as
// refused, and neither do the client's own refusals: the book counts
// those too, which keeps a client refusing for several windows after the
// server has recovered.
func (t *Throttler) Allow(now time.Time) bool {
	i := t.bucket(now)
	calls := float64(t.pastCalls.Load() + t.calls[i].Load())
	accepts := float64(t.pastAccepts.Load() + t.accepts[i].Load())
	p := (calls - t.k*accepts) / (calls + throttlePadding)
	return p <= 0 || rand.Float64() >= p
}

// Refusing reports whether Allow refuses some calls now.
func (t *Throttler) Refusing(now time.Time) bool {
	i := t.bucket(now)
	calls := float64(t.pastCalls.Load() + t.calls[i].Load())
	accepts := float64(t.pastAccepts.Load() + t.accepts[i].Load())
	return calls-t.k*accepts > 0
}

// Done counts a sent call, accepted or not by the server, in the current
// bucket: the one of the latest call to start, which is close enough to
// now without a clock read. (A call's own start can be buckets ago, and
// its bucket's counts already part of the past sums.)
func (t *Throttler) Done(accepted bool) {
	i := int(t.epoch.Load() % throttleBuckets)
	t.calls[i].Add(1)
	if accepted {
		t.accepts[i].Add(1)
	}
}

// maxBudget bounds the saved-up retries, so a long quiet spell cannot
// fund a burst of retries later.
const maxBudget = 100

// Budget is a token bucket of retries, counted in thousandths so
// that calls can credit it with one atomic add.
type Budget struct {
	credit    int64   // thousandths of a retry each call adds
	perSecond float64 // retries the budget gains each second, whatever the calls
	balance   atomic.Int64

	mu   sync.Mutex // serializes refills
	last time.Time
}

// NewBudget returns a budget that gains ratio of a retry for each call
// deposited, and perSecond retries each second, and holds a second's
// worth to begin with.
func NewBudget(ratio, perSecond float64) *Budget {
	b := &Budget{credit: int64(ratio * 1000), perSecond: perSecond, last: time.Now()}
	b.balance.Store(int64(min(perSecond, maxBudget) * 1000))
	return b
}

// Balance is the retries the budget holds now.
func (b *Budget) Balance() float64 { return float64(b.balance.Load()) / 1000 }

// add changes the balance by d thousandths, keeping it within
// ±maxBudget retries.
func (b *Budget) add(d int64) {
	for {
		old := b.balance.Load()
		next := min(max(old+d, -maxBudget*1000), maxBudget*1000)
		if next == old || b.balance.CompareAndSwap(old, next) {
			return
		}
	}
}

// Deposit credits one call.
func (b *Budget) Deposit() { b.add(b.credit) }

// Withdraw takes one retry, reporting whether the budget had it.
func (b *Budget) Withdraw(now time.Time) bool {
	b.mu.Lock()
	b.add(int64(now.Sub(b.last).Seconds() * b.perSecond * 1000))
	b.last = now
	b.mu.Unlock()
	for {
		old := b.balance.Load()
		if old < 1000 {
			return false
		}
		if b.balance.CompareAndSwap(old, old-1000) {
			return true
		}
	}
}

// Penalize takes a retry away for an ErrOverloaded answer.
func (b *Budget) Penalize() { b.add(-1000) }

// hedgeBurst is the most hedges a method saves up, in thousandths.
const hedgeBurst = 10 * 1000

// NewHedger returns the hedge state of a method whose hedges wait delay,
// or the adaptive delay if it is 0, and may make up ratio of its calls.
func NewHedger(delay time.Duration, ratio float64) *Hedger {
	hd := &Hedger{delay: delay, credit: int64(ratio * 1000)}
	hd.tokens.Store(hedgeBurst)
	return hd
}

// Deposit credits one call.
func (h *Hedger) Deposit() {
	if h.tokens.Add(h.credit) > hedgeBurst {
		h.tokens.Store(hedgeBurst) // a lost race only loses a little credit
	}
}

// Take takes one hedge, reporting whether there was one.
func (h *Hedger) Take() bool {
	for {
		old := h.tokens.Load()
		if old < 1000 {
			return false
		}
		if h.tokens.CompareAndSwap(old, old-1000) {
			return true
		}
	}
}

// hedgeSamples is how many answer times a method's adaptive delay is
// the percentile of; adaptiveAfter how many it needs first.
const (
	hedgeSamples  = 256
	adaptiveAfter = 64
)

// Hedger is one method's hedge state on one client: its tokens, of which
// each hedge takes one, and the answer times its adaptive delay is the
// 95th percentile of.
type Hedger struct {
	delay    time.Duration // the fixed delay, or 0 for the adaptive one
	adaptive atomic.Int64  // the adaptive delay; 0 while there are too few samples
	credit   int64         // thousandths of a hedge each call adds to tokens
	tokens   atomic.Int64  // thousandths of a hedge, at most hedgeBurst

	mu      sync.Mutex // guards the fields below
	samples [hedgeSamples]time.Duration
	n       int
}

// Wait returns how long a call waits before its next copy, or false if
// the method is not hedged yet.
func (h *Hedger) Wait() (time.Duration, bool) {
	if h.delay > 0 {
		return h.delay, true
	}
	d := time.Duration(h.adaptive.Load())
	return d, d > 0
}

// Observe records how long an answered call took, and every 32 answers
// computes the adaptive delay again.
func (h *Hedger) Observe(d time.Duration) {
	if h.delay > 0 {
		return
	}
	h.mu.Lock()
	h.samples[h.n%hedgeSamples] = d
	h.n++
	if h.n < adaptiveAfter || h.n%32 != 0 {
		h.mu.Unlock()
		return
	}
	s := slices.Clone(h.samples[:min(h.n, hedgeSamples)])
	h.mu.Unlock()
	slices.Sort(s)
	h.adaptive.Store(int64(max(s[len(s)*95/100], time.Microsecond)))
}

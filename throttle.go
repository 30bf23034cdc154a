package kiev

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Throttle configures client-side adaptive throttling, as in the Google
// SRE book: when a server keeps refusing calls with ErrOverloaded, the
// client refuses a share of new calls itself, at once and without sending
// them, so a struggling server is not also buried under calls it would
// refuse anyway.
//
// Over the last Window the client counts calls sent and calls the server
// accepted (answered with anything but ErrOverloaded), separately for
// each priority, and refuses a new call with probability
//
//	max(0, (calls - K*accepted) / (calls + 8))
//
// so nothing is refused while the server accepts more than 1/K of the
// calls. (The book adds 1 to the divisor; kiev adds 8, as gRPC does, so
// that a handful of refusals on a quiet client does not start refusing.) Priorities are counted apart because a server serves important
// calls first: a priority-9 call is not refused because priority-0 calls
// are.
type Throttle struct {
	// K is how many calls per accepted call the client sends before it
	// starts refusing (default 2). Lower is more aggressive.
	K float64
	// Window is how far back the counts go (default 1 second). The book
	// uses 2 minutes; kiev servers refuse cheaply and at once, so a short
	// memory lets a client stop refusing within a second of the server
	// recovering, while a sustained overload keeps it refusing.
	Window time.Duration
	// Disabled turns throttling off.
	Disabled bool
}

const throttleBuckets = 30

// throttlePadding damps the refusal probability while counts are small.
const throttlePadding = 8

// throttler holds one priority's counts in a ring of time buckets. The
// current bucket is updated with atomics; the sums of the older buckets
// change only when a bucket ends, under mu, so the common path takes no
// lock.
//
// A bucket's counts join the past sums when it ends, and leave them, as
// they joined, when it falls out of the window: a count that lands in a
// bucket after it ended (a race with advance) is lost, never subtracted
// without having been added.
type throttler struct {
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

func newThrottlers(t Throttle) *[MaxPriority + 1]throttler {
	if t.Disabled {
		return nil
	}
	if t.K <= 0 {
		t.K = 2
	}
	if t.Window <= 0 {
		t.Window = time.Second
	}
	var ts [MaxPriority + 1]throttler
	for i := range ts {
		ts[i].k = t.K
		ts[i].width = int64(max(t.Window/throttleBuckets, time.Millisecond))
	}
	return &ts
}

// bucket returns the index of the current bucket, first moving the
// window forward to now if a bucket has ended.
func (t *throttler) bucket(now time.Time) int {
	e := now.UnixNano() / t.width
	if t.epoch.Load() != e {
		t.advance(e)
	}
	return int(e % throttleBuckets)
}

func (t *throttler) advance(e int64) {
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

// allow reports whether to send a new call. Only calls sent are counted,
// by done once their outcome is known, so calls in flight do not count as
// refused, and neither do the client's own refusals: the book counts
// those too, which keeps a client refusing for several windows after the
// server has recovered.
func (t *throttler) allow(now time.Time) bool {
	i := t.bucket(now)
	calls := float64(t.pastCalls.Load() + t.calls[i].Load())
	accepts := float64(t.pastAccepts.Load() + t.accepts[i].Load())
	p := (calls - t.k*accepts) / (calls + throttlePadding)
	return p <= 0 || rand.Float64() >= p
}

// refusing reports whether allow refuses some calls now.
func (t *throttler) refusing(now time.Time) bool {
	i := t.bucket(now)
	calls := float64(t.pastCalls.Load() + t.calls[i].Load())
	accepts := float64(t.pastAccepts.Load() + t.accepts[i].Load())
	return calls-t.k*accepts > 0
}

// done counts a sent call, accepted or not by the server, in the current
// bucket: the one of the latest call to start, which is close enough to
// now without a clock read. (A call's own start can be buckets ago, and
// its bucket's counts already part of the past sums.)
func (t *throttler) done(accepted bool) {
	i := int(t.epoch.Load() % throttleBuckets)
	t.calls[i].Add(1)
	if accepted {
		t.accepts[i].Add(1)
	}
}

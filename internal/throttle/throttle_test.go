package throttle

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestThrottleRefusesWhileRefusedAndForgetsAfterWindow(t *testing.T) {
	var th Throttler
	th.Init(2, time.Second)
	now := time.Unix(1000, 0)
	allowed := func(n int) int {
		ok := 0
		for range n {
			if th.Allow(now) {
				ok++
			}
		}
		return ok
	}
	if got := allowed(100); got != 100 {
		t.Fatalf("a fresh throttle let %d of 100 calls through", got)
	}
	for range 200 { // the server refuses everything
		th.Done(false)
	}
	if got := allowed(1000); got > 100 {
		t.Fatalf("after 200 refusals in a row, %d of 1000 calls went out; want about 4%%", got)
	}
	// Accepted calls at more than 1/K of the calls stop the refusals.
	now = now.Add(100 * time.Millisecond)
	for range 600 {
		th.Done(true)
	}
	if got := allowed(100); got != 100 {
		t.Fatalf("with 600 of 800 calls accepted, %d of 100 calls went out", got)
	}
	// The window forgets: refusals older than it no longer count.
	for range 5000 {
		th.Done(false)
	}
	now = now.Add(1100 * time.Millisecond)
	if got := allowed(100); got != 100 {
		t.Fatalf("a window after the refusals, %d of 100 calls went out", got)
	}
}

// TestThrottleSlowCallsAllAccepted: calls that end buckets after they
// started, every one accepted, never make the throttle refuse. (The
// counts of calls that ended after their bucket had joined the past sums
// used to leave those sums when the bucket was reused, so that they drifted
// until a client whose server accepted every call refused most calls: 128
// callers of 16 KiB on a busy machine found it.)
func TestThrottleSlowCallsAllAccepted(t *testing.T) {
	var th Throttler
	th.Init(2, 300*time.Millisecond)
	start := time.Unix(1000, 0)
	r := rand.New(rand.NewPCG(1, 2))
	type call struct{ end time.Time }
	var inFlight []call
	refused := 0
	// A call every 100µs, each taking 0 to 60ms (up to six 10ms buckets),
	// for 10 windows: the server accepts every one.
	for step := range 30000 {
		now := start.Add(time.Duration(step) * 100 * time.Microsecond)
		kept := inFlight[:0]
		for _, c := range inFlight {
			if now.Before(c.end) {
				kept = append(kept, c)
				continue
			}
			th.Done(true)
		}
		inFlight = kept
		if !th.Allow(now) {
			refused++
			continue
		}
		inFlight = append(inFlight, call{now.Add(time.Duration(r.Int64N(int64(60 * time.Millisecond))))})
	}
	if refused > 0 {
		t.Errorf("the throttle refused %d of 30000 calls, all of which the server accepted", refused)
	}
	if c, a := th.pastCalls.Load(), th.pastAccepts.Load(); c < 0 || a < 0 || c != a {
		t.Errorf("past sums %d calls, %d accepted; want equal and not negative", c, a)
	}
}

func TestRetryBudgetRatio(t *testing.T) {
	b := NewBudget(0.1, 1)
	now := b.last
	if !b.Withdraw(now) { // the initial balance: one second's floor
		t.Fatal("a new budget has no retry")
	}
	if b.Withdraw(now) {
		t.Fatal("an empty budget gave a retry")
	}
	for range 10 {
		b.Deposit()
	}
	if !b.Withdraw(now) || b.Withdraw(now) {
		t.Fatal("10 calls at ratio 0.1 did not buy exactly one retry")
	}
	for range 10 {
		b.Deposit()
	}
	b.Penalize()
	if b.Withdraw(now) {
		t.Fatal("an ErrOverloaded answer did not take the retry away")
	}
	if !b.Withdraw(now.Add(2 * time.Second)) {
		t.Fatal("the per-second floor did not refill the budget")
	}
}

// TestThrottleRefusingHoldsHedgesBack checks Refusing, which holds a
// client's hedges back while its throttle refuses calls: true once refusals
// outweigh accepts K to 1, false again once the window has passed.
func TestThrottleRefusingHoldsHedgesBack(t *testing.T) {
	var th Throttler
	th.Init(2, time.Second)
	now := time.Unix(1000, 0)
	th.bucket(now)
	for range 10 {
		th.Done(true)
	}
	if th.Refusing(now) {
		t.Fatal("refusing after 10 accepted calls")
	}
	for range 20 {
		th.Done(false)
	}
	if !th.Refusing(now) {
		t.Fatal("not refusing after 20 refusals beside 10 accepts (K=2)")
	}
	if later := now.Add(2 * time.Second); th.Refusing(later) {
		t.Fatal("still refusing a window later")
	}
}

// TestHedgerAdaptiveDelayIsThe95thPercentile checks the adaptive delay:
// none before 64 answers, then the 95th percentile of the last 256.
func TestHedgerAdaptiveDelayIsThe95thPercentile(t *testing.T) {
	h := NewHedger(0, 0.05)
	for i := range 63 {
		h.Observe(time.Duration(i+1) * time.Millisecond)
	}
	if _, ok := h.Wait(); ok {
		t.Fatal("a delay after 63 answers; want none before 64")
	}
	for i := 63; i < 256; i++ {
		h.Observe(time.Duration(i+1) * time.Millisecond)
	}
	if d, ok := h.Wait(); !ok || d != 244*time.Millisecond {
		t.Fatalf("delay after answers of 1..256 ms = %v, %v; want the 95th percentile, 244ms", d, ok)
	}
	for range 256 { // the window moves on
		h.Observe(time.Millisecond)
	}
	if d, _ := h.Wait(); d != time.Millisecond {
		t.Fatalf("delay after 256 answers of 1ms = %v; want 1ms", d)
	}
}

// A hedger's tokens: ten to begin with, one per hedge, and ratio of one
// per call deposited, up to ten.
func TestHedgerTokens(t *testing.T) {
	h := NewHedger(time.Millisecond, 0.1)
	for i := range 10 {
		if !h.Take() {
			t.Fatalf("hedge %d of the first ten was refused", i+1)
		}
	}
	if h.Take() {
		t.Fatal("an eleventh hedge with no call deposited")
	}
	for range 10 {
		h.Deposit()
	}
	if !h.Take() || h.Take() {
		t.Fatal("10 calls at ratio 0.1 did not buy exactly one hedge")
	}
	for range 1000 {
		h.Deposit()
	}
	n := 0
	for h.Take() {
		n++
	}
	if n != 10 {
		t.Fatalf("after 1,000 calls, %d hedges; want the burst of 10", n)
	}
	if d, ok := h.Wait(); !ok || d != time.Millisecond {
		t.Fatalf("a fixed delay's wait = %v, %v; want 1ms", d, ok)
	}
}

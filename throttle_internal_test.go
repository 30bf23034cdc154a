package kiev

import (
	"testing"
	"time"
)

func TestThrottleRefusesWhileRefusedAndForgetsAfterWindow(t *testing.T) {
	ts := newThrottlers(Throttle{K: 2, Window: time.Second})
	th := &ts[0]
	now := time.Unix(1000, 0)
	allowed := func(n int) int {
		ok := 0
		for range n {
			if th.allow(now) {
				ok++
			}
		}
		return ok
	}
	if got := allowed(100); got != 100 {
		t.Fatalf("a fresh throttle let %d of 100 calls through", got)
	}
	for range 200 { // the server refuses everything
		th.done(now, false)
	}
	if got := allowed(1000); got > 100 {
		t.Fatalf("after 200 refusals in a row, %d of 1000 calls went out; want about 4%%", got)
	}
	// Accepted calls at more than 1/K of the calls stop the refusals.
	now = now.Add(100 * time.Millisecond)
	for range 600 {
		th.done(now, true)
	}
	if got := allowed(100); got != 100 {
		t.Fatalf("with 600 of 800 calls accepted, %d of 100 calls went out", got)
	}
	// The window forgets: refusals older than it no longer count.
	for range 5000 {
		th.done(now, false)
	}
	now = now.Add(1100 * time.Millisecond)
	if got := allowed(100); got != 100 {
		t.Fatalf("a window after the refusals, %d of 100 calls went out", got)
	}
}

func TestRetryBudgetRatio(t *testing.T) {
	b := newRetryBudget(RetryPolicy{Ratio: 0.1, MinPerSecond: 1})
	now := b.last
	if !b.withdraw(now) { // the initial balance: one second's floor
		t.Fatal("a new budget has no retry")
	}
	if b.withdraw(now) {
		t.Fatal("an empty budget gave a retry")
	}
	for range 10 {
		b.deposit()
	}
	if !b.withdraw(now) || b.withdraw(now) {
		t.Fatal("10 calls at ratio 0.1 did not buy exactly one retry")
	}
	for range 10 {
		b.deposit()
	}
	b.penalize()
	if b.withdraw(now) {
		t.Fatal("an ErrOverloaded answer did not take the retry away")
	}
	if !b.withdraw(now.Add(2 * time.Second)) {
		t.Fatal("the per-second floor did not refill the budget")
	}
}

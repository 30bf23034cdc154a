package kiev_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/registry/memory"
)

// Stall is a service whose providers share a count of calls to stall:
// while it is above zero, a call takes one and waits for its context to
// end, then says so on canceled.
type Stall struct {
	name     string
	stall    *atomic.Int32
	canceled chan string
}

func (s *Stall) Get(ctx context.Context, args int, reply *string) error {
	if s.stall.Add(-1) >= 0 {
		<-ctx.Done()
		s.canceled <- s.name
		return ctx.Err()
	}
	*reply = s.name
	return nil
}

// Shed refuses every call, as a server shedding load does.
func (s *Stall) Shed(ctx context.Context, args int, reply *string) error {
	return kiev.ErrOverloaded
}

// stallProviders starts n providers of Stall and dials them.
func stallProviders(t *testing.T, n int, opts ...kiev.DialOption) (*kiev.Client, *atomic.Int32, chan string) {
	t.Helper()
	reg := memory.New()
	stall := new(atomic.Int32)
	canceled := make(chan string, 16)
	for i := range n {
		srv := kiev.NewServer(kiev.WithRegistry(reg))
		if err := srv.Register(&Stall{name: string(rune('a' + i)), stall: stall, canceled: canceled}); err != nil {
			t.Fatal(err)
		}
		startServer(t, srv)
	}
	c := dial(t, "Stall", append([]kiev.DialOption{kiev.WithRegistry(reg)}, opts...)...)
	waitProviders(t, c, n)
	return c, stall, canceled
}

var safeGet = kiev.WithRetry(kiev.RetryPolicy{Idempotent: kiev.IdempotentMethods("Stall.Get")})

func callGet(c *kiev.Client, timeout time.Duration) (string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	var name string
	err := c.Call(ctx, "Stall.Get", 0, &name)
	return name, time.Since(start), err
}

func TestHedgeAnswersFromAnotherProviderAndCancelsTheSlowOne(t *testing.T) {
	c, stall, canceled := stallProviders(t, 2, safeGet, kiev.WithHedging(kiev.Hedging{Delay: 20 * time.Millisecond}))
	for range 4 {
		stall.Store(1)
		name, took, err := callGet(c, 10*time.Second)
		if err != nil || name == "" {
			t.Fatalf("hedged call = %q, %v; want the other provider's answer", name, err)
		}
		if took > 5*time.Second {
			t.Fatalf("hedged call took %v; want about the 20ms delay", took)
		}
		select {
		case slow := <-canceled:
			if slow == name {
				t.Fatalf("the reply came from %s, the provider that stalled", name)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the stalled handler never saw its context canceled")
		}
	}
	// A hedge that reaches its server before the first copy (on a busy
	// machine) is the copy that stalls, and the first copy wins.
	if st := c.HedgeStats(); st.Sent != 4 || st.Won < 1 {
		t.Errorf("HedgeStats = %+v; want 4 sent, most of them won", st)
	}
	// A call that answers within the delay sends no hedge.
	if _, _, err := callGet(c, time.Second); err != nil {
		t.Fatal(err)
	}
	if st := c.HedgeStats(); st.Sent != 4 {
		t.Errorf("HedgeStats = %+v after a fast call; want still 4 sent", st)
	}
}

func TestHedgeOnlyMethodsSafeToRepeat(t *testing.T) {
	c, stall, _ := stallProviders(t, 2, kiev.WithHedging(kiev.Hedging{Delay: 10 * time.Millisecond}))
	stall.Store(1)
	if _, _, err := callGet(c, 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call of a method not marked safe to repeat = %v; want it to wait, unhedged, for its deadline", err)
	}
	if st := c.HedgeStats(); st.Sent != 0 {
		t.Errorf("HedgeStats = %+v; want no hedge of a method not marked safe to repeat", st)
	}
	_, err := kiev.MethodOf(c, (*Stall).Get, kiev.WithHedging(kiev.Hedging{}))
	if err == nil || !strings.Contains(err.Error(), "safe to repeat") || !strings.Contains(err.Error(), "IdempotentMethods") {
		t.Errorf("MethodOf(Get, WithHedging) on a client that does not mark Get safe to repeat = %v; want an error saying how to mark it", err)
	}
}

func TestHedgeGivenToMethodOf(t *testing.T) {
	c, stall, _ := stallProviders(t, 2, safeGet)
	get, err := kiev.MethodOf(c, (*Stall).Get, kiev.WithHedging(kiev.Hedging{Delay: 10 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	stall.Store(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if name, err := get.Call(ctx, 0); err != nil || name == "" {
		t.Fatalf("Get = %q, %v; want the hedge's answer", name, err)
	}
	if st := c.HedgeStats(); st.Sent != 1 {
		t.Errorf("HedgeStats = %+v; want 1 sent", st)
	}
}

func TestHedgeHeldBackWhileAProviderSheds(t *testing.T) {
	// With the throttle off, which would hold hedges back too.
	c, stall, _ := stallProviders(t, 2, safeGet, kiev.WithHedging(kiev.Hedging{Delay: 10 * time.Millisecond}), kiev.WithThrottle(kiev.Throttle{Disabled: true}))
	if err := c.Call(context.Background(), "Stall.Shed", 0, new(string)); !errors.Is(err, kiev.ErrOverloaded) {
		t.Fatalf("Shed = %v; want ErrOverloaded", err)
	}
	stall.Store(1)
	if _, _, err := callGet(c, 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call right after an overload answer = %v; want it unhedged, waiting for its deadline", err)
	}
	if st := c.HedgeStats(); st.Sent != 0 || st.Overload != 1 {
		t.Errorf("HedgeStats = %+v; want no hedge sent, 1 held back for overload", st)
	}
}

func TestHedgeDrawsOnTheRetryBudget(t *testing.T) {
	empty := kiev.WithRetry(kiev.RetryPolicy{Idempotent: kiev.IdempotentMethods("Stall.Get"), Ratio: 1e-6, MinPerSecond: 1e-6})
	c, stall, _ := stallProviders(t, 2, empty, kiev.WithHedging(kiev.Hedging{Delay: 10 * time.Millisecond}))
	stall.Store(1)
	if _, _, err := callGet(c, 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call with an empty retry budget = %v; want it unhedged, waiting for its deadline", err)
	}
	if st := c.HedgeStats(); st.Sent != 0 || st.NoBudget != 1 {
		t.Errorf("HedgeStats = %+v; want no hedge sent, 1 held back for want of budget", st)
	}
}

func TestHedgeAdaptiveDelay(t *testing.T) {
	c, stall, _ := stallProviders(t, 3, safeGet, kiev.WithHedging(kiev.Hedging{}))
	// Until enough calls have answered, the delay is unknown: no hedge.
	stall.Store(1)
	if _, _, err := callGet(c, 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call before the adaptive delay is known = %v; want it unhedged", err)
	}
	for range 100 {
		if _, _, err := callGet(c, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// Now a call that stalls is hedged. (Of the 100 calls above, a few
	// slower than the 95th percentile may have been hedged too.)
	before := c.HedgeStats()
	stall.Store(1)
	name, took, err := callGet(c, 10*time.Second)
	if err != nil || name == "" {
		t.Fatalf("call once the delay is known = %q, %v; want the hedge's answer", name, err)
	}
	if st := c.HedgeStats(); st.Sent < before.Sent+1 {
		t.Errorf("HedgeStats = %+v, before the stalled call %+v; want a hedge sent (answered in %v)", st, before, took)
	}
}

func TestHedgeStatusShowsCounts(t *testing.T) {
	c, stall, _ := stallProviders(t, 2, safeGet, kiev.WithHedging(kiev.Hedging{Delay: 10 * time.Millisecond}))
	stall.Store(1)
	if _, _, err := callGet(c, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	srv := kiev.NewServer()
	st := srv.Status(context.Background())
	for _, cs := range st.Clients {
		if cs.Target == "Stall" && cs.Hedges != nil && cs.Hedges.Sent == 1 {
			return
		}
	}
	t.Errorf("status page's clients = %+v; want Stall's with 1 hedge sent", st.Clients)
}

func TestHedgeRatioBoundsTheExtraLoad(t *testing.T) {
	c, stall, _ := stallProviders(t, 2, safeGet, kiev.WithHedging(kiev.Hedging{Delay: 10 * time.Millisecond, Ratio: 1e-6}))
	// A method saves up 10 hedges; with no credit from its calls, the
	// eleventh stalled call is not hedged.
	for i := range 10 {
		stall.Store(1)
		if _, _, err := callGet(c, 10*time.Second); err != nil {
			t.Fatalf("stalled call %d: %v; want it hedged", i, err)
		}
	}
	stall.Store(1)
	if _, _, err := callGet(c, 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stalled call past the ratio = %v; want it unhedged, waiting for its deadline", err)
	}
	if st := c.HedgeStats(); st.Sent != 10 || st.NoBudget != 1 {
		t.Errorf("HedgeStats = %+v; want 10 sent, 1 held back", st)
	}
}

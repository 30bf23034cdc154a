package shed

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"
)

// waitQueued waits until n calls wait for a slot of r.
func waitQueued(t *testing.T, r *Resource, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second) // a safety net, not synchronization
	for r.Stats().Waiting != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls waiting, want %d", r.Stats().Waiting, n)
		}
		runtime.Gosched()
	}
}

// taskCtx returns a context for a call of priority p of method c.
func taskCtx(p int, c *ServiceTime) context.Context {
	return WithTask(context.Background(), &task{prio: p, cost: c})
}

// A Resource grants a freed slot to the most important waiting call,
// the oldest first within a priority.
func TestResourceGrantsInPriorityOrder(t *testing.T) {
	r := NewResource("db", 1)
	release, err := r.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 4)
	var wg sync.WaitGroup
	for i, p := range []int{0, 9, 5, 9} {
		wg.Go(func() {
			rel, err := r.Acquire(taskCtx(p, nil))
			if err != nil {
				t.Error(err)
				return
			}
			got <- p*10 + i
			rel.Release()
		})
		waitQueued(t, r, i+1)
	}
	release.Release()
	for _, want := range []int{91, 93, 52, 0} {
		if g := <-got; g != want {
			t.Fatalf("granted %d, want %d (priority × 10 + arrival)", g, want)
		}
	}
	wg.Wait()
	if st := r.Stats(); st.InUse != 0 || st.Waiting != 0 {
		t.Fatalf("after every release: %+v", st)
	}
}

// A call that cannot get a slot in time to use it before its deadline is
// refused at once, before it acquires one: the slots are held 100ms, one
// is taken, and the call has 50ms left.
func TestResourceRefusesWhatCannotFinishInTime(t *testing.T) {
	r := NewResource("db", 1)
	for range minObservations {
		r.hold.Observe(100 * time.Millisecond)
	}
	release, err := r.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer release.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := r.Acquire(ctx); !errors.Is(err, ErrResourceBusy) {
		t.Fatalf("Acquire: %v, want ErrResourceBusy", err)
	}
	if took := time.Since(start); took > 25*time.Millisecond {
		t.Fatalf("refused after %v, want at once", took)
	}
}

// A slot freed is not given to a waiting call that could no longer use
// it before its deadline; the next one gets it.
func TestResourceSkipsWaitersPastTheirTime(t *testing.T) {
	r := NewResource("db", 1)
	release, err := r.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for range minObservations {
		r.hold.Observe(time.Hour) // from now on, a slot is held an hour
	}
	short, cancel := context.WithTimeout(taskCtx(9, nil), 150*time.Minute)
	defer cancel()
	first, second := make(chan error, 1), make(chan error, 1)
	go func() {
		rel, err := r.Acquire(short)
		if err == nil {
			rel.Release()
		}
		first <- err
	}()
	waitQueued(t, r, 1)
	go func() {
		rel, err := r.Acquire(taskCtx(0, nil))
		if err == nil {
			rel.Release()
		}
		second <- err
	}()
	waitQueued(t, r, 2)
	for range minObservations {
		r.hold.Observe(4 * time.Hour) // the slots slowed: the first waiter cannot finish in time
	}
	release.Release()
	if err := <-first; !errors.Is(err, ErrResourceBusy) {
		t.Fatalf("the waiter that can no longer finish: %v, want ErrResourceBusy", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("the waiter without a deadline: %v, want the slot", err)
	}
}

// A method whose calls acquire a Resource is bounded, while its limit is
// off, by twice the Resource's capacity, from the first call that
// acquires it; its waiting calls leave when their ctx ends.
func TestResourceBoundsItsMethods(t *testing.T) {
	r := NewResource("db", 10)
	c := new(ServiceTime)
	if got := c.Limit().Bound; got != initialBound {
		t.Fatalf("bound %d before any acquire, want %d", got, initialBound)
	}
	var held []Slot
	for range 10 {
		rel, err := r.Acquire(taskCtx(5, c))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, rel)
	}
	if got := c.Limit().Bound; got != 20 {
		t.Fatalf("bound %d, want 20 (twice the resource's 10 slots)", got)
	}
	ctx, cancel := context.WithCancel(taskCtx(5, c))
	errs := make(chan error)
	go func() {
		_, err := r.Acquire(ctx)
		errs <- err
	}()
	waitQueued(t, r, 1)
	cancel()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled waiter: %v", err)
	}
	for _, rel := range held {
		rel.Release()
		rel.Release() // a second call does nothing
	}
	if st := r.Stats(); st.InUse != 0 || st.Waiting != 0 {
		t.Fatalf("after every release: %+v", st)
	}
}

// A method whose calls acquire a Resource keeps that bound once its
// adaptive limit is on: its limit never goes past twice the Resource's
// capacity, however many calls wait, as more in the pool would only wait
// inside the handler for a slot, each on a goroutine.
func TestResourceBoundsTheLimitToo(t *testing.T) {
	r := NewResource("db", 10)
	c := new(ServiceTime)
	c.lim.limit.Store(500) // a limit that started before the first acquire
	slot, err := r.Acquire(taskCtx(5, c))
	if err != nil {
		t.Fatal(err)
	}
	slot.Release()
	if got := c.lim.inForce(); got != 20 {
		t.Fatalf("bound in force %d with a limit of 500, want 20 (twice the 10 slots)", got)
	}
	c.lim.mu.Lock()
	c.lim.setLimit(1000)
	c.lim.mu.Unlock()
	if got := c.Limit().Limit; got != 20 {
		t.Fatalf("limit %d after it was set to 1,000, want 20", got)
	}
}

// A call whose deadline is closer than a slot's hold gets no slot, even a
// free one: its context may not yet be canceled, and the work would be
// wasted.
func TestResourceRefusesALateCallAFreeSlot(t *testing.T) {
	r := NewResource("db", 4)
	for range minObservations {
		r.hold.Observe(20 * time.Millisecond)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(5*time.Millisecond))
	defer cancel()
	if _, err := r.Acquire(ctx); !errors.Is(err, ErrResourceBusy) {
		t.Fatalf("Acquire with 5ms left of a 20ms hold: %v, want ErrResourceBusy", err)
	}
	if st := r.Stats(); st.InUse != 0 {
		t.Fatalf("%d slots in use after the refusal, want 0", st.InUse)
	}
}

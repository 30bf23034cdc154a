package kiev

import (
	"context"
	"sync"
	"time"

	"github.com/kievrpc/kiev/shed"
)

// callContext is the context.Context a handler receives. It is a field of
// the serverCall rather than a chain of context.WithCancel and WithValue,
// which would cost several allocations per call and contend on the
// connection's context.
//
// It is canceled when the caller cancels, the deadline passes, the
// connection dies, or the handler returns. Values come from the server's
// base context, except the call's metadata and priority.
type callContext struct {
	parent   context.Context
	deadline time.Time
	md       Metadata
	priority Priority
	call     *serverCall // for Logger

	mu     sync.Mutex    // guards the fields below
	done   chan struct{} // made on first use
	err    error
	timer  *time.Timer
	afters []afterFunc
	nextID uint64
}

type afterFunc struct {
	id uint64
	f  func()
}

var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// start arms the deadline timer, if any; now is the time.
func (c *callContext) start(now time.Time) {
	if c.deadline.IsZero() {
		return
	}
	d := c.deadline.Sub(now)
	if d <= 0 {
		c.cancel(context.DeadlineExceeded)
		return
	}
	c.mu.Lock()
	if c.err == nil {
		c.timer = time.AfterFunc(d, func() { c.cancel(context.DeadlineExceeded) })
	}
	c.mu.Unlock()
}

// cancel ends the context with err; only the first call has an effect.
func (c *callContext) cancel(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	if c.done == nil {
		c.done = closedChan
	} else {
		close(c.done)
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	afters := c.afters
	c.afters = nil
	c.mu.Unlock()
	if sc := c.call; sc != nil {
		sc.streamCanceled(err) // a stream's only while its handler runs
	}
	for _, a := range afters {
		go a.f()
	}
}

func (c *callContext) Deadline() (time.Time, bool) { return c.deadline, !c.deadline.IsZero() }

func (c *callContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
	}
	return c.done
}

func (c *callContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *callContext) Value(key any) any {
	switch key.(type) {
	case incomingKey:
		if c.md == nil {
			return nil
		}
		return c.md
	case priorityKey:
		return c.priority
	case callKey:
		if c.call != nil {
			return c.call
		}
	case shed.TaskKey: // for shed.Resource: the call's priority, deadline and method
		if c.call != nil {
			return c.call
		}
	}
	return c.parent.Value(key)
}

// AfterFunc lets contexts derived from this one (context.WithTimeout in a
// handler, say) follow its cancellation without a goroutine each; package
// context looks for this method.
func (c *callContext) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		go f()
		return func() bool { return false }
	}
	c.nextID++
	id := c.nextID
	c.afters = append(c.afters, afterFunc{id, f})
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, a := range c.afters {
			if a.id == id {
				c.afters = append(c.afters[:i], c.afters[i+1:]...)
				return true
			}
		}
		return false
	}
}

func (c *callContext) String() string { return "kiev.callContext" }

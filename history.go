package kiev

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/admin"
	"github.com/kievrpc/kiev/shed"
)

// history samples a Server's counters into an admin.History every
// admin.HistoryEvery while it serves (from a Serve, ServePacket or
// ServeFastCGI until the last of them returns, or Shutdown or Close),
// for the status page's charts. It takes about 20 KiB a Server, and 5
// KiB more a method once sampled (see admin.HistoryLen).
type history struct {
	admin.History
	droppedAt [shed.Levels]atomic.Uint64 // calls the scheduler dropped, by priority

	mu      sync.Mutex    // guards the fields below
	serving int           // Serve calls running
	stop    chan struct{} // closed to stop the sampler; nil while none runs
	closed  bool          // the server is closed: no sampler starts again
	wg      sync.WaitGroup
}

// startHistory counts a Serve call that starts, and starts sampling the
// server's counters if no sampler runs.
func (s *Server) startHistory() {
	h := &s.hist
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.serving++
	if h.stop != nil {
		return
	}
	stop := make(chan struct{})
	h.stop = stop
	h.Add(s.counters(time.Now()))
	h.wg.Go(func() {
		t := time.NewTicker(admin.HistoryEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				h.Add(s.counters(now))
			}
		}
	})
}

// doneServing counts a Serve call that returned: after the last, the
// sampling stops until the next.
func (s *Server) doneServing() {
	h := &s.hist
	h.mu.Lock()
	if h.serving > 0 {
		h.serving--
	}
	if h.serving > 0 || h.stop == nil {
		h.mu.Unlock()
		return
	}
	close(h.stop)
	h.stop = nil
	h.mu.Unlock()
	h.wg.Wait()
}

// stopHistory stops the sampling for good, and returns once its
// goroutine has.
func (s *Server) stopHistory() {
	h := &s.hist
	h.mu.Lock()
	h.closed = true
	if h.stop != nil {
		close(h.stop)
		h.stop = nil
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// counters reads the server's counters for its history.
func (s *Server) counters(now time.Time) admin.Counters {
	c := admin.Counters{Time: now, Dropped: make(map[string]uint64, len(shed.Reasons()))}
	s.mu.Lock()
	for name, methods := range s.services {
		if isBuiltin(name) {
			continue
		}
		for mname, m := range methods {
			lim := m.cost.Limit()
			mc := admin.MethodCounters{
				Name: name + "." + mname, Calls: m.stats.Calls.Load(), Errors: m.stats.Errors.Load(),
				Limit: lim.Limit, InFlight: lim.InFlight,
			}
			m.stats.Read(&mc.Latency)
			if m.kind != Unary {
				mc.Stream, mc.MsgsIn, mc.MsgsOut = true, m.streams.msgsIn.Load(), m.streams.msgsOut.Load()
				m.streams.read(now) // the status page's stream rates
			}
			c.Methods = append(c.Methods, mc)
		}
	}
	s.mu.Unlock()
	sched := s.sched.Stats()
	for _, r := range shed.Reasons() {
		c.Dropped[r.String()] = sched.DroppedFor(r)
	}
	for p := range c.DroppedByPriority {
		c.DroppedByPriority[p] = s.hist.droppedAt[p].Load()
	}
	return c
}

package transport

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/internal/wire"
)

// Running calls on their connection's reader.
//
// A call alone on its connection, of a method that usually runs quickly,
// runs on the goroutine that read it instead of on a scheduler worker,
// when the scheduler would start it at once anyway (shed.RunInline).
// Between two otherwise idle processes, the hand-off to a worker wakes a
// second thread, which costs about as much as the rest of the call.
//
// So do the calls of a burst, the frames that one read brought in
// together, when their method usually takes no more than a hand-off
// costs (burstMaxCost), up to a budget of their estimated run time per
// burst (burstBudget); the rest of the burst goes to workers. Their
// replies wait in the queue, without waking the writer, until the burst
// is done, and leave in one write. Under load, this spares every call the
// wake-up of a worker and of the writer: the server spends a fifth to two
// fifths less CPU per small call. The budget keeps what it costs in
// parallelism small: at most burstBudget of work runs in turn on the
// reader before the rest of the burst spreads over the workers.
//
// While a call runs, nobody reads the connection. A watchdog bounds
// that: a reader lent to a call for a whole tick (inlineTick) is taken
// over by a new goroutine, which goes on reading while the call finishes
// where it is. So a call that is slow this once delays the frames behind
// it by two ticks at most, and never the heartbeat.
const inlineTick = time.Millisecond // the watchdog's period

// InlineTuning bounds what a server runs on its readers (see above). Its
// zero fields take the defaults (defaultInline). Tests raise the bounds,
// as the race detector slows calls.
type InlineTuning struct {
	// MaxCost is the average run time under which a method's calls may
	// run on the reader when alone, and BurstMaxCost in a burst, about
	// what a hand-off to a worker costs.
	MaxCost, BurstMaxCost time.Duration
	// BurstBudget bounds the estimated run time of the calls a burst runs
	// on its reader: one watchdog tick, the time a lone call may hold it
	// too.
	BurstBudget time.Duration
}

// defaultInline is the tuning of a server that sets none.
var defaultInline = InlineTuning{
	MaxCost:      100 * time.Microsecond,
	BurstMaxCost: 5 * time.Microsecond,
	BurstBudget:  inlineTick,
}

// filled returns t with its zero fields set to defaultInline's.
func (t InlineTuning) filled() InlineTuning {
	if t.MaxCost <= 0 {
		t.MaxCost = defaultInline.MaxCost
	}
	if t.BurstMaxCost <= 0 {
		t.BurstMaxCost = defaultInline.BurstMaxCost
	}
	if t.BurstBudget <= 0 {
		t.BurstBudget = defaultInline.BurstBudget
	}
	return t
}

// burst is a reader's account of the calls it runs between two waits for
// input.
type burst struct {
	spent time.Duration // estimated run time of the calls run so far
	held  bool          // the link holds their replies
}

// release sends the replies the burst held so far.
func (b *burst) release(l *Link) {
	if b.held {
		l.Release()
		b.held = false
	}
}

// end sends the replies the burst held, and starts a new one.
func (b *burst) end(l *Link) {
	b.release(l)
	b.spent = 0
}

// errReaderTaken ends a readLoop whose reading passed to another goroutine
// while it ran a call.
var errReaderTaken = errors.New("kiev: reading passed to another goroutine")

// runInline runs sc on the reader if the scheduler has a free worker and
// either sc is the only call on the connection and its method is quick,
// or sc belongs to a burst (more frames are read, or other calls run)
// whose budget it fits. It reports false if the reader must submit sc
// instead. taken reports that the watchdog took the reading over while sc
// ran: the caller must stop reading.
func (c *ServerConn) runInline(sc Call, more bool, b *burst) (ran, taken bool) {
	if c.base.Err() != nil {
		return false, false
	}
	est := sc.Estimate()
	if est <= 0 {
		return false, false // unknown yet: a worker runs it
	}
	tune := &c.inline
	if !more && b.spent == 0 && c.active.Load() == 1 { // alone
		if est > tune.MaxCost {
			return false, false // slow: a worker runs it
		}
	} else if est > tune.BurstMaxCost || b.spent+est > tune.BurstBudget {
		// Slow, or past the burst's budget: a worker runs it, and what
		// the burst answered so far goes now.
		b.release(c.link)
		return false, false
	} else {
		b.spent += est
		if !b.held {
			c.link.Hold()
			b.held = true
		}
	}
	seq := c.lendSeq.Add(1)
	c.lent.Store(seq)
	if !c.watched.Load() {
		c.cfg.Watch.watch(c)
	}
	ran = sc.RunInline()
	if ran {
		c.cfg.Watch.runs.Add(1)
	}
	if c.lent.CompareAndSwap(seq, 0) {
		return ran, false
	}
	if !ran {
		// Taken over while the scheduler said no (it cannot take long,
		// but the watchdog does not know): the call still needs a worker.
		sc.Submit(c.base)
	}
	return true, true
}

// takeOver goes on reading r in place of a reader busy with a call.
func (c *ServerConn) takeOver(r *wire.Reader) {
	c.link.Release() // the replies of the burst so far must not wait for the slow call
	c.cfg.Readers.Add(1)
	go func() {
		defer c.cfg.Readers.Done()
		c.read(r)
	}()
}

// InlineWatch is a server's watchdog over its lent readers. It ticks only
// while some connection lends its reader now and then. Its zero value is
// ready to use.
type InlineWatch struct {
	runs      atomic.Uint64 // calls run on their reader
	takeovers atomic.Uint64 // readers taken over

	mu      sync.Mutex             // guards the fields below
	conns   map[*ServerConn]uint64 // watched connections, by their lendSeq at the last tick
	timer   *time.Timer
	running bool
}

// watch adds c to the watched connections and starts the ticks.
func (w *InlineWatch) watch(c *ServerConn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conns == nil {
		w.conns = make(map[*ServerConn]uint64)
	}
	c.watched.Store(true)
	if _, ok := w.conns[c]; !ok {
		// One less than the lend under way, so the next tick, however
		// soon, does not count it lent since the last.
		w.conns[c] = c.lendSeq.Load() - 1
	}
	if !w.running {
		w.running = true
		if w.timer == nil {
			w.timer = time.AfterFunc(inlineTick, w.tick)
		} else {
			w.timer.Reset(inlineTick)
		}
	}
}

// tick takes over the readers lent to the same call since the last tick,
// and forgets the connections that lent none.
func (w *InlineWatch) tick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for c, seen := range w.conns {
		seq := c.lendSeq.Load()
		if lent := c.lent.Load(); lent != 0 && lent == seen {
			// Lent to one call since the last tick at least.
			if c.lent.CompareAndSwap(lent, 0) {
				w.takeovers.Add(1)
				c.takeOver(c.reader)
			}
			continue
		}
		if seq != seen {
			w.conns[c] = seq // lent since the last tick; watch on
			continue
		}
		// No call ran on its reader for a whole tick: stop watching it,
		// unless it lends its reader this moment, having seen it
		// watched (it checks watched after setting lent; we check lent
		// after clearing watched).
		c.watched.Store(false)
		if c.lent.Load() != 0 {
			c.watched.Store(true)
			continue
		}
		delete(w.conns, c)
	}
	if len(w.conns) == 0 {
		w.running = false
		return
	}
	w.timer.Reset(inlineTick)
}

// Counts reports how many calls ran on their connection's reader, and how
// many times the watchdog took a lent reader over.
func (w *InlineWatch) Counts() (runs, takeovers uint64) {
	return w.runs.Load(), w.takeovers.Load()
}

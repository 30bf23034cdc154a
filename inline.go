package kiev

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/internal/wire"
)

// Running a call on its connection's reader.
//
// A call alone on its connection, of a method that usually runs quickly,
// runs on the goroutine that read it instead of on a scheduler worker,
// when the scheduler would start it at once anyway (shed.RunInline).
// Between two otherwise idle processes, the hand-off to a worker wakes a
// second thread, which costs about as much as the rest of the call.
//
// While the call runs, nobody reads the connection. A watchdog bounds
// that: a reader lent to a call for a whole tick (inlineTick) is taken
// over by a new goroutine, which goes on reading while the call finishes
// where it is. So a call that is slow this once delays the frames behind
// it by two ticks at most, and never the heartbeat.
const inlineTick = time.Millisecond // the watchdog's period

// inlineMaxCost is the average run time under which a method's calls may
// run on the reader; tests raise it, as the race detector slows calls.
var inlineMaxCost atomic.Int64

func init() { inlineMaxCost.Store(int64(100 * time.Microsecond)) }

// errReaderTaken ends a readLoop whose reading passed to another goroutine
// while it ran a call.
var errReaderTaken = errors.New("kiev: reading passed to another goroutine")

// runInline runs sc on the reader if it is the only call on the
// connection, its method is quick, and the scheduler has a free worker. It
// reports false if the reader must submit sc instead. taken reports that
// the watchdog took the reading over while sc ran: the caller must stop
// reading.
func (c *serverConn) runInline(sc *serverCall, more bool) (ran, taken bool) {
	if more || c.active.Load() != 1 || c.base.Err() != nil {
		return false, false
	}
	if est := sc.m.cost.Estimate(); est <= 0 || est > time.Duration(inlineMaxCost.Load()) {
		return false, false // unknown yet, or slow: a worker runs it
	}
	seq := c.lendSeq.Add(1)
	c.lent.Store(seq)
	if !c.watched.Load() {
		c.srv.inline.watch(c)
	}
	ran = c.srv.sched.RunInline(sc)
	if ran {
		c.srv.inline.runs.Add(1)
	}
	if c.lent.CompareAndSwap(seq, 0) {
		return ran, false
	}
	if !ran {
		// Taken over while the scheduler said no (it cannot take long,
		// but the watchdog does not know): the call still needs a worker.
		c.srv.submit(sc, c.base)
	}
	return true, true
}

// takeOver goes on reading r in place of a reader busy with a call.
func (c *serverConn) takeOver(r *wire.Reader) {
	c.srv.connWG.Add(1)
	go func() {
		defer c.srv.connWG.Done()
		c.read(r)
	}()
}

// inlineWatch is a Server's watchdog over its lent readers. It ticks only
// while some connection lends its reader now and then.
type inlineWatch struct {
	runs      atomic.Uint64 // calls run on their reader
	takeovers atomic.Uint64 // readers taken over

	mu      sync.Mutex
	conns   map[*serverConn]uint64 // watched connections, by their lendSeq at the last tick
	timer   *time.Timer
	running bool
}

// watch adds c to the watched connections and starts the ticks.
func (w *inlineWatch) watch(c *serverConn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conns == nil {
		w.conns = make(map[*serverConn]uint64)
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
func (w *inlineWatch) tick() {
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

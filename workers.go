package kiev

import "sync"

// maxIdleWorkers bounds the goroutines a Server keeps parked for the next
// calls once a burst is over.
const maxIdleWorkers = 256

// workers runs calls on reused goroutines. A fresh goroutine per call
// would grow its stack on every call (codecs and reflection need more than
// the starting stack); a parked worker keeps the stack it grew.
type workers struct {
	mu      sync.Mutex
	idle    []chan *serverCall // LIFO, so warm workers go first
	stopped bool
	wg      sync.WaitGroup
}

// run runs sc on an idle worker, or on a new one.
func (w *workers) run(sc *serverCall) {
	w.mu.Lock()
	if n := len(w.idle); n > 0 {
		ch := w.idle[n-1]
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		ch <- sc
		return
	}
	w.wg.Add(1)
	w.mu.Unlock()
	go w.loop(sc)
}

func (w *workers) loop(sc *serverCall) {
	defer w.wg.Done()
	ch := make(chan *serverCall, 1)
	for sc != nil {
		sc.run()
		w.mu.Lock()
		if w.stopped || len(w.idle) >= maxIdleWorkers {
			w.mu.Unlock()
			return
		}
		w.idle = append(w.idle, ch)
		w.mu.Unlock()
		sc = <-ch
	}
}

// stop releases the idle workers; busy ones exit when their call ends.
// It does not wait for them.
func (w *workers) stop() { w.release(true) }

// release lets the idle workers exit; with stop set, so do busy ones when
// their call ends.
func (w *workers) release(stop bool) {
	w.mu.Lock()
	w.stopped = w.stopped || stop
	idle := w.idle
	w.idle = nil
	w.mu.Unlock()
	for _, ch := range idle {
		ch <- nil
	}
}

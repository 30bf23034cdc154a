package main

// The cells: each a method of meter that fills m.v with its figures.

import (
	"context"
	"errors"
	"fmt"
	"github.com/kievrpc/kiev/bench/internal/hist"
	"io"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// reader receives a stream's messages as fast as they come, counting them.
type reader struct {
	msgs, bytes atomic.Int64
	err         error // set before done closes
	done        chan struct{}
}

func startReader(ctx context.Context, s recvStream) *reader {
	r := &reader{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			n, err := s.recv(ctx)
			if err != nil {
				r.err = err
				return
			}
			r.msgs.Add(1)
			r.bytes.Add(int64(n))
		}
	}()
	return r
}

// failed returns the reader's error if it stopped on its own.
func (r *reader) failed() error {
	select {
	case <-r.done:
		return fmt.Errorf("the stream ended: %w", r.err)
	default:
		return nil
	}
}

// window is a measured span: both processes' CPU time and a reader's
// counts.
type window struct {
	r              *reader
	start          time.Time
	cli, srv       time.Duration
	msgs, bytes    int64
	elapsed        time.Duration
	cliCPU, srvCPU time.Duration
}

func (m *meter) begin(ctx context.Context, r *reader) (*window, error) {
	st, err := m.ctl.stats(ctx, false)
	if err != nil {
		return nil, err
	}
	w := &window{r: r, srv: st.CPU, cli: cpuTime(), start: time.Now()}
	if r != nil {
		w.msgs, w.bytes = r.msgs.Load(), r.bytes.Load()
	}
	return w, nil
}

func (w *window) end(ctx context.Context, m *meter) error {
	w.elapsed = time.Since(w.start)
	w.cliCPU = cpuTime() - w.cli
	if w.r != nil {
		w.msgs, w.bytes = w.r.msgs.Load()-w.msgs, w.r.bytes.Load()-w.bytes
	}
	st, err := m.ctl.stats(ctx, false)
	w.srvCPU = st.CPU - w.srv
	return err
}

// rate measures a stream read as fast as it comes: its window after the
// warm-up.
func (m *meter) rate(ctx context.Context, a watchArgs) (*window, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := m.c.watch(sctx, a)
	if err != nil {
		return nil, err
	}
	r := startReader(sctx, s)
	defer func() {
		cancel()
		s.close()
		<-r.done
	}()
	if !sleepCtx(ctx, m.spec.Warmup) {
		return nil, ctx.Err()
	}
	w, err := m.begin(ctx, r)
	if err != nil {
		return nil, err
	}
	if !sleepCtx(ctx, m.spec.Duration) {
		return nil, ctx.Err()
	}
	if err := w.end(ctx, m); err != nil {
		return nil, err
	}
	return w, r.failed()
}

// throughput: one server stream of size-byte messages, read as fast as
// they come.
func (m *meter) throughput(ctx context.Context, size int) error {
	w, err := m.rate(ctx, watchArgs{Size: size})
	if err != nil {
		return err
	}
	if w.msgs == 0 {
		return errors.New("no message in the window")
	}
	s, n := w.elapsed.Seconds(), float64(w.msgs)
	m.v["msgs_s"] = n / s
	m.v["bytes_s"] = float64(w.bytes) / s
	m.v["cpu_cli_us"] = float64(w.cliCPU.Microseconds()) / n
	m.v["cpu_srv_us"] = float64(w.srvCPU.Microseconds()) / n
	m.v["cpu_us"] = m.v["cpu_cli_us"] + m.v["cpu_srv_us"]
	return nil
}

// closedLoop runs m.spec.Callers goroutines, each starting op again as
// soon as it returns, and returns the ops completed per second in the
// window after the warm-up.
func (m *meter) closedLoop(ctx context.Context, op func(context.Context) error) (float64, error) {
	var measuring, stop atomic.Bool
	var done, failed atomic.Int64
	var wg sync.WaitGroup
	for range m.spec.Callers {
		wg.Go(func() {
			for !stop.Load() {
				err := op(ctx)
				if err != nil {
					m.tolerate(err)
					if failed.Add(1) > maxErrors {
						stop.Store(true)
						return
					}
					continue
				}
				if measuring.Load() {
					done.Add(1)
				}
			}
		})
	}
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	if !sleepCtx(ctx, m.spec.Warmup) {
		return 0, ctx.Err()
	}
	measuring.Store(true)
	t0 := time.Now()
	if !sleepCtx(ctx, m.spec.Duration) {
		return 0, ctx.Err()
	}
	measuring.Store(false)
	el := time.Since(t0)
	stop.Store(true)
	wg.Wait()
	if n := failed.Load(); n > maxErrors {
		return 0, fmt.Errorf("%d operations failed; the first: %s", n, m.note)
	}
	return float64(done.Load()) / el.Seconds(), nil
}

// maxErrors is how many failed operations a cell tolerates, each counted
// in its errors figure and the first kept as its note, before it fails.
const maxErrors = 100

// tolerate counts a failed operation the cell goes on after.
func (m *meter) tolerate(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.v["errors"]++
	if m.note == "" {
		m.note = err.Error()
	}
}

// openClose: open a server stream, take its one message and its end,
// close it; against a unary call with the same arguments and reply, at
// the same concurrency.
func (m *meter) openClose(ctx context.Context) error {
	m.v["errors"] = 0
	stream := func(ctx context.Context) error {
		s, err := m.c.watch(ctx, watchArgs{Size: smallSize, Count: 1})
		if err != nil {
			return err
		}
		defer s.close()
		if _, err := s.recv(ctx); err != nil {
			return err
		}
		if _, err := s.recv(ctx); err != io.EOF {
			return fmt.Errorf("after the one message: %v, want io.EOF", err)
		}
		return nil
	}
	unary := func(ctx context.Context) error { return m.c.get(ctx, watchArgs{Size: smallSize}) }
	order := []string{"stream_s", "unary_s"}
	if m.spec.Rep%2 == 1 {
		slices.Reverse(order)
	}
	for _, k := range order {
		op := stream
		if k == "unary_s" {
			op = unary
		}
		r, err := m.closedLoop(ctx, op)
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		m.v[k] = r
	}
	m.v["ratio"] = m.v["stream_s"] / m.v["unary_s"]
	return nil
}

// heapInuse is this process's heap in use after a collection.
func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// idle: m.spec.Idle bidirectional streams on one connection, each having
// echoed one message, then idle; each side's heap and goroutines per
// stream.
func (m *meter) idle(ctx context.Context) error {
	n := m.spec.Idle
	// Warm the connection and whatever a first stream sets up.
	if err := m.c.get(ctx, watchArgs{Size: smallSize}); err != nil {
		return err
	}
	if err := m.chatOnce(ctx, nil); err != nil {
		return err
	}
	// The warm-up stream's handler ends before the baseline, so that a
	// server with a maximum of n streams per connection takes all n.
	err := waitFor(ctx, 10*time.Second, func() (bool, error) {
		st, err := m.ctl.stats(ctx, false)
		return st.Chatting == 0, err
	})
	if err != nil {
		return fmt.Errorf("waiting for the warm-up stream's handler to end: %w", err)
	}
	streams := make([]chatStream, n) // before the baseline: not counted
	h0, g0 := heapInuse(), runtime.NumGoroutine()
	st0, err := m.ctl.stats(ctx, true)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		for _, s := range streams {
			if s != nil {
				s.close()
			}
		}
	}()
	var opened atomic.Int64
	err = m.parallel(n, 16, func(i int) error {
		err := m.chatOnce(sctx, &streams[i])
		if err == nil {
			opened.Add(1)
		}
		return err
	})
	m.v["opened"] = float64(opened.Load())
	if err != nil {
		// Say how far it got; a few hundred streams are too few to
		// weigh against a heap's noise.
		m.tolerate(fmt.Errorf("%d of %d streams echoed their message, then: %w", opened.Load(), n, err))
		return nil
	}
	err = waitFor(ctx, 30*time.Second, func() (bool, error) {
		st, err := m.ctl.stats(ctx, false)
		return st.Chatting-st0.Chatting >= int64(n), err
	})
	if err != nil {
		return fmt.Errorf("waiting for %d handlers on the server: %w", n, err)
	}
	h1, g1 := heapInuse(), runtime.NumGoroutine()
	st1, err := m.ctl.stats(ctx, true)
	if err != nil {
		return err
	}
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(n) }
	m.v["heap_cli_B"] = per(h1, h0)
	m.v["heap_srv_B"] = per(st1.HeapInuse, st0.HeapInuse)
	m.v["gor_cli"] = per(uint64(g1), uint64(g0))
	m.v["gor_srv"] = per(uint64(st1.Goroutines), uint64(st0.Goroutines))
	return nil
}

// chatOnce opens a bidirectional stream and has one message echoed on it
// within echoTimeout; it keeps the stream in *keep, or closes it if keep
// is nil.
func (m *meter) chatOnce(ctx context.Context, keep *chatStream) error {
	s, err := m.c.chat(ctx)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	if keep == nil {
		defer s.close()
	} else {
		*keep = s
	}
	tctx, cancel := context.WithTimeout(ctx, echoTimeout)
	defer cancel()
	if err := s.send(tctx, blob(smallSize)); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	if _, err = s.recv(tctx); err != nil {
		return fmt.Errorf("no echo: %w", err)
	}
	return nil
}

// echoTimeout bounds a bidirectional stream's echo.
const echoTimeout = 10 * time.Second

// parallel runs f(0) … f(n-1) on workers goroutines and returns the first
// error.
func (m *meter) parallel(n, workers int, f func(i int) error) error {
	var next atomic.Int64
	var errOnce sync.Once
	var first error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					errOnce.Do(func() { first = err })
					next.Store(int64(n))
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// idBlock returns the first of 16M stream ids no other cell uses.
func idBlock() int64 {
	return (rand.Int64N(1<<30) + 1) << 24 // room for 16M ids per block
}

// slow: stream B's throughput alone and beside stream A, which never
// reads (alone first on even reps, beside first on odd ones, so that a
// connection's windows growing over time favour neither); then
// m.spec.Stalled streams that never read, and what they hold. All 16 KiB
// messages.
func (m *meter) slow(ctx context.Context) error {
	parts := []func(context.Context) error{m.slowAlone, m.slowBeside}
	if m.spec.Rep%2 == 1 {
		slices.Reverse(parts)
	}
	for _, p := range parts {
		if err := p(ctx); err != nil {
			return err
		}
	}
	m.v["ratio"] = m.v["beside_Bs"] / m.v["solo_Bs"]
	return m.stalled(ctx, slowSize)
}

const slowSize = 16 << 10

func (m *meter) slowAlone(ctx context.Context) error {
	w, err := m.rate(ctx, watchArgs{Size: slowSize})
	if err != nil {
		return fmt.Errorf("B alone: %w", err)
	}
	m.v["solo_Bs"] = float64(w.bytes) / w.elapsed.Seconds()
	return nil
}

func (m *meter) slowBeside(ctx context.Context) error {
	idA := idBlock()
	actx, cancelA := context.WithCancel(ctx)
	defer cancelA()
	a, err := m.c.watch(actx, watchArgs{ID: idA, Size: slowSize})
	if err != nil {
		return err
	}
	defer a.close()
	held, err := m.settled(ctx, idA, idA+1)
	if err != nil {
		return fmt.Errorf("A's sends: %w", err)
	}
	m.v["a_held_B"] = float64(held)
	w, err := m.rate(ctx, watchArgs{Size: slowSize})
	if err != nil {
		return fmt.Errorf("B beside A: %w", err)
	}
	m.v["beside_Bs"] = float64(w.bytes) / w.elapsed.Seconds()
	return nil
}

// stalled opens m.spec.Stalled streams that never read, on a connection of
// their own (so that no window grown by the streams before counts), waits
// until their handlers can send no more, and records what they hold. It
// stops early, and says so, if the client's heap passes heapCap.
func (m *meter) stalled(ctx context.Context, size int) error {
	n := m.spec.Stalled
	if n == 0 {
		return nil
	}
	c, err := m.dial()
	if err != nil {
		return err
	}
	defer c.close()
	base := idBlock()
	streams := make([]recvStream, n)
	h0 := heapInuse()
	sctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		for _, s := range streams {
			if s != nil {
				s.close()
			}
		}
	}()
	err = m.parallel(n, 16, func(i int) error {
		var err error
		streams[i], err = c.watch(sctx, watchArgs{ID: base + int64(i), Size: size})
		return err
	})
	if err != nil {
		return err
	}
	held, err := m.settled(ctx, base, base+int64(n))
	m.v["many_capped"] = 0
	if errors.Is(err, errHeapCap) {
		m.v["many_capped"] = 1
	} else if err != nil {
		return fmt.Errorf("%d stalled streams: %w", n, err)
	}
	m.v["many_held_B"] = float64(held)
	m.v["many_heap_cli_B"] = float64(heapInuse()) - float64(h0)
	return nil
}

// heapCap bounds the client's heap while streams stall: a system whose
// windows are unbounded would otherwise take the machine's memory.
const heapCap = 2 << 30

var errHeapCap = errors.New("the client's heap passed 2 GiB")

// settled waits until the handlers of the streams with ids in [from, to)
// have sent something and then nothing more for 300 ms, and returns the
// bytes their sends accepted. It returns errHeapCap if the client's heap
// passes heapCap meanwhile.
func (m *meter) settled(ctx context.Context, from, to int64) (int64, error) {
	var last int64 = -1
	var since time.Time
	heap := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	err := waitFor(ctx, 20*time.Second, func() (bool, error) {
		n, err := m.ctl.sent(ctx, from, to)
		if err != nil || n == 0 {
			return false, err
		}
		if metrics.Read(heap); heap[0].Value.Uint64() > heapCap {
			last = n
			return false, errHeapCap
		}
		if n != last {
			last, since = n, time.Now()
			return false, nil
		}
		return time.Since(since) >= 300*time.Millisecond, nil
	})
	return last, err
}

// probe makes a unary call every millisecond (a call that takes longer
// delays the next) and returns their latencies after the warm-up.
func (m *meter) probe(ctx context.Context) (*hist.Hist, error) {
	h := new(hist.Hist)
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	from := time.Now().Add(m.spec.Warmup)
	until := from.Add(m.spec.Duration)
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
		t0 := time.Now()
		if !t0.Before(until) {
			return h, nil
		}
		if err := m.c.get(ctx, watchArgs{Size: smallSize}); err != nil {
			return nil, err
		}
		if t0.After(from) {
			h.Record(time.Since(t0))
		}
	}
}

// bulk: unary latency alone, then beside a 16 KiB server stream read as
// fast as it comes, on the same connection.
func (m *meter) bulk(ctx context.Context) error {
	quiet, err := m.probe(ctx)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := m.c.watch(sctx, watchArgs{Size: 16 << 10})
	if err != nil {
		return err
	}
	r := startReader(sctx, s)
	defer func() {
		cancel()
		s.close()
		<-r.done
	}()
	t0, b0 := time.Now(), r.bytes.Load()
	busy, err := m.probe(ctx)
	if err != nil {
		return err
	}
	if err := r.failed(); err != nil {
		return err
	}
	m.v["bulk_Bs"] = float64(r.bytes.Load()-b0) / time.Since(t0).Seconds()
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	m.v["p50_quiet_us"], m.v["p99_quiet_us"] = us(quiet.Quantile(0.5)), us(quiet.Quantile(0.99))
	m.v["p50_bulk_us"], m.v["p99_bulk_us"] = us(busy.Quantile(0.5)), us(busy.Quantile(0.99))
	m.v["rise_us"] = m.v["p99_bulk_us"] - m.v["p99_quiet_us"]
	return nil
}

// cancelWarmup streams are canceled before the measured ones.
const cancelWarmup = 50

// cancel: one stream at a time, the handler holding it open after its one
// message; the client cancels the stream's ctx, and the server records
// when the handler's ctx ended. Both processes read the wall clock of the
// same machine (CLOCK_REALTIME), so the difference is the latency.
func (m *meter) cancel(ctx context.Context) error {
	n := m.spec.Cancels + cancelWarmup
	base := idBlock()
	at := make([]int64, n)
	for i := range n {
		sctx, cancel := context.WithCancel(ctx)
		s, err := m.c.watch(sctx, watchArgs{ID: base + int64(i), Size: smallSize, Count: 1, Hold: true})
		if err == nil {
			_, err = s.recv(sctx) // the handler is running
		}
		at[i] = time.Now().UnixNano()
		cancel()
		if s != nil {
			s.close()
		}
		if err != nil {
			return err
		}
	}
	seen := map[int64]int64{}
	err := waitFor(ctx, 5*time.Second, func() (bool, error) {
		got, err := m.ctl.cancels(ctx, base, base+int64(n))
		for id, t := range got {
			seen[id] = t
		}
		return len(seen) == n, err
	})
	if err != nil && !errors.Is(err, errTimeout) {
		return err
	}
	h := new(hist.Hist)
	var worst time.Duration
	for i := cancelWarmup; i < n; i++ {
		t, ok := seen[base+int64(i)]
		if !ok {
			continue
		}
		d := time.Duration(t - at[i])
		h.Record(d)
		worst = max(worst, d)
	}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	m.v["p50_us"], m.v["p99_us"], m.v["max_us"] = us(h.Quantile(0.5)), us(h.Quantile(0.99)), us(worst)
	m.v["unseen"] = float64(m.spec.Cancels) - float64(h.Count())
	return nil
}

// drop: m.spec.Drop server streams of one message each, opened with a
// context that never ends and dropped: no Recv to the end, no Close. Then
// the goroutines left after GC and a bounded wait for cleanups.
func (m *meter) drop(ctx context.Context) error {
	if err := m.c.get(ctx, watchArgs{Size: smallSize}); err != nil {
		return err
	}
	runtime.GC()
	g0 := runtime.NumGoroutine()
	m.v["errors"] = 0
	var failed atomic.Int64
	err := m.parallel(m.spec.Drop, 8, func(int) error {
		_, err := m.c.watch(context.Background(), watchArgs{Size: smallSize, Count: 1})
		if err != nil {
			m.tolerate(err)
			if failed.Add(1) > maxErrors {
				return fmt.Errorf("%d opens failed; the first: %s", failed.Load(), m.note)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	m.v["peak_gor"] = float64(runtime.NumGoroutine() - g0)
	t0 := time.Now()
	left := 0
	err = waitFor(ctx, 3*time.Second, func() (bool, error) {
		runtime.GC()
		left = runtime.NumGoroutine() - g0
		return left <= 0, nil
	})
	if err != nil && !errors.Is(err, errTimeout) {
		return err
	}
	m.v["left"] = float64(max(left, 0))
	m.v["settle_ms"] = float64(time.Since(t0).Milliseconds())
	st, err := m.ctl.stats(ctx, false)
	m.v["srv_watching"] = float64(st.Watching)
	return err
}

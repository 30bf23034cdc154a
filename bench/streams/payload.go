package main

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// watchArgs asks a server stream for Count messages of Size bytes (Count 0:
// until the stream ends). With Hold, the handler then waits for its ctx to
// end and records when it saw that under ID. A non-zero ID also counts the
// bytes the handler's sends have accepted, for the slow-consumer cell.
type watchArgs struct {
	ID    int64
	Size  int
	Count int
	Hold  bool
}

// blob returns size bytes of random data, the same slice for every caller
// asking for that size: a handler sends it again and again.
func blob(size int) []byte {
	if b, ok := blobs.Load(size); ok {
		return b.([]byte)
	}
	b := make([]byte, size)
	rng := rand.New(rand.NewPCG(uint64(size), 1))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	v, _ := blobs.LoadOrStore(size, b)
	return v.([]byte)
}

var blobs sync.Map // size → []byte

// The server's own record of its streams, read over the control listener
// (server.go), outside the systems under test.
var (
	watching atomic.Int64 // server-stream handlers running
	chatting atomic.Int64 // bidirectional handlers running

	sentMu sync.Mutex
	sent   = map[int64]*atomic.Int64{} // ID → bytes the handler's sends accepted

	cancelMu sync.Mutex
	canceled = map[int64]int64{} // ID → UnixNano when the handler saw its ctx end
)

func sentCounter(id int64) *atomic.Int64 {
	if id == 0 {
		return nil
	}
	sentMu.Lock()
	defer sentMu.Unlock()
	c := sent[id]
	if c == nil {
		c = new(atomic.Int64)
		sent[id] = c
	}
	return c
}

// sentBetween sums the bytes sent on the streams with ids in [from, to).
func sentBetween(from, to int64) int64 {
	sentMu.Lock()
	defer sentMu.Unlock()
	var n int64
	for id, c := range sent {
		if id >= from && id < to {
			n += c.Load()
		}
	}
	return n
}

// takeCancels returns and forgets the cancel times recorded for ids in
// [from, to).
func takeCancels(from, to int64) map[int64]int64 {
	cancelMu.Lock()
	defer cancelMu.Unlock()
	out := map[int64]int64{}
	for id, t := range canceled {
		if id >= from && id < to {
			out[id] = t
			delete(canceled, id)
		}
	}
	return out
}

// serveWatch is every system's server-stream handler: send (which sends
// blob(a.Size) on the system's stream) a.Count times, or until it fails,
// then hold the stream open until ctx ends if a.Hold.
func serveWatch(ctx context.Context, a watchArgs, send func() error) error {
	watching.Add(1)
	defer watching.Add(-1)
	n := sentCounter(a.ID)
	for i := 0; a.Count == 0 || i < a.Count; i++ {
		if err := send(); err != nil {
			return err
		}
		if n != nil {
			n.Add(int64(a.Size))
		}
	}
	if a.Hold {
		<-ctx.Done()
		t := time.Now().UnixNano()
		cancelMu.Lock()
		canceled[a.ID] = t
		cancelMu.Unlock()
	}
	return nil
}

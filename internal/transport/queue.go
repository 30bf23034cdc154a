package transport

import (
	"net"
	"sync"
)

// Sizes of the pieces a link's queue is made of: a queue starts with a
// small chunk when its first frame fits one (a lone call's, a ping), and
// goes on in large ones.
const (
	chunkSize      = 128 << 10
	smallChunkSize = 1 << 10
)

// chunk is one piece of a queue; chunks are pooled, so that a connection
// with nothing to send holds none, and one with much to send grows its
// queue without copying what it holds.
type (
	chunk      = [chunkSize]byte
	smallChunk = [smallChunkSize]byte
)

var (
	chunkPool      = sync.Pool{New: func() any { return new(chunk) }}
	smallChunkPool = sync.Pool{New: func() any { return new(smallChunk) }}
)

// frameQueue is the bytes a link has to write, in chunks: each element
// of bufs is a chunk's first bytes. Its zero value is empty. It is not
// safe for concurrent use.
type frameQueue struct {
	bufs net.Buffers
	n    int // the bytes in bufs
	// free holds large chunks written and kept for the next frames, up
	// to maxFreeChunks: a busy link reuses its own chunks, as a pool
	// emptied by every garbage collection would not let it; release
	// gives them back once the link is idle.
	free []*chunk
}

// maxFreeChunks bounds the chunks a queue keeps for reuse: 4 MiB.
const maxFreeChunks = 32

// newChunk returns a large chunk: a kept one, or one from the pool.
func (q *frameQueue) newChunk() *chunk {
	if k := len(q.free) - 1; k >= 0 {
		c := q.free[k]
		q.free[k] = nil
		q.free = q.free[:k]
		return c
	}
	return chunkPool.Get().(*chunk)
}

// recycle takes back the chunks of bufs, as take returned them, once
// written: large ones are kept for reuse, up to maxFreeChunks; the rest
// go back to their pools.
func (q *frameQueue) recycle(bufs net.Buffers) {
	for i, b := range bufs {
		if cap(b) == chunkSize && len(q.free) < maxFreeChunks {
			q.free = append(q.free, (*chunk)(b[:chunkSize]))
		} else {
			putChunk(b)
		}
		bufs[i] = nil
	}
}

// putChunk gives the chunk that b begins back to its pool.
func putChunk(b []byte) {
	if cap(b) == smallChunkSize {
		smallChunkPool.Put((*smallChunk)(b[:smallChunkSize]))
	} else {
		chunkPool.Put((*chunk)(b[:chunkSize]))
	}
}

// release gives the kept chunks back to the pool: the link is idle.
func (q *frameQueue) release() {
	for i, c := range q.free {
		chunkPool.Put(c)
		q.free[i] = nil
	}
	q.free = nil
}

// Len is the bytes queued.
func (q *frameQueue) Len() int { return q.n }

// Chunks is how many chunks the queue holds.
func (q *frameQueue) Chunks() int { return len(q.bufs) }

// push adds b at the end.
func (q *frameQueue) push(b []byte) {
	q.n += len(b)
	if k := len(q.bufs) - 1; k >= 0 {
		last := q.bufs[k]
		m := copy(last[len(last):cap(last)], b)
		q.bufs[k] = last[:len(last)+m]
		b = b[m:]
	}
	for len(b) > 0 {
		var c []byte
		if len(q.bufs) == 0 && len(b) <= smallChunkSize && len(q.free) == 0 {
			c = smallChunkPool.Get().(*smallChunk)[:]
		} else {
			c = q.newChunk()[:]
		}
		m := copy(c, b)
		q.bufs = append(q.bufs, c[:m])
		b = b[m:]
	}
}

// segmentOf returns b in a queue of its own, made of large chunks: a
// large frame is copied so before its link's lock is taken, which then
// only appends the chunks (put).
func segmentOf(b []byte) frameQueue {
	var seg frameQueue // no free chunks, and b is larger than a small one
	seg.push(b)
	return seg
}

// put adds b at the end: by seg's chunks if seg holds it (segmentOf),
// else by copying it.
func (q *frameQueue) put(b []byte, seg *frameQueue) {
	if seg.n == 0 {
		q.push(b)
		return
	}
	q.n += seg.n
	q.bufs = append(q.bufs, seg.bufs...)
	seg.bufs, seg.n = nil, 0
}

// pushFront adds b at the start, ahead of what is queued.
func (q *frameQueue) pushFront(b []byte) {
	front := frameQueue{free: q.free}
	front.push(b)
	front.n += q.n
	front.bufs = append(front.bufs, q.bufs...)
	clear(q.bufs)
	*q = front
}

// take returns what is queued, leaving the queue empty; the caller gives
// the chunks back with recycle once written. spare is an array for
// the queue's next chunks.
func (q *frameQueue) take(spare net.Buffers) net.Buffers {
	bufs := q.bufs
	q.bufs, q.n = spare[:0], 0
	return bufs
}

// freeChunks gives the chunks of bufs, as take returned them, back to
// their pools.
func freeChunks(bufs net.Buffers) {
	for i, b := range bufs {
		putChunk(b)
		bufs[i] = nil
	}
}

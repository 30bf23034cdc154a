package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Reader reads frames from a connection. Frames that fit its buffer are
// returned without copying; larger ones are read in chunks as their bytes
// actually arrive, and joined once whole, so a peer that announces a huge
// frame and sends part of it holds no more than it sent, plus a chunk.
//
// A Reader waits for its peer with a small buffer of its own, and takes
// its large one from a pool only while reads bring more than the small
// one holds; it gives it back once it has returned every byte of a burst
// of reads that brought less. So a connection that is idle, or that
// carries one small frame at a time, holds smallSize bytes, not bufSize.
type Reader struct {
	src     io.Reader
	buf     []byte // small[:] or large: buf[r:w] is read, not yet returned
	r, w    int
	large   []byte // the large buffer while taken, of bufSize bytes
	bufSize int
	lastN   int // what the last read brought
	burst   int // what the reads brought since the buffer was last drained
	max     int
	discard int    // bytes of the previous frame still in buf
	big     []byte // buffer for frames larger than the large buffer
	budget  Budget // bytes of frames in progress, shared with other readers; nil: unbounded
	held    int    // bytes taken from budget for the last large frame
	small   [smallSize]byte
}

// smallSize is the size of the buffer a Reader waits with.
const smallSize = 1 << 10

// PooledSize is the size of large buffers that Readers share through a
// pool; those of another size are made as needed.
const PooledSize = 64 << 10

var largePool = sync.Pool{New: func() any { return new([PooledSize]byte) }}

// Budget bounds the bytes that several Readers hold for large frames,
// from their first chunk until the next call to Next (or Release). Take
// reports whether n more bytes may be held.
type Budget interface {
	Take(n int) bool
	Give(n int)
}

// ErrBudget is returned by Next when a large frame in progress would take
// the Reader's Budget past its bound.
var ErrBudget = errors.New("wire: the bytes held for frames in progress are at their limit")

// SetBudget makes r take the bytes of its large frames from b.
func (r *Reader) SetBudget(b Budget) { r.budget = b }

// Release gives back what the last large frame took from the budget, and
// the large buffer. Next does the first itself; call Release when done
// with the Reader.
func (r *Reader) Release() {
	r.giveBudget()
	r.r, r.w, r.discard = 0, 0, 0
	r.dropLarge()
}

func (r *Reader) giveBudget() {
	if r.held > 0 {
		r.budget.Give(r.held)
		r.held = 0
	}
}

// NewReader returns a Reader that accepts frames of at most max bytes
// after the length prefix, reading through a buffer of bufSize bytes.
func NewReader(src io.Reader, bufSize, max int) *Reader {
	r := &Reader{src: src, bufSize: bufSize, max: max}
	r.buf = r.small[:min(smallSize, bufSize)]
	return r
}

// Read reads what is buffered, or else from the connection: for the
// preface before the first frame.
func (r *Reader) Read(p []byte) (int, error) {
	if r.w > r.r {
		n := copy(p, r.buf[r.r:r.w])
		r.r += n
		return n, nil
	}
	return r.src.Read(p)
}

// More reports whether bytes past the last frame returned are buffered.
func (r *Reader) More() bool { return r.w-r.r > r.discard }

// Buffered reports whether the next frame is buffered whole, so that
// Next returns it without reading from the connection.
func (r *Reader) Buffered() bool {
	start := r.r + r.discard
	if r.w-start < lenSize {
		return false
	}
	n := int(binary.BigEndian.Uint32(r.buf[start:]))
	return lenSize+n <= r.w-start
}

// size is the largest frame, with its length, that the buffer holds.
func (r *Reader) size() int { return max(r.bufSize, len(r.buf)) }

// dropLarge gives the large buffer back, once nothing in it is unread.
func (r *Reader) dropLarge() {
	if r.large == nil || r.w > r.r {
		return
	}
	if len(r.large) == PooledSize {
		largePool.Put((*[PooledSize]byte)(r.large))
	}
	r.large, r.big = nil, nil
	r.buf = r.small[:min(smallSize, r.bufSize)]
	r.r, r.w = 0, 0
}

// fill reads until n bytes (at most size()) are buffered.
func (r *Reader) fill(n int) error {
	for r.w-r.r < n {
		if r.r+n > len(r.buf) || r.w == len(r.buf) {
			r.makeRoom(n)
		}
		m, err := r.src.Read(r.buf[r.w:])
		r.w += m
		r.lastN = m
		r.burst += m
		if err != nil && r.w-r.r < n {
			return err
		}
	}
	return nil
}

// makeRoom moves what is unread to the front of a buffer with room for n
// bytes and more: the small one if n fits it and the last read did,
// else the large one.
func (r *Reader) makeRoom(n int) {
	unread := r.buf[r.r:r.w]
	dst := r.small[:min(smallSize, r.bufSize)]
	if n > len(dst) || r.lastN >= len(dst) || r.large != nil {
		if r.large == nil {
			if r.bufSize == PooledSize {
				r.large = largePool.Get().(*[PooledSize]byte)[:]
			} else {
				r.large = make([]byte, r.bufSize)
			}
		}
		dst = r.large
	}
	r.w = copy(dst, unread)
	r.r = 0
	r.buf = dst
}

// Next reads the next frame. The frame's slices are valid until the next
// call. An error other than io.EOF means the stream is broken: wrong
// framing, a frame over the limit, or a read failure.
func (r *Reader) Next() (Frame, error) {
	r.giveBudget()
	r.r += r.discard
	r.discard = 0
	if r.r == r.w {
		// About to wait for the peer: with the small buffer, unless the
		// reads since the buffer last drained brought more than it holds
		// (the connection is busy). An idle connection's next read, a
		// ping's, is small, and gives the large buffer back.
		r.r, r.w = 0, 0
		if r.burst < smallSize {
			r.dropLarge()
			r.big = nil
		}
		r.burst = 0
	}
	if err := r.fill(lenSize); err != nil {
		if err == io.EOF && r.w > r.r {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	n := int(binary.BigEndian.Uint32(r.buf[r.r:]))
	if n > r.max {
		return Frame{}, fmt.Errorf("%w: %d bytes announced, limit %d", ErrFrameTooLarge, n, r.max)
	}
	if n < fixedSize {
		return Frame{}, fmt.Errorf("%w: %d-byte frame is shorter than the %d-byte fixed header", ErrMalformed, n, fixedSize)
	}
	if lenSize+n <= r.size() {
		if err := r.fill(lenSize + n); err != nil {
			return Frame{}, unexpected(err)
		}
		p := r.buf[r.r+lenSize : r.r+lenSize+n]
		r.discard = lenSize + n
		return Parse(p)
	}
	r.r += lenSize
	p, err := r.readBig(n)
	if err != nil {
		return Frame{}, unexpected(err)
	}
	return Parse(p)
}

// readFull reads len(p) bytes: what is buffered, then from the
// connection, straight into p.
func (r *Reader) readFull(p []byte) (int, error) {
	n := copy(p, r.buf[r.r:r.w])
	r.r += n
	if n == len(p) {
		return n, nil
	}
	m, err := io.ReadFull(r.src, p[n:])
	return n + m, err
}

// bigChunk is the size of the chunks a large frame is read in.
const bigChunk = 64 << 10

// readBig reads n bytes: into r.big if it is large enough (kept from an
// earlier frame), else in chunks allocated as the bytes arrive, joined
// once all have. Each chunk is taken from the budget first.
func (r *Reader) readBig(n int) ([]byte, error) {
	if cap(r.big) >= n {
		buf := r.big[:n]
		for got := 0; got < n; {
			m := min(bigChunk, n-got)
			if err := r.take(m); err != nil {
				return nil, err
			}
			k, err := r.readFull(buf[got : got+m])
			got += k
			if err != nil {
				return nil, err
			}
		}
		return buf, nil
	}
	var chunks [][]byte
	for got := 0; got < n; {
		m := min(bigChunk, n-got)
		if err := r.take(m); err != nil {
			return nil, err
		}
		c := make([]byte, m)
		k, err := r.readFull(c)
		if err != nil {
			return nil, err
		}
		chunks = append(chunks, c)
		got += k
	}
	buf := make([]byte, 0, n)
	for _, c := range chunks {
		buf = append(buf, c...)
	}
	if n <= 1<<20 {
		r.big = buf[:0] // keep moderate buffers for the next big frame
	}
	return buf, nil
}

// take takes n bytes from the budget for the frame being read.
func (r *Reader) take(n int) error {
	if r.budget == nil {
		return nil
	}
	if !r.budget.Take(n) {
		return ErrBudget
	}
	r.held += n
	return nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Reader reads frames from a connection. Frames that fit its buffer are
// returned without copying; larger ones are read in chunks as their bytes
// actually arrive, and joined once whole, so a peer that announces a huge
// frame and sends part of it holds no more than it sent, plus a chunk.
type Reader struct {
	br      *bufio.Reader
	max     int
	discard int    // bytes of the previous frame still in br
	big     []byte // buffer for frames larger than br's buffer
	budget  Budget // bytes of frames in progress, shared with other readers; nil: unbounded
	held    int    // bytes taken from budget for the last large frame
}

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

// Release gives back what the last large frame took from the budget. Next
// does so itself; call Release when done with the Reader.
func (r *Reader) Release() {
	if r.held > 0 {
		r.budget.Give(r.held)
		r.held = 0
	}
}

// NewReader returns a Reader that accepts frames of at most max bytes
// after the length prefix, reading through a buffer of bufSize bytes.
func NewReader(r io.Reader, bufSize, max int) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, bufSize), max: max}
}

// Buffered returns the underlying buffered reader, for reading the
// preface before the first frame.
func (r *Reader) Buffered() *bufio.Reader { return r.br }

// More reports whether bytes past the last frame returned are buffered.
func (r *Reader) More() bool { return r.br.Buffered() > r.discard }

// Next reads the next frame. The frame's slices are valid until the next
// call. An error other than io.EOF means the stream is broken: wrong
// framing, a frame over the limit, or a read failure.
func (r *Reader) Next() (Frame, error) {
	r.Release()
	if r.discard > 0 {
		_, _ = r.br.Discard(r.discard)
		r.discard = 0
	}
	lp, err := r.br.Peek(lenSize)
	if err != nil {
		if err == io.EOF && r.br.Buffered() > 0 {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	n := int(binary.BigEndian.Uint32(lp))
	if n > r.max {
		return Frame{}, fmt.Errorf("%w: %d bytes announced, limit %d", ErrFrameTooLarge, n, r.max)
	}
	if n < fixedSize {
		return Frame{}, fmt.Errorf("%w: %d-byte frame is shorter than the %d-byte fixed header", ErrMalformed, n, fixedSize)
	}
	if lenSize+n <= r.br.Size() {
		p, err := r.br.Peek(lenSize + n)
		if err != nil {
			return Frame{}, unexpected(err)
		}
		r.discard = lenSize + n
		return Parse(p[lenSize:])
	}
	_, _ = r.br.Discard(lenSize)
	p, err := r.readBig(n)
	if err != nil {
		return Frame{}, unexpected(err)
	}
	return Parse(p)
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
			k, err := io.ReadFull(r.br, buf[got:got+m])
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
		k, err := io.ReadFull(r.br, c)
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

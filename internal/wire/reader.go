package wire

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// Reader reads frames from a connection. Frames that fit its buffer are
// returned without copying; larger ones are read into a buffer that grows
// only as their bytes actually arrive, so a peer that announces a huge
// frame and sends nothing costs no huge allocation.
type Reader struct {
	br      *bufio.Reader
	max     int
	discard int    // bytes of the previous frame still in br
	big     []byte // buffer for frames larger than br's buffer
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

// readBig reads n bytes, growing r.big as data arrives.
func (r *Reader) readBig(n int) ([]byte, error) {
	const step = 64 << 10
	buf := r.big[:0]
	for len(buf) < n {
		want := min(n, max(2*len(buf), step))
		if cap(buf) < want {
			grown := make([]byte, len(buf), want)
			copy(grown, buf)
			buf = grown
		}
		m, err := io.ReadFull(r.br, buf[len(buf):want])
		buf = buf[:len(buf)+m]
		if err != nil {
			return nil, err
		}
	}
	if cap(buf) <= 1<<20 {
		r.big = buf[:0] // keep moderate buffers for the next big frame
	} else {
		r.big = nil
	}
	return buf, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

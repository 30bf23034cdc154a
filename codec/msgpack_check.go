package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// maxMsgpackDepth bounds how deeply msgpack arrays and maps may nest. The
// decoder recurses once per level, so without a bound a small message of
// nested one-element arrays could exhaust the goroutine stack.
const maxMsgpackDepth = 1000

var (
	errMsgpackTruncated = errors.New("input ends in the middle of a value")
	errMsgpackEmpty     = errors.New("input is empty; send an encoded value, even nil (0xc0)")
	errMsgpackDepth     = fmt.Errorf("arrays and maps nest more than %d levels deep; flatten the value", maxMsgpackDepth)
)

// checkMsgpack reports whether data holds exactly one well-formed msgpack
// value whose declared lengths all fit in data and whose nesting depth is at
// most maxMsgpackDepth. It runs before decoding, so that a few hostile bytes
// declaring a huge array, map, string or binary cannot make the decoder
// preallocate gigabytes: after this check every declared length is bounded
// by len(data). stack is scratch space, returned for reuse.
func checkMsgpack(data []byte, stack []uint64) ([]uint64, error) {
	if len(data) == 0 {
		return stack, errMsgpackEmpty
	}
	return scanMsgpack(data, stack, false, nil)
}

// checkAndMarkMsgpack is checkMsgpack that also fills marks, a bitmap over
// data, with the bit of every byte msgpack may read as a code: each
// value's first byte, one-byte lengths and integers, extension types, and
// the same inside an extension's data when that data is itself a
// well-formed sequence of values filling it, as extensions holding encoded
// values are (then every length read there has been checked too). The
// bitmap is for msgpackReader.
func checkAndMarkMsgpack(data []byte, stack, marks []uint64) ([]uint64, []uint64, error) {
	if len(data) == 0 {
		return stack, marks, errMsgpackEmpty
	}
	n := (len(data) + 63) / 64
	if cap(marks) < n {
		marks = make([]uint64, n)
	}
	marks = marks[:n]
	clear(marks)
	stack, err := scanMsgpack(data, stack, false, &codeMarks{bits: marks})
	return stack, marks, err
}

// codeMarks is where scanMsgpack marks the code bytes it finds: bit base+i
// of bits for data[i]. depth counts the extensions it is inside.
type codeMarks struct {
	bits  []uint64
	base  int
	depth int
}

func (m *codeMarks) set(i int) {
	i += m.base
	m.bits[i/64] |= 1 << (i % 64)
}

// maxExtMarkDepth bounds how deep in nested extensions codes are marked.
const maxExtMarkDepth = 8

// scanMsgpack checks data as checkMsgpack does: one value, or with seq a
// sequence of values (none included) that ends with data. With m, it marks
// the codes it finds, as checkAndMarkMsgpack says.
func scanMsgpack(data []byte, stack []uint64, seq bool, m *codeMarks) ([]uint64, error) {
	mode := scanWhole
	if seq {
		mode = scanSequence
	}
	_, stack, err := scanFrom(data, 0, stack, mode, maxMsgpackDepth, m)
	return stack, err
}

// skipMsgpackValue checks the value at data[pos:] as checkMsgpack checks a
// whole input, with maxDepth levels of nesting left, and returns the
// position after it. A decoding plan skips a value that names no field
// with it.
func skipMsgpackValue(data []byte, pos int, stack []uint64, maxDepth int) (int, []uint64, error) {
	return scanFrom(data, pos, stack, scanFirst, maxDepth, nil)
}

// What scanFrom scans.
const (
	scanWhole    = iota // one value that ends with the data
	scanSequence        // values, none included, that end with the data
	scanFirst           // one value, then stop
)

// scanFrom scans from data[pos:] as mode says, nesting at most maxDepth
// containers with values, and returns where it stopped.
func scanFrom(data []byte, pos int, stack []uint64, mode, maxDepth int, m *codeMarks) (int, []uint64, error) {
	stack = stack[:0]
	for {
		if pos >= len(data) {
			if mode == scanSequence && len(stack) == 0 {
				return pos, stack, nil
			}
			return pos, stack, errMsgpackTruncated
		}
		c := data[pos]
		if m != nil {
			m.set(pos)
		}
		pos++
		var skip, elems uint64 // payload bytes; child values of a container
		container := false
		switch {
		case c <= 0x7f || c >= 0xe0: // positive and negative fixint
		case c <= 0x8f: // fixmap
			elems, container = 2*uint64(c&0x0f), true
		case c <= 0x9f: // fixarray
			elems, container = uint64(c&0x0f), true
		case c <= 0xbf: // fixstr
			skip = uint64(c & 0x1f)
		default:
			hdr := pos
			var err error
			skip, elems, container, pos, err = msgpackHeader(c, data, pos)
			if err != nil {
				return pos, stack, err
			}
			if m != nil && uint64(len(data)-pos) >= skip {
				m.markHeader(data, c, hdr, pos+int(skip))
			}
		}
		rem := uint64(len(data) - pos)
		if skip > rem {
			return pos, stack, errMsgpackTruncated
		}
		pos += int(skip)
		if container && elems > 0 {
			// Every element takes at least one byte.
			if elems > rem {
				return pos, stack, fmt.Errorf("a container declares %d values but only %d bytes remain", elems, rem)
			}
			if len(stack) >= maxDepth {
				return pos, stack, errMsgpackDepth
			}
			stack = append(stack, elems)
			continue
		}
		// One value is complete; close every container it completes.
		for {
			if len(stack) == 0 {
				switch {
				case mode == scanFirst, pos == len(data):
					return pos, stack, nil
				case mode == scanWhole:
					return pos, stack, fmt.Errorf("%d unexpected bytes follow the value", len(data)-pos)
				}
				break // the next value of the sequence
			}
			top := len(stack) - 1
			if stack[top]--; stack[top] > 0 {
				break
			}
			stack = stack[:top]
		}
	}
}

// msgpackHeader decodes the header of a value whose first byte c is in
// 0xc0..0xdf and which continues at data[pos:]. It returns the payload
// size to skip, or for an array or map the number of child values, and the
// position after the header.
func msgpackHeader(c byte, data []byte, pos int) (skip, elems uint64, container bool, next int, err error) {
	// size reads a big-endian length of w bytes.
	size := func(w int) uint64 {
		if len(data)-pos < w {
			err = errMsgpackTruncated
			return 0
		}
		b := data[pos : pos+w]
		pos += w
		switch w {
		case 1:
			return uint64(b[0])
		case 2:
			return uint64(binary.BigEndian.Uint16(b))
		}
		return uint64(binary.BigEndian.Uint32(b))
	}
	switch c {
	case 0xc0, 0xc2, 0xc3: // nil, false, true
	case 0xc4, 0xd9: // bin8, str8
		skip = size(1)
	case 0xc5, 0xda: // bin16, str16
		skip = size(2)
	case 0xc6, 0xdb: // bin32, str32
		skip = size(4)
	case 0xc7: // ext8: length, type, data
		skip = size(1) + 1
	case 0xc8: // ext16
		skip = size(2) + 1
	case 0xc9: // ext32
		skip = size(4) + 1
	case 0xca, 0xce, 0xd2: // float32, uint32, int32
		skip = 4
	case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
		skip = 8
	case 0xcc, 0xd0: // uint8, int8
		skip = 1
	case 0xcd, 0xd1: // uint16, int16
		skip = 2
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16: type, data
		skip = 1 + 1<<(c-0xd4)
	case 0xdc: // array16
		elems, container = size(2), true
	case 0xdd: // array32
		elems, container = size(4), true
	case 0xde: // map16
		elems, container = 2*size(2), true
	case 0xdf: // map32
		elems, container = 2*size(4), true
	default: // 0xc1 is reserved
		err = fmt.Errorf("invalid msgpack code 0x%02x", c)
	}
	return skip, elems, container, pos, err
}

// errMsgpackDesync is what msgpackReader answers when msgpack reads a type
// code where checkMsgpack found none.
var errMsgpackDesync = errors.New("the decoder read a value inside another value's bytes (an extension's data read as a map, say); the input is refused as malformed")

// msgpackReader is the reader the decoder reads from. It lets the decoder
// read a type code (ReadByte) only where checkMsgpack found one, or a
// one-byte length or extension type. msgpack v5 can otherwise lose its
// place: decoding into a map, it takes an extension whose data starts with
// a map header (or nil) for that map, and reads the rest of the
// extension's data as the next values, whose lengths checkMsgpack never
// checked. A fuzzer found fifteen bytes that so made it allocate 13 GB.
//
// The codes are marked (checkAndMarkMsgpack) before the library reads; a
// decoding plan, which never loses its place, reads with no codes marked
// until it hands a value to the library (msgpackDecoder.lib).
//
// It is a bytes.Reader of its own so that the decoding plan can read the
// bytes of a value in place (msgpack_fast.go), in step with the library,
// which reads it as an io.ByteScanner, without a buffer of its own.
type msgpackReader struct {
	data  []byte
	pos   int
	codes []uint64 // bit i: data[i] may be read as a code; empty: no check
}

// Reset makes the reader read b from its start.
func (r *msgpackReader) Reset(b []byte) { r.data, r.pos = b, 0 }

// Len is the number of bytes not yet read.
func (r *msgpackReader) Len() int { return len(r.data) - r.pos }

func (r *msgpackReader) Read(p []byte) (int, error) {
	if r.pos >= len(r.data) {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := copy(p, r.data[r.pos:])
	r.pos += n
	return n, nil
}

// ReadByte reads a code: only where checkMsgpack found one.
func (r *msgpackReader) ReadByte() (byte, error) {
	i := r.pos
	if i < len(r.codes)*64 && r.codes[i/64]&(1<<(i%64)) == 0 {
		return 0, errMsgpackDesync
	}
	if i >= len(r.data) {
		return 0, errMsgpackTruncated
	}
	r.pos++
	return r.data[i], nil
}

func (r *msgpackReader) UnreadByte() error {
	if r.pos <= 0 {
		return errors.New("msgpack reader: UnreadByte at the start of the input")
	}
	r.pos--
	return nil
}

// bigEndian reads the next n bytes (2, 4 or 8) as a big-endian unsigned
// integer, as the library reads the body of a number or a length.
func (r *msgpackReader) bigEndian(n int) (uint64, error) {
	b, err := r.next(n)
	switch {
	case err != nil:
		return 0, err
	case n == 2:
		return uint64(binary.BigEndian.Uint16(b)), nil
	case n == 4:
		return uint64(binary.BigEndian.Uint32(b)), nil
	}
	return binary.BigEndian.Uint64(b), nil
}

// next returns the next n bytes, in place, and moves past them.
func (r *msgpackReader) next(n int) ([]byte, error) {
	if n > r.Len() {
		return nil, errMsgpackTruncated
	}
	b := r.data[r.pos : r.pos+n]
	r.pos += n
	return b, nil
}

// markHeader marks what msgpack reads as a code in the header of the value
// whose code c is at hdr-1 and which ends at end: a one-byte length or
// integer, an extension's type, and the codes in an extension's data when
// it is a well-formed sequence of values.
func (m *codeMarks) markHeader(data []byte, c byte, hdr, end int) {
	switch c {
	case 0xcc, 0xd0, 0xd9, 0xc4, 0xc7: // one-byte integer or length
		m.set(hdr)
	}
	ds, ok := msgpackExtData(c, hdr)
	if !ok {
		return
	}
	m.set(ds - 1) // the extension's type
	ext := data[ds:end]
	if m.depth >= maxExtMarkDepth || len(ext) == 0 {
		return
	}
	if _, err := scanMsgpack(ext, nil, true, nil); err != nil {
		return
	}
	inner := codeMarks{bits: m.bits, base: m.base + ds, depth: m.depth + 1}
	_, _ = scanMsgpack(ext, nil, true, &inner)
}

// msgpackExtData returns where the data of an extension value starts,
// given its code c and hdr, the position just after c: after its length
// bytes and its type byte.
func msgpackExtData(c byte, hdr int) (int, bool) {
	switch c {
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext: type, data
		return hdr + 1, true
	case 0xc7: // ext8: length, type, data
		return hdr + 2, true
	case 0xc8:
		return hdr + 3, true
	case 0xc9:
		return hdr + 5, true
	}
	return 0, false
}

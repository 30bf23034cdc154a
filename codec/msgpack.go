package codec

import (
	"fmt"
	"reflect"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// maxPooledDecodeSize is the largest input after which a decoder goes back
// to the pool. The decoder keeps an internal buffer as large as the longest
// string it read; dropping it after big messages keeps the pool small.
const maxPooledDecodeSize = 64 << 10

// appendWriter is an io.Writer and io.ByteWriter that appends to b.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

func (w *appendWriter) WriteByte(c byte) error {
	w.b = append(w.b, c)
	return nil
}

// msgpackEncoder is a pooled encoder bound for life to its own writer.
type msgpackEncoder struct {
	w   appendWriter
	enc *msgpack.Encoder
}

// msgpackDecoder is a pooled decoder bound for life to its own reader.
type msgpackDecoder struct {
	r     msgpackReader
	dec   *msgpack.Decoder
	ready bool     // dec is set up for this input, and r's codes marked (lib)
	stack []uint64 // scratch for checkMsgpack and skipping
	// depth counts the arrays and maps with elements that a plan is
	// inside, bounded by maxMsgpackDepth as checkMsgpack bounds them.
	depth int
	// arena is where a plan copies the strings it decodes: one allocation
	// for many strings (see msgpackDecoder.str). strBytes counts the
	// bytes of the strings copied so far, strHint those of the last
	// message of the type.
	arena             []byte
	strBytes, strHint int
}

// lib returns the library's decoder, set up to read the input on from
// where r is, as msgpackUnmarshal configures it. A plan decodes most
// values itself, reading only checked lengths and never an extension, so
// it calls lib only for what it leaves to the library (skipping a value,
// a []string); only then are the codes of the input marked for r, which
// the library needs (see msgpackReader).
func (d *msgpackDecoder) lib() *msgpack.Decoder {
	if !d.ready {
		d.ready = true
		// Already checked whole: marking cannot fail.
		d.stack, d.r.codes, _ = checkAndMarkMsgpack(d.r.data, d.stack, d.r.codes)
		// Reset clears all options and any state a failed decode left
		// behind.
		d.dec.Reset(&d.r)
		d.dec.SetCustomStructTag("json")
		// Integers decoded into an interface are int64 (uint64 past its
		// range) and floats float64, whatever width they were sent in.
		d.dec.UseLooseInterfaceDecoding(true)
	}
	return d.dec
}

var msgpackEncoders = sync.Pool{New: func() any {
	e := new(msgpackEncoder)
	e.enc = msgpack.NewEncoder(&e.w)
	e.enc.SetCustomStructTag("json")
	e.enc.UseCompactInts(true) // 1-byte small ints; decoders read any width
	return e
}}

var msgpackDecoders = sync.Pool{New: func() any {
	d := new(msgpackDecoder)
	d.dec = msgpack.NewDecoder(&d.r)
	return d
}}

// msgpackMarshal appends the msgpack encoding of v to dst.
func msgpackMarshal(dst []byte, v any) ([]byte, error) {
	if m, ok := v.(msgpMarshaler); ok {
		return marshalMsgp(dst, m)
	}
	if enc := msgpackEncoderOf(v); enc != nil {
		return encodeWith(enc, dst, v), nil // plain structs: see msgpack_encode.go
	}
	out, err := libraryMarshal(dst, v)
	if err != nil {
		return dst, marshalError("msgpack", v, err)
	}
	return out, nil
}

// libraryMarshal appends the encoding of v by msgpack v5 itself to dst,
// through a pooled encoder.
func libraryMarshal(dst []byte, v any) ([]byte, error) {
	e := msgpackEncoders.Get().(*msgpackEncoder)
	e.w.b = dst
	err := e.enc.Encode(v)
	out := e.w.b
	e.w.b = nil
	msgpackEncoders.Put(e)
	return out, err
}

// msgpackUnmarshal decodes data into the pointer v. Every string and byte
// slice in v is a copy.
func msgpackUnmarshal(data []byte, v any) error {
	if rv := reflect.ValueOf(v); rv.Kind() != reflect.Pointer || rv.IsNil() {
		return ErrNilPointer
	}
	if u, ok := v.(msgpUnmarshaler); ok {
		return unmarshalMsgp(data, u)
	}
	d := msgpackDecoders.Get().(*msgpackDecoder)
	var err error
	if plan := msgpackPlanOf(v); plan != nil {
		// Plain structs: see msgpack_fast.go. The plan makes the checks
		// of checkMsgpack as it reads.
		err = plan.decodeAll(d, data, v)
	} else {
		if d.stack, err = checkMsgpack(data, d.stack); err != nil {
			msgpackDecoders.Put(d)
			return unmarshalError("msgpack", v, err)
		}
		d.r.Reset(data)
		d.r.codes, d.ready = d.r.codes[:0], false // no codes marked yet: see lib
		err = decodeMsgpack(d.lib(), v)
		if t := reflect.TypeOf(v).Elem(); err == nil && t.Kind() == reflect.Struct {
			err = checkStructKeys(t, data)
		}
	}
	d.r.Reset(nil)
	if err != nil {
		// A failed decode may leave the decoder mid-record; do not reuse it.
		return unmarshalError("msgpack", v, err)
	}
	if len(data) <= maxPooledDecodeSize {
		msgpackDecoders.Put(d)
	}
	return nil
}

// decodeMsgpack runs dec.Decode(v), turning a panic into an error.
//
// checkMsgpack already rejects every input that could exhaust memory or
// the stack, so this is a last resort for msgpack v5 bugs that depend on
// what v holds. The one known today: decoding into an interface field that
// already holds a non-pointer value calls reflect.Value.SetString (or
// similar) on an unaddressable value, which a map repeating a key
// triggers even with a zero v: {"Any": "a", "Any": "b"}.
func decodeMsgpack(dec *msgpack.Decoder, v any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("msgpack decoder panicked: %v", p)
		}
	}()
	return dec.Decode(v)
}

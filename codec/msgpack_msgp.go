package codec

import (
	"fmt"
	"reflect"
)

// This file holds the path for types that carry the methods tinylib/msgp
// generates. Such code is faster than any reflection, so kiev hands the
// value to it, without depending on msgp: the methods are found by their
// signatures.

// msgpMarshaler is the encoding method msgp generates
// (msgp.Marshaler).
type msgpMarshaler interface {
	MarshalMsg(b []byte) ([]byte, error)
}

// msgpUnmarshaler is the decoding method msgp generates
// (msgp.Unmarshaler). It returns the bytes left after the value.
type msgpUnmarshaler interface {
	UnmarshalMsg(b []byte) ([]byte, error)
}

// marshalMsgp appends m's own encoding to dst. A nil pointer, on which
// generated code would panic, is sent as nil, as the library sends it.
func marshalMsgp(dst []byte, m msgpMarshaler) ([]byte, error) {
	if rv := reflect.ValueOf(m); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return append(dst, 0xc0), nil
	}
	out, err := m.MarshalMsg(dst)
	if err != nil {
		return dst, marshalError("msgpack", m, err)
	}
	return out, nil
}

// unmarshalMsgp decodes data with u's own method. Generated code
// allocates a slice as long as the length its input declares, so data is
// checked first, as for the library; and, as there, data must hold
// exactly one value. A panic in the method is returned as an error.
func unmarshalMsgp(data []byte, u msgpUnmarshaler) (err error) {
	d := msgpackDecoders.Get().(*msgpackDecoder) // for its scratch stack
	d.stack, err = checkMsgpack(data, d.stack)
	msgpackDecoders.Put(d)
	if err != nil {
		return unmarshalError("msgpack", u, err)
	}
	defer func() {
		if p := recover(); p != nil {
			err = unmarshalError("msgpack", u, fmt.Errorf("%T.UnmarshalMsg panicked: %v", u, p))
		}
	}()
	rest, err := u.UnmarshalMsg(data)
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("%T.UnmarshalMsg left %d bytes of the value unread", u, len(rest))
	}
	if err != nil {
		return unmarshalError("msgpack", u, err)
	}
	return nil
}

package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
)

// jsonMarshal appends the JSON encoding of v to dst, without the trailing
// newline of json.Encoder.
func jsonMarshal(dst []byte, v any) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return dst, marshalError("json", v, err)
	}
	out := buf.Bytes()
	return out[:len(out)-1], nil
}

// jsonUnmarshal decodes data, one JSON value, into the pointer v. Its
// errors say which field failed and where.
func jsonUnmarshal(data []byte, v any) error {
	if v == nil || reflect.ValueOf(v).Kind() != reflect.Pointer || reflect.ValueOf(v).IsNil() {
		return ErrNilPointer
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te) && te.Field != "":
			return fmt.Errorf("kiev/codec: json: field %q: got %s, want %s (at byte %d)", te.Field, te.Value, te.Type, te.Offset)
		case errors.As(err, &se):
			return fmt.Errorf("kiev/codec: json: invalid JSON at byte %d: %v", se.Offset, err)
		case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
			return fmt.Errorf("kiev/codec: json: invalid JSON: it ends early, at byte %d", len(data))
		}
		return unmarshalError("json", v, err)
	}
	if dec.More() {
		return fmt.Errorf("kiev/codec: json: more than one value (at byte %d)", dec.InputOffset())
	}
	return nil
}

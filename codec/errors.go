package codec

import "fmt"

// marshalError wraps an error from the library behind codec name.
func marshalError(codec string, v any, err error) error {
	return fmt.Errorf("kiev/codec: %s: cannot marshal %T: %w", codec, v, err)
}

// unmarshalError wraps a decoding error. Such errors almost always mean the
// peer sent a different type than v or the bytes were corrupted.
func unmarshalError(codec string, v any, err error) error {
	return fmt.Errorf("kiev/codec: %s: cannot unmarshal into %T: %w; check that both peers use the same type for this call", codec, v, err)
}

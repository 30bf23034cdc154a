package codec

import (
	"errors"
	"reflect"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// vtMarshaler is the encoding that vtprotobuf generates
// (protoc-gen-go-vtproto): the exact size, then the bytes written into a
// buffer of that size.
type vtMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVT(dst []byte) (int, error)
}

// vtUnmarshaler is the decoding that vtprotobuf generates. Like the
// library's, it copies the strings and bytes it keeps; unlike it, it
// merges into the message rather than replacing it.
type vtUnmarshaler interface {
	UnmarshalVT(data []byte) error
}

// protoMessage returns v as a proto.Message: a generated message, or an
// older one (github.com/golang/protobuf) through protoadapt.
func protoMessage(v any) (proto.Message, bool) {
	switch m := v.(type) {
	case proto.Message:
		return m, true
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(m), true
	}
	return nil, false
}

// protoMarshal appends the protobuf encoding of v, which must be a
// proto.Message, to dst: through the methods of vtprotobuf if v has them,
// else the plan of a plain proto3 message (protobuf_encode.go), else the
// library's MarshalAppend. All append in place; dst grows only if it
// lacks room.
func protoMarshal(dst []byte, v any) ([]byte, error) {
	m, ok := protoMessage(v)
	if !ok {
		return dst, ErrNotProto
	}
	if vt, ok := v.(vtMarshaler); ok {
		return marshalVT(dst, vt)
	}
	if plan := planFor(v); plan != nil {
		if ptr := reflect.ValueOf(v).UnsafePointer(); ptr != nil {
			if out, ok := plan.encode(dst, ptr); ok {
				return out, nil
			}
		}
	}
	out, err := proto.MarshalOptions{}.MarshalAppend(dst, m)
	if err != nil {
		return dst, marshalError("proto", v, err)
	}
	return out, nil
}

// marshalVT appends m's encoding to dst with vtprotobuf's methods.
func marshalVT(dst []byte, m vtMarshaler) ([]byte, error) {
	n := m.SizeVT()
	out := slices.Grow(dst, n)[:len(dst)+n]
	written, err := m.MarshalToSizedBufferVT(out[len(dst):])
	if err == nil && written != n {
		err = errVTSize
	}
	if err != nil {
		return dst, marshalError("proto", m, err)
	}
	return out, nil
}

// planFor returns the plan that decodes into v, or nil if the library
// must: v is not a generated message of the current API (an older one
// goes through protoadapt), or its type has no plan.
func planFor(v any) *protoPlan {
	if m, ok := v.(proto.Message); ok {
		return protoPlanOf(m)
	}
	return nil
}

var errVTSize = errors.New("MarshalToSizedBufferVT wrote another size than SizeVT returned")

// protoUnmarshal decodes data into v, a non-nil pointer to a generated
// message: with vtprotobuf's UnmarshalVT if v has it, else with the plan
// of a plain proto3 message (protobuf_plan.go), else the library. All
// copy every string and byte slice they keep, so the decoded message
// never aliases data.
func protoUnmarshal(data []byte, v any) error {
	m, ok := protoMessage(v)
	if !ok {
		if v == nil {
			return ErrNilPointer
		}
		return ErrNotProto
	}
	if !m.ProtoReflect().IsValid() {
		return ErrNilPointer // a typed nil pointer such as (*pb.Msg)(nil)
	}
	var err error
	if vt, ok := v.(vtUnmarshaler); ok {
		proto.Reset(m) // UnmarshalVT merges; Unmarshal replaces
		err = vt.UnmarshalVT(data)
	} else if plan := planFor(v); plan == nil || !plan.decode(data, reflect.ValueOf(v).UnsafePointer()) {
		err = proto.UnmarshalOptions{}.Unmarshal(data, m)
	}
	if err != nil {
		return unmarshalError("proto", v, err)
	}
	return nil
}

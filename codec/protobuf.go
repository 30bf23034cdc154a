package codec

import "google.golang.org/protobuf/proto"

// protoMarshal appends the protobuf encoding of v, which must be a
// proto.Message, to dst.
func protoMarshal(dst []byte, v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return dst, ErrNotProto
	}
	out, err := proto.MarshalOptions{}.MarshalAppend(dst, m)
	if err != nil {
		return dst, marshalError("proto", v, err)
	}
	return out, nil
}

// protoUnmarshal decodes data into v, a non-nil pointer to a generated
// message. proto.Unmarshal copies every string and byte slice it keeps, so
// the decoded message never aliases data.
func protoUnmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		if v == nil {
			return ErrNilPointer
		}
		return ErrNotProto
	}
	if !m.ProtoReflect().IsValid() {
		return ErrNilPointer // a typed nil pointer such as (*pb.Msg)(nil)
	}
	if err := (proto.UnmarshalOptions{}).Unmarshal(data, m); err != nil {
		return unmarshalError("proto", v, err)
	}
	return nil
}

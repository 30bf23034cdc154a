// Package codec defines how kiev turns call arguments and replies into bytes.
//
// A [Codec] is three methods: a wire name, an append-style Marshal and an
// Unmarshal. kiev ships two, [Msgpack] (the default, any Go value) and
// [Protobuf] (values must be proto.Message). A user codec is any type with
// those methods; register it on a server with kiev.WithCodecs and pick it on
// a client with kiev.WithCodec.
//
// Every request names its codec on the wire, so one server serves all the
// codecs it knows at once and answers each call in the codec it was asked in.
//
// Package codectest holds a conformance suite that any Codec can run.
package codec

import "errors"

// Codec marshals and unmarshals call arguments and replies.
//
// Implementations must be safe for concurrent use by many goroutines: kiev
// calls one Codec value from every connection at once.
type Codec interface {
	// Name identifies the codec on the wire. It must be 1 to 32 bytes of
	// printable ASCII and unique among the codecs a server knows.
	Name() string

	// Marshal appends the encoding of v to dst and returns the extended
	// slice. kiev passes a reused buffer as dst, so Marshal must only
	// append to it and must not keep it after returning.
	Marshal(dst []byte, v any) ([]byte, error)

	// Unmarshal decodes data into v, a non-nil pointer. data belongs to a
	// reused read buffer: Unmarshal must copy whatever it keeps (strings,
	// byte slices) and must not keep data itself after returning. Bytes
	// come from the network and may be hostile: Unmarshal returns an error
	// for malformed input and never panics.
	Unmarshal(data []byte, v any) error
}

// Builtin is the type of the codecs that ship with kiev. Its values are
// constants, so no code can swap a built-in codec at run time.
type Builtin uint8

const (
	// Msgpack encodes any Go value with github.com/vmihailenco/msgpack/v5.
	// Structs are encoded as maps keyed by field name (the msgpack tag,
	// else the json tag, else the Go name), so adding or removing a field
	// stays compatible between old and new peers: unknown keys are
	// skipped. Integers take the fewest bytes that hold them; decoded into
	// an interface they come back as int64 (uint64 past its range), and
	// floats as float64. Unmarshal rejects input that holds more than one value,
	// declares a length longer than the input or nests arrays and maps
	// more than 1000 deep. Plain structs (numbers, strings, byte slices,
	// slices of those and nested structs of the same) decode through a
	// plan compiled once per type rather than msgpack's reflection: the
	// same result, checked as it is read, with the strings of a message
	// in one shared allocation (a string kept keeps that allocation, at
	// most 1 KiB, alive) and no allocation for a string equal to the one
	// the field already holds. A pointer to a plain struct encodes
	// through such a plan too: the library's bytes, for a quarter of its
	// instructions.
	// A type with the MarshalMsg and UnmarshalMsg methods that
	// tinylib/msgp generates is encoded and decoded by them instead; its
	// field names are then the generated code's. It is kiev's default.
	Msgpack Builtin = 1

	// Protobuf encodes values that implement proto.Message with
	// google.golang.org/protobuf, appending in place to kiev's reused
	// buffers; a message with the methods vtprotobuf generates
	// (MarshalToSizedBufferVT, UnmarshalVT) goes through them, and one
	// from github.com/golang/protobuf through protoadapt. A plain proto3
	// message (scalars, strings, bytes and repeated ones of those) is
	// encoded and decoded by a plan compiled once per type, with the
	// library's bytes and results: its decoded strings share one
	// allocation (a string kept keeps that allocation, at most 1 KiB,
	// alive), and a string equal to the one the field already holds
	// costs none. Other values are refused with [ErrNotProto].
	Protobuf Builtin = 2

	// JSON encodes any Go value with encoding/json. It is what kiev's
	// HTTP front speaks (see kiev.Server.HTTPHandler), and a codec any
	// client may choose where readable bytes matter more than size.
	// Unmarshal's errors name the field that failed.
	JSON Builtin = 3
)

// Errors returned by the built-in codecs.
var (
	// ErrNotProto is returned by [Protobuf] for a value that is not a
	// proto.Message. Generate the type with protoc-gen-go and pass a
	// pointer to it, or use the Msgpack codec for plain Go structs.
	ErrNotProto = errors.New("kiev/codec: value is not a proto.Message; pass a pointer to a generated protobuf message, or use codec.Msgpack for plain Go types")

	// ErrNilPointer is returned by Unmarshal when v is nil or not a
	// pointer.
	ErrNilPointer = errors.New("kiev/codec: Unmarshal needs a non-nil pointer to decode into")
)

// Name returns "msgpack", "proto" or "json".
func (b Builtin) Name() string {
	switch b {
	case Msgpack:
		return "msgpack"
	case Protobuf:
		return "proto"
	case JSON:
		return "json"
	}
	return "invalid"
}

// String returns the codec's wire name.
func (b Builtin) String() string { return b.Name() }

// Marshal appends the encoding of v to dst.
func (b Builtin) Marshal(dst []byte, v any) ([]byte, error) {
	switch b {
	case Msgpack:
		return msgpackMarshal(dst, v)
	case Protobuf:
		return protoMarshal(dst, v)
	case JSON:
		return jsonMarshal(dst, v)
	}
	return dst, errInvalidBuiltin
}

// Unmarshal decodes data into the pointer v.
func (b Builtin) Unmarshal(data []byte, v any) error {
	switch b {
	case Msgpack:
		return msgpackUnmarshal(data, v)
	case Protobuf:
		return protoUnmarshal(data, v)
	case JSON:
		return jsonUnmarshal(data, v)
	}
	return errInvalidBuiltin
}

var errInvalidBuiltin = errors.New("kiev/codec: invalid Builtin value; use codec.Msgpack, codec.Protobuf or codec.JSON")

package codec_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/testpb"
)

// The seed corpora live in testdata/fuzz/<FuzzName>/; they hold valid
// encodings and hostile inputs that declare huge lengths or deep nesting.

// FuzzMsgpackUnmarshal decodes arbitrary bytes into a struct and into an
// interface. Decoding must never panic, and whatever decodes must encode
// again into bytes that decode.
func FuzzMsgpackUnmarshal(f *testing.F) {
	for _, v := range []any{
		&small{ID: 42, Name: "kiev", Tags: []int64{1, 2, 3}},
		newRich(),
		map[string]any{"a": []any{1, "b", nil, 2.5, true}},
	} {
		b, err := codec.Msgpack.Marshal(nil, v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, newValue := range []func() any{
			func() any { return new(rich) },
			func() any { return new(any) },
		} {
			v := newValue()
			if codec.Msgpack.Unmarshal(data, v) != nil {
				continue
			}
			b, err := codec.Msgpack.Marshal(nil, v)
			if err != nil {
				t.Fatalf("decoded %T from %x but cannot marshal it: %v", v, data, err)
			}
			if err := codec.Msgpack.Unmarshal(b, newValue()); err != nil {
				t.Fatalf("re-marshaled %T to %x but cannot unmarshal it: %v", v, b, err)
			}
		}
	})
}

// FuzzProtobufUnmarshal decodes arbitrary bytes into *testpb.Small.
// Decoding must never panic, and whatever decodes must survive a round trip.
func FuzzProtobufUnmarshal(f *testing.F) {
	b, err := codec.Protobuf.Marshal(nil, &testpb.Small{Id: 42, Name: "kiev", Tags: []int64{1, 2, 3}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		m := new(testpb.Small)
		if codec.Protobuf.Unmarshal(data, m) != nil {
			return
		}
		b, err := codec.Protobuf.Marshal(nil, m)
		if err != nil {
			t.Fatalf("decoded %v from %x but cannot marshal it: %v", m, data, err)
		}
		again := new(testpb.Small)
		if err := codec.Protobuf.Unmarshal(b, again); err != nil {
			t.Fatalf("re-marshaled to %x but cannot unmarshal it: %v", b, err)
		}
		if !proto.Equal(m, again) {
			t.Fatalf("round trip changed the message: %v, then %v", m, again)
		}
	})
}

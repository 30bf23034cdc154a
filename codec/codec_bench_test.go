package codec_test

import (
	"testing"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/testpb"
)

func BenchmarkMarshal(b *testing.B) {
	b.Run("msgpack", func(b *testing.B) {
		benchMarshal(b, codec.Msgpack, &small{ID: 42, Name: "kiev", Tags: []int64{1, 2, 3}})
	})
	b.Run("proto", func(b *testing.B) {
		benchMarshal(b, codec.Protobuf, &testpb.Small{Id: 42, Name: "kiev", Tags: []int64{1, 2, 3}})
	})
}

func BenchmarkUnmarshal(b *testing.B) {
	b.Run("msgpack", func(b *testing.B) {
		benchUnmarshal(b, codec.Msgpack, &small{ID: 42, Name: "kiev", Tags: []int64{1, 2, 3}},
			func() any { return new(small) })
	})
	b.Run("proto", func(b *testing.B) {
		benchUnmarshal(b, codec.Protobuf, &testpb.Small{Id: 42, Name: "kiev", Tags: []int64{1, 2, 3}},
			func() any { return new(testpb.Small) })
	})
	// A 16 KiB payload: the cost is the copy into a fresh slice.
	b.Run("msgpack/16KiB", func(b *testing.B) {
		benchUnmarshal(b, codec.Msgpack, &blob{Data: make([]byte, 16<<10)}, func() any { return new(blob) })
	})
}

type blob struct{ Data []byte }

// benchMarshal marshals v into a reused buffer, as kiev does.
func benchMarshal(b *testing.B, c codec.Codec, v any) {
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		var err error
		if buf, err = c.Marshal(buf[:0], v); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

// benchUnmarshal decodes the encoding of v into a new value each time, as
// kiev does for every request.
func benchUnmarshal(b *testing.B, c codec.Codec, v any, newValue func() any) {
	data, err := c.Marshal(nil, v)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := c.Unmarshal(data, newValue()); err != nil {
			b.Fatal(err)
		}
	}
}

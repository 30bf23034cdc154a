package codec_test

import (
	"strings"
	"testing"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/testpb"
)

// The benchmarks here measure kiev's codecs alone; bench/codecbench,
// in the bench module, compares them with msgpack v5, tinylib/msgp's
// generated code and proto on the same payloads.

func BenchmarkMarshal(b *testing.B) {
	b.Run("msgpack", func(b *testing.B) {
		benchMarshal(b, codec.Msgpack, &small{ID: 42, Name: "kiev", Tags: []int64{1, 2, 3}})
	})
	b.Run("msgpack/581B", func(b *testing.B) {
		benchMarshal(b, codec.Msgpack, newBenchMessage())
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
	b.Run("msgpack/581B", func(b *testing.B) {
		benchUnmarshal(b, codec.Msgpack, newBenchMessage(), func() any { return new(benchMessage) })
	})
	// A reply decoded into the value the caller reuses: nothing to
	// allocate, its strings being the same.
	b.Run("msgpack/581B/reused", func(b *testing.B) {
		var m benchMessage
		benchUnmarshal(b, codec.Msgpack, newBenchMessage(), func() any { return &m })
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

// benchMessage is rpcx-benchmark's BenchmarkMessage, the 581-byte message
// of bench/compare (581 bytes in protobuf).
type benchMessage struct {
	Field1, Field9, Field18               string
	Field80, Field81                      bool
	Field2, Field3, Field280, Field6      int32
	Field22                               int64
	Field4                                string
	Field5                                []uint64
	Field59                               bool
	Field7                                string
	Field16, Field130                     int32
	Field12, Field17, Field13, Field14    bool
	Field104, Field100, Field101          int32
	Field102, Field103                    string
	Field29                               int32
	Field30                               bool
	Field60, Field271, Field272, Field150 int32
	Field23                               int32
	Field24                               bool
	Field25                               int32
	Field78                               bool
	Field67, Field68, Field128            int32
	Field129                              string
	Field131                              int32
}

// newBenchMessage fills a benchMessage as rpcx-benchmark does: every
// integer 100000, every bool true, every string the same 54 bytes.
func newBenchMessage() *benchMessage {
	const i = 100000
	s := strings.Repeat("消息", 9)
	return &benchMessage{
		Field1: s, Field9: s, Field18: s, Field80: true, Field81: true,
		Field2: i, Field3: i, Field280: i, Field6: i, Field22: i, Field4: s,
		Field59: true, Field7: s, Field16: i, Field130: i, Field12: true,
		Field17: true, Field13: true, Field14: true, Field104: i, Field100: i,
		Field101: i, Field102: s, Field103: s, Field29: i, Field30: true,
		Field60: i, Field271: i, Field272: i, Field150: i, Field23: i,
		Field24: true, Field25: i, Field78: true, Field67: i, Field68: i,
		Field128: i, Field129: s, Field131: i,
	}
}

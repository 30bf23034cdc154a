package codec_test

import (
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/testpb"
)

// fullScalars has every field of testpb.Scalars set, at the edges of
// their ranges where they have them.
func fullScalars() *testpb.Scalars {
	return &testpb.Scalars{
		I32: math.MinInt32, I64: math.MinInt64, U32: math.MaxUint32, U64: math.MaxUint64,
		S32: -3, S64: math.MinInt64, F32: 7, F64: math.MaxUint64, Sf32: -9, Sf64: -10,
		Fl: 1.5, Db: -2.25, B: true, S: "héllo", By: []byte{0, 1, 2}, E: testpb.Enum_ENUM_ONE,
		Ri32: []int32{-1, 0, 1}, Ri64: []int64{math.MaxInt64, -1}, Ru32: []uint32{0, math.MaxUint32},
		Ru64: []uint64{1 << 63}, Rs32: []int32{math.MinInt32, math.MaxInt32}, Rs64: []int64{-1, 1},
		Rf32: []uint32{5}, Rf64: []uint64{6, 7}, Rsf32: []int32{-8}, Rsf64: []int64{-9},
		Rfl: []float32{float32(math.Inf(1))}, Rdb: []float64{math.SmallestNonzeroFloat64}, Rb: []bool{true, false},
		Rs: []string{"a", "", "ünï"}, Rby: [][]byte{{1}, {}}, Re: []testpb.Enum{1, 0, 5},
		S2: string(make([]byte, 300)),
	}
}

func TestProtobufPlanDecodesEveryScalarKind(t *testing.T) {
	in := fullScalars()
	b, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out := new(testpb.Scalars)
	if err := codec.Protobuf.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in, out) {
		t.Errorf("decoded %v\nwant %v", out, in)
	}
}

// A message decoded into a value that already holds another must hold
// only what was sent, as with the library, which resets the message first.
func TestProtobufPlanReplacesWhatTheMessageHeld(t *testing.T) {
	b, err := proto.Marshal(&testpb.Scalars{I32: 5, S2: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	out := fullScalars()
	if err := codec.Protobuf.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	if want := (&testpb.Scalars{I32: 5, S2: "kept"}); !proto.Equal(out, want) {
		t.Errorf("decoded %v\nwant %v", out, want)
	}
}

// What a plan does not model, it leaves to the library: unknown fields
// are kept and sent on, and a field sent unpacked is read.
func TestProtobufPlanLeavesTheRestToTheLibrary(t *testing.T) {
	b := protowire.AppendTag(nil, 999, protowire.VarintType)
	b = protowire.AppendVarint(b, 7)
	b = protowire.AppendTag(b, 17, protowire.VarintType) // ri32, unpacked
	b = protowire.AppendVarint(b, 3)
	out := new(testpb.Scalars)
	if err := codec.Protobuf.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	if len(out.Ri32) != 1 || out.Ri32[0] != 3 {
		t.Errorf("unpacked ri32 decoded as %v, want [3]", out.Ri32)
	}
	if u := out.ProtoReflect().GetUnknown(); len(u) != 3 {
		t.Errorf("unknown fields %x, want field 999 kept (b83e07)", u)
	}
	nested := &testpb.Nested{Small: &testpb.Small{Id: 1, Name: "n"}}
	nb, err := proto.Marshal(nested)
	if err != nil {
		t.Fatal(err)
	}
	var gotNested testpb.Nested
	if err := codec.Protobuf.Unmarshal(nb, &gotNested); err != nil || !proto.Equal(&gotNested, nested) {
		t.Errorf("a nested message decoded as %v, %v; want %v", &gotNested, err, nested)
	}
	bad := protowire.AppendTag(nil, 14, protowire.BytesType)
	bad = protowire.AppendBytes(bad, []byte{0xff})
	if err := codec.Protobuf.Unmarshal(bad, out); err == nil {
		t.Error("a string that is not UTF-8 decoded; want the library's error")
	}
}

// A reply decoded again into the value that holds the last one allocates
// nothing for strings that did not change.
func TestProtobufPlanReusedReplyAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	b, err := proto.Marshal(&testpb.Scalars{I64: 1, S: "the same", S2: "text each time"})
	if err != nil {
		t.Fatal(err)
	}
	out := new(testpb.Scalars)
	if n := testing.AllocsPerRun(100, func() { _ = codec.Protobuf.Unmarshal(b, out) }); n != 0 {
		t.Errorf("%.1f allocations per decode into a reused message, want 0", n)
	}
	fresh := testing.AllocsPerRun(100, func() { _ = codec.Protobuf.Unmarshal(b, new(testpb.Scalars)) })
	if fresh > 2 { // the message and one arena for both strings
		t.Errorf("%.1f allocations per decode into a new message, want 2", fresh)
	}
}

// FuzzProtobufPlan decodes arbitrary bytes into testpb.Scalars with the
// codec, whose plan decodes the message, and with the library: both must
// fail, or both succeed with equal messages. It decodes into a message
// already full of other values too, which must make no difference.
func FuzzProtobufPlan(f *testing.F) {
	for _, m := range []*testpb.Scalars{fullScalars(), {S: "a", Rs: []string{"b"}}, {}} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want := new(testpb.Scalars)
		wantErr := proto.Unmarshal(data, want)
		for _, got := range []*testpb.Scalars{new(testpb.Scalars), fullScalars()} {
			err := codec.Protobuf.Unmarshal(data, got)
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("decoding %x: codec error %v, library error %v", data, err, wantErr)
			}
			if err == nil && !proto.Equal(got, want) {
				t.Fatalf("decoding %x: codec gave %v, library %v", data, got, want)
			}
		}
	})
}

// The codec writes a plain proto3 message as the library does, byte for
// byte, and refuses what the library refuses.
func TestProtobufPlanEncodesAsTheLibrary(t *testing.T) {
	negZero := &testpb.Scalars{Fl: float32(math.Copysign(0, -1)), Db: math.Copysign(0, -1), Rb: []bool{false}}
	for _, m := range []*testpb.Scalars{fullScalars(), {}, negZero, {I32: -1, Re: []testpb.Enum{-1}}} {
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := codec.Protobuf.Marshal([]byte("prefix"), m)
		if err != nil || string(got) != "prefix"+string(want) {
			t.Errorf("Marshal(%v) = %x, %v; want prefix then %x", m, got, err, want)
		}
	}
	if _, err := codec.Protobuf.Marshal(nil, &testpb.Scalars{Rs: []string{"\xff"}}); err == nil {
		t.Error("a string that is not UTF-8 marshaled; want the library's error")
	}
	if b, err := codec.Protobuf.Marshal(nil, (*testpb.Scalars)(nil)); err != nil || len(b) != 0 {
		t.Errorf("a nil message marshaled to %x, %v; want nothing", b, err)
	}
}

// FuzzProtobufEncode decodes arbitrary bytes with the library and, if
// they decode, encodes the message with the codec and with the library:
// the bytes must be the same.
func FuzzProtobufEncode(f *testing.F) {
	for _, m := range []*testpb.Scalars{fullScalars(), {S: "a", Rs: []string{"b"}}} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m := new(testpb.Scalars)
		if proto.Unmarshal(data, m) != nil {
			return
		}
		want, wantErr := proto.Marshal(m)
		got, err := codec.Protobuf.Marshal(nil, m)
		if (err != nil) != (wantErr != nil) || string(got) != string(want) {
			t.Fatalf("encoding %v: codec gave %x, %v; library %x, %v", m, got, err, want, wantErr)
		}
	})
}

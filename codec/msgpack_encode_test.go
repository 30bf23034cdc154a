package codec

// The tests of the msgpack encoding plan compare it with msgpack v5
// itself: for every value, both must produce the same bytes.

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Types only the encoding tests use: omitempty in every form a plan
// takes, and slices of structs and of pointers.

type encOmit struct {
	B                bool         `json:",omitempty"`
	I                int          `json:",omitempty"`
	I8               int8         `json:",omitempty"`
	U16              uint16       `json:",omitempty"`
	F32              float32      `json:",omitempty"`
	F64              float64      `json:",omitempty"`
	S                string       `json:",omitempty"`
	Raw              []byte       `json:",omitempty"`
	Is               []int64      `json:",omitempty"`
	Ss               []string     `json:",omitempty"`
	P                *fastInner   `json:",omitempty"`
	IP               *int         `json:",omitempty"`
	N                fastName     `msgpack:"n,omitempty"`
	Ls               fastLevels   `msgpack:",omitempty"`
	In               []fastInner  `json:",omitempty"`
	Ps               []*fastInner `json:",omitempty"`
	Kept             string
	*FastEmbeddedPtr // its fields are left out, not sent as nil, when the pointer is nil
}

// encOmitAll has a _msgpack field whose omitempty applies to the fields
// after it only.
type encOmitAll struct {
	Before   int
	_msgpack struct{} `msgpack:",omitempty"`
	After    int
	Name     string
}

// encEmbeddedNil has no omitempty: the fields behind a nil embedded
// pointer are sent as nil.
type encEmbeddedNil struct {
	A int
	*FastEmbeddedPtr
	*FastEmbedded
}

type encSlices struct {
	Structs  []fastInner
	Pointers []*fastInner
	Nested   [][]int64
	Blobs    [][]byte
	Named    []fastName
	Arrays   []fastArray
	Deep     []*[]*fastNode
}

type encZeroer struct{ N int }

func (z encZeroer) IsZero() bool { return z.N == 7 }

// encZeroerField has a type with IsZero but no omitempty: plain.
type encZeroerField struct {
	Z encZeroer
}

// encPlainTypes are the types every encoding test runs on.
var encPlainTypes = append([]reflect.Type{
	reflect.TypeFor[encOmit](),
	reflect.TypeFor[encOmitAll](),
	reflect.TypeFor[encEmbeddedNil](),
	reflect.TypeFor[encSlices](),
	reflect.TypeFor[encZeroerField](),
	reflect.TypeFor[fastWithText](),
}, fastPlainTypes...)

// fastWithText has a type with only decoding methods, which is plain to
// encode.
type fastWithText struct {
	T  fastText
	Ts []fastText
	B  *fastBin
}

// freshLibraryMarshal is msgpackMarshal without the plan: a fresh encoder
// set up as msgpackEncoders sets up theirs, so that a pooled encoder's
// state cannot hide a difference.
func freshLibraryMarshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetCustomStructTag("json")
	enc.UseCompactInts(true)
	err := enc.Encode(v)
	return buf.Bytes(), err
}

// compareEncoders encodes v with the plan and with the library and
// reports any difference.
func compareEncoders(t *testing.T, v any) {
	t.Helper()
	if msgpackEncoderOf(v) == nil {
		t.Fatalf("%T has no encoding plan", v)
	}
	want, err := freshLibraryMarshal(v)
	if err != nil {
		t.Fatalf("library encoding %+v: %v", v, err)
	}
	got, err := msgpackMarshal([]byte("prefix"), v)
	if err != nil {
		t.Fatalf("msgpackMarshal(%+v): %v", v, err)
	}
	got, ok := bytes.CutPrefix(got, []byte("prefix"))
	if !ok {
		t.Fatalf("msgpackMarshal(%+v) did not append to dst", v)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding %#v:\nplan:    %x\nlibrary: %x", v, got, want)
	}
}

func TestMsgpackEncodePlans(t *testing.T) {
	for _, typ := range encPlainTypes {
		if msgpackEncoderOf(reflect.New(typ).Interface()) == nil {
			t.Errorf("%s has no encoding plan", typ)
		}
	}
	for _, v := range []any{
		new(fastWithMap),
		new(struct{ T time.Time }),
		new(struct{ A [2]int }),
		new(struct{ P uintptr }),
		new(struct{ C complex64 }),
		new(struct{ M fastMarshalOnly }),
		new(struct{ M []fastMarshalOnly }),
		new(struct{ fastMarshalOnly }),
		new(fastUnexportedEmbed),
		new(struct{ R msgpack.RawMessage }),
		new(struct {
			A int `msgpack:"a,alias:b"`
		}),
		new(struct {
			A string `msgpack:",intern"`
		}),
		new(struct {
			In fastInner `json:",omitempty"` // a struct's emptiness is its fields'
		}),
		new(struct {
			Z encZeroer `json:",omitempty"` // IsZero decides
		}),
		new(struct {
			Z *encZeroer `json:",omitempty"`
		}),
		new(time.Time),
		new([]int64),
		new(int),
		fastSmall{}, // a struct value, not a pointer
		nil,
	} {
		if msgpackEncoderOf(v) != nil {
			t.Errorf("%T has an encoding plan; want the library to encode it", v)
		}
	}
}

// TestMsgpackEncodeMatchesLibrary encodes many random values of every
// plain type, edge cases included, with the plan and with the library.
func TestMsgpackEncodeMatchesLibrary(t *testing.T) {
	for _, typ := range encPlainTypes {
		compareEncoders(t, reflect.New(typ).Interface())
		for seed := range uint64(300) {
			compareEncoders(t, newFilled(seed)(typ))
		}
	}
	compareEncoders(t, (*fastSmall)(nil))
}

// TestMsgpackEncodeBoundaries encodes every integer, length and count at
// and around the boundaries between the msgpack formats.
func TestMsgpackEncodeBoundaries(t *testing.T) {
	type numbers struct {
		I   []int64
		I8  []int8
		I16 []int16
		I32 []int32
		U   []uint64
		U8  []uint8s
		F32 []float32
		F64 []float64
	}
	var n numbers
	for _, b := range []int64{0, 1, 31, 32, 127, 128, 255, 256, 32767, 32768, 65535, 65536, math.MaxInt32, math.MaxInt32 + 1, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64} {
		n.I = append(n.I, b, -b, b-1, -b-1)
		n.I8 = append(n.I8, int8(b), int8(-b))
		n.I16 = append(n.I16, int16(b), int16(-b))
		n.I32 = append(n.I32, int32(b), int32(-b))
		n.U = append(n.U, uint64(b), uint64(b)+1, uint64(b)<<1)
		n.U8 = append(n.U8, uint8s(b))
	}
	n.I = append(n.I, math.MinInt64, -32, -33)
	n.F32 = []float32{0, float32(math.Copysign(0, -1)), 1.5, float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, math.SmallestNonzeroFloat32}
	n.F64 = []float64{0, math.Copysign(0, -1), 2.25, math.Inf(1), math.NaN(), math.MaxFloat64, math.SmallestNonzeroFloat64}
	compareEncoders(t, &n)

	type lengths struct {
		S  string
		B  []byte
		Is []int8
		M  map[string]int `json:"-"`
	}
	for _, l := range []int{0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536, 70000} {
		compareEncoders(t, &lengths{S: strings.Repeat("é", l/2) + strings.Repeat("x", l%2), B: make([]byte, l), Is: make([]int8, l)})
	}
}

type uint8s uint8

// TestMsgpackEncodeOmitEmpty checks the omitempty cases the random values
// may miss: -0.0 is empty, NaN is not, an empty non-nil slice is empty,
// and the fields behind a nil embedded pointer are left out only in a
// struct with an omitempty field.
func TestMsgpackEncodeOmitEmpty(t *testing.T) {
	for _, v := range []any{
		&encOmit{F64: math.Copysign(0, -1), F32: float32(math.NaN())},
		&encOmit{Is: []int64{}, Ss: []string{}, Raw: []byte{}, In: []fastInner{}},
		&encOmit{FastEmbeddedPtr: &FastEmbeddedPtr{}},
		&encOmitAll{Before: 0, After: 0},
		&encOmitAll{Before: 1, After: 2, Name: "x"},
		&encEmbeddedNil{},
		&encEmbeddedNil{FastEmbedded: &FastEmbedded{E1: 3}},
	} {
		compareEncoders(t, v)
	}
	// Spot-check one encoding by hand: only Kept, an empty string.
	got, err := msgpackMarshal(nil, &encOmit{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{0x81, 0xa4, 'K', 'e', 'p', 't', 0xa0}; !bytes.Equal(got, want) {
		t.Errorf("encOmit{} encodes as %x, want %x", got, want)
	}
}

// TestMsgpackEncodeRoundTrip decodes what the plan encodes, with the
// library, into an equal value.
func TestMsgpackEncodeRoundTrip(t *testing.T) {
	for _, typ := range fastPlainTypes {
		for seed := range uint64(50) {
			in := newFilled(seed)(typ)
			b, err := msgpackMarshal(nil, in)
			if err != nil {
				t.Fatal(err)
			}
			out := newZero(typ)
			if err := libraryUnmarshal(b, out); err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			want := newZero(typ)
			lb, _ := freshLibraryMarshal(in)
			if err := libraryUnmarshal(lb, want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(out, want) && !bytes.Equal(b, lb) {
				t.Fatalf("%s: round trip differs", typ)
			}
		}
	}
}

// TestMsgpackEncodeAllocs: encoding a plain struct into a buffer with
// room allocates nothing.
func TestMsgpackEncodeAllocs(t *testing.T) {
	if testing.CoverMode() != "" || buildHasRace() {
		t.Skip("allocation counts are inflated by -cover and -race")
	}
	v := &fastSmall{ID: 42, Name: "kiev", Tags: []int64{1, 2, 3, 4}}
	buf := make([]byte, 0, 256)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := msgpackMarshal(buf[:0], v); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("msgpackMarshal allocates %v times, want 0", allocs)
	}
}

// BenchmarkMsgpackEncodeSmall encodes fastSmall with the plan and with the
// library, both through a pooled encoder and into a reused buffer.
func BenchmarkMsgpackEncodeSmall(b *testing.B) {
	v := &fastSmall{ID: 42, Name: "kiev", Tags: []int64{1, 2, 3, 4}}
	for _, bc := range []struct {
		name    string
		marshal func([]byte, any) ([]byte, error)
	}{
		{"plan", msgpackMarshal},
		{"library", libraryMarshal},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 256)
			for b.Loop() {
				if _, err := bc.marshal(buf[:0], v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzMsgpackEncode decodes arbitrary bytes into values of the plain
// types with the library, then encodes them with the plan and with the
// library. Both must give the same bytes.
func FuzzMsgpackEncode(f *testing.F) {
	for seed := range uint64(3) {
		for _, typ := range encPlainTypes {
			b, err := freshLibraryMarshal(newFilled(seed)(typ))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := checkMsgpack(data, nil); err != nil {
			return
		}
		for _, typ := range encPlainTypes {
			v := newZero(typ)
			if libraryUnmarshal(data, v) != nil {
				continue
			}
			compareEncoders(t, v)
		}
	})
}

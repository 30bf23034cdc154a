package codec

// The tests of the msgpack fast path compare it with msgpack v5 itself:
// whatever bytes they decode, both must agree on the result and on whether
// there is an error.

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/vmihailenco/msgpack/v5"
)

// Plain types: the fast path must have a plan for each.

type fastSmall struct {
	ID   int64   `msgpack:"id"`
	Name string  `json:"name"`
	Tags []int64 `json:"tags"`
}

// fastScalars has every scalar kind, and a slice of each.
type fastScalars struct {
	B   bool
	I   int
	I8  int8
	I16 int16
	I32 int32
	I64 int64
	U   uint
	U8  uint8
	U16 uint16
	U32 uint32
	U64 uint64
	F32 float32
	F64 float64
	S   string
	Raw []byte

	Bs   []bool
	Is   []int
	I8s  []int8
	I16s []int16
	I32s []int32
	I64s []int64
	Us   []uint
	U16s []uint16
	U32s []uint32
	U64s []uint64
	F32s []float32
	F64s []float64
	Ss   []string
}

type (
	fastLevel  int8
	fastName   string
	fastBlob   []byte
	fastByte   uint8
	fastNames  []string
	fastIDs    []int64
	fastLevels []fastLevel
	fastCount  uint16
)

// fastNamed has named types of every supported shape.
type fastNamed struct {
	Level   fastLevel
	Name    fastName
	Blob    fastBlob
	Bytes   []fastByte
	Names   fastNames
	IDs     fastIDs
	Levels  fastLevels
	ByName  []fastName
	Timeout time.Duration
}

// fastTagged exercises the msgpack tag, its json fallback and the names
// they give.
type fastTagged struct {
	ID      int64          `msgpack:"id"`
	Name    string         `json:"name,omitempty"`
	Both    int            `msgpack:"m" json:"j"`
	Skipped string         `json:"-"`
	Dash    int            `json:"-,"`
	Empty   int            `json:",omitempty"`
	Spaced  int            `msgpack:" spaced , omitempty"`
	Ignored map[string]int `json:"-"`
	hidden  int
	Dup1    int `msgpack:"dup"`
	Dup2    int `msgpack:"dup"`
}

type fastInner struct {
	X int    `json:"x"`
	Y string `json:"y"`
	Z []int64
}

type FastEmbedded struct {
	E1 int
	E2 []int64
}

type FastEmbeddedPtr struct {
	P1 string
	P2 *fastInner
}

type FastShadowed struct {
	X int `json:"x"`
	W int
}

// fastNested has nested structs, pointers and embedded structs.
type fastNested struct {
	In     fastInner
	InP    *fastInner
	InPP   **fastInner
	IntP   *int64
	SliceP *[]int64
	StrP   *string
	FastEmbedded
	*FastEmbeddedPtr
	Count fastCount
	Node  *fastNode
}

type fastNode struct {
	V    int
	Next *fastNode
}

// fastShadowing embeds a struct whose field x it shadows, so the library
// keeps the embedded struct as one field instead of inlining it.
type fastShadowing struct {
	X int `json:"x"`
	FastShadowed
	FastEmbedded `json:"emb"`
}

// fastInlineOpts uses the inline and noinline options.
type fastInlineOpts struct {
	X            int `json:"x"`
	FastShadowed `msgpack:",inline"`
	FastEmbedded `msgpack:",noinline"`
}

type fastArray struct {
	_msgpack struct{} `msgpack:",as_array"`
	A        int
	B        string
	C        []int64
	D        *fastArray
}

// fastPlainTypes are the types every differential test runs on.
var fastPlainTypes = []reflect.Type{
	reflect.TypeFor[fastSmall](),
	reflect.TypeFor[fastScalars](),
	reflect.TypeFor[fastNamed](),
	reflect.TypeFor[fastTagged](),
	reflect.TypeFor[fastNested](),
	reflect.TypeFor[fastShadowing](),
	reflect.TypeFor[fastInlineOpts](),
	reflect.TypeFor[fastArray](),
}

// Types that must stay with the library.

type fastWithMap struct {
	ID    int
	Attrs map[string]string
	Any   any
}

type fastText string

func (t *fastText) UnmarshalText(b []byte) error {
	*t = fastText(strings.ToUpper(string(b)))
	return nil
}

type fastBin struct{ N int }

func (b *fastBin) UnmarshalBinary([]byte) error { return nil }

type fastCustom struct{ N int }

func (c *fastCustom) DecodeMsgpack(*msgpack.Decoder) error { return nil }

type fastMarshalOnly struct{ N int }

func (fastMarshalOnly) MarshalText() ([]byte, error) { return nil, nil }

type fastUnexportedEmbed struct {
	fastInner
}

func TestMsgpackFastPlans(t *testing.T) {
	for _, typ := range fastPlainTypes {
		if msgpackPlanOf(reflect.New(typ).Interface()) == nil {
			t.Errorf("%s has no plan", typ)
		}
	}
	for _, v := range []any{
		new(fastWithMap),
		new(struct{ T time.Time }),
		new(struct{ A [2]int }),
		new(struct{ P uintptr }),
		new(struct{ C complex64 }),
		new(struct{ T fastText }),
		new(struct{ T []fastText }),
		new(struct{ B *fastBin }),
		new(struct{ C fastCustom }),
		new(struct{ R msgpack.RawMessage }),
		new(struct{ fastMarshalOnly }), // inlining depends on encoders
		new(fastUnexportedEmbed),
		new(struct{ fastCount }),
		new(struct{ S [][]byte }),
		new(struct{ S []fastInner }),
		new(struct {
			A int `msgpack:"a,alias:b"`
		}),
		new(struct {
			A string `msgpack:",intern"`
		}),
		new(struct {
			*FastEmbedded `msgpack:",inline"`
		}),
		new(fastBin),
		new([]int64),
		new(int),
	} {
		if msgpackPlanOf(v) != nil {
			t.Errorf("%T has a plan; want the library to decode it", v)
		}
	}
	// A field of a plain struct type with only encoding methods is plain.
	if msgpackPlanOf(new(struct{ M fastMarshalOnly })) == nil {
		t.Error("a field with only MarshalText has no plan")
	}
}

// TestMsgpackFastFallback decodes a type with a map and an interface,
// which the library decodes as before.
func TestMsgpackFastFallback(t *testing.T) {
	in := &fastWithMap{ID: 3, Attrs: map[string]string{"k": "v"}, Any: []any{int64(1), "x"}}
	b, err := msgpackMarshal(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	var out fastWithMap
	if err := msgpackUnmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, &out); diff != "" {
		t.Errorf("decoded value differs (-sent +got):\n%s", diff)
	}
}

// libraryUnmarshal is msgpackUnmarshal without the fast path.
func libraryUnmarshal(data []byte, v any) error {
	if _, err := checkMsgpack(data, nil); err != nil {
		return err
	}
	dec := msgpack.NewDecoder(bytes.NewReader(data))
	dec.SetCustomStructTag("json")
	dec.UseLooseInterfaceDecoding(true)
	if err := decodeMsgpack(dec, v); err != nil {
		return err
	}
	if t := reflect.TypeOf(v).Elem(); t.Kind() == reflect.Struct {
		return checkStructKeys(t, data)
	}
	return nil
}

var fastCmpOpts = cmp.Options{
	cmp.Exporter(func(reflect.Type) bool { return true }),
	cmpopts.EquateNaNs(),
}

// compareDecoders decodes data into two equal values of typ, made by
// newValue, with the fast path and with the library, and reports any
// difference in the results or in whether they fail.
func compareDecoders(t *testing.T, data []byte, typ reflect.Type, newValue func(reflect.Type) any) {
	t.Helper()
	fast, lib := newValue(typ), newValue(typ)
	if msgpackPlanOf(fast) == nil {
		t.Fatalf("%s has no plan", typ)
	}
	fastErr := msgpackUnmarshal(data, fast)
	libErr := libraryUnmarshal(data, lib)
	if (fastErr == nil) != (libErr == nil) {
		t.Fatalf("decoding %x into %s:\nfast path error: %v\nlibrary error:   %v", data, typ, fastErr, libErr)
	}
	if diff := cmp.Diff(lib, fast, fastCmpOpts); diff != "" {
		t.Fatalf("decoding %x into %s (error %v): results differ (-library +fast):\n%s", data, typ, fastErr, diff)
	}
}

// newZero returns a pointer to a new zero value of typ.
func newZero(typ reflect.Type) any { return reflect.New(typ).Interface() }

// newFilled returns a pointer to a value of typ filled by a random source
// seeded with seed, so that two calls return equal values.
func newFilled(seed uint64) func(reflect.Type) any {
	return func(typ reflect.Type) any {
		v := reflect.New(typ)
		fillRandom(v.Elem(), rand.New(rand.NewPCG(seed, 1)), 0)
		return v.Interface()
	}
}

// fillRandom sets every settable part of v to random values, edge cases
// included: nil and empty slices, nil pointers, extreme numbers.
func fillRandom(v reflect.Value, r *rand.Rand, depth int) {
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 1)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		edges := []int64{0, 1, -1, 127, -128, 255, -32769, 1 << 31, math.MaxInt64, math.MinInt64}
		if r.IntN(2) == 0 {
			v.SetInt(edges[r.IntN(len(edges))])
		} else {
			v.SetInt(int64(r.Uint64()) >> r.IntN(64))
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(r.Uint64() >> r.IntN(65))
	case reflect.Float32, reflect.Float64:
		edges := []float64{0, math.Copysign(0, -1), 1.5, -2.25, math.Inf(1), math.NaN(), math.MaxFloat64, math.SmallestNonzeroFloat64}
		if r.IntN(2) == 0 {
			v.SetFloat(edges[r.IntN(len(edges))])
		} else {
			v.SetFloat(r.NormFloat64() * 1e6)
		}
	case reflect.String:
		v.SetString(strings.Repeat("ké", r.IntN(4)) + strings.Repeat("x", r.IntN(40)))
	case reflect.Slice:
		if r.IntN(4) == 0 {
			v.SetZero()
			return
		}
		n := r.IntN(5)
		s := reflect.MakeSlice(v.Type(), n, n+r.IntN(3))
		for i := range n {
			fillRandom(s.Index(i), r, depth+1)
		}
		v.Set(s)
	case reflect.Pointer:
		if depth > 3 || r.IntN(3) == 0 {
			v.SetZero()
			return
		}
		p := reflect.New(v.Type().Elem())
		fillRandom(p.Elem(), r, depth+1)
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				fillRandom(f, r, depth+1)
			}
		}
	}
}

// fastEncoders encode as msgpackMarshal does, then with full-width
// integers, and with structs as arrays.
func fastEncoders() []func(v any) ([]byte, error) {
	custom := func(setup func(*msgpack.Encoder)) func(v any) ([]byte, error) {
		return func(v any) ([]byte, error) {
			var buf bytes.Buffer
			enc := msgpack.NewEncoder(&buf)
			enc.SetCustomStructTag("json")
			setup(enc)
			err := enc.Encode(v)
			return buf.Bytes(), err
		}
	}
	return []func(v any) ([]byte, error){
		func(v any) ([]byte, error) { return msgpackMarshal(nil, v) },
		custom(func(*msgpack.Encoder) {}),
		custom(func(e *msgpack.Encoder) { e.UseArrayEncodedStructs(true); e.UseCompactInts(true) }),
		custom(func(e *msgpack.Encoder) { e.SetOmitEmpty(true); e.UseCompactFloats(true) }),
	}
}

// TestMsgpackFastEncoded decodes many random values, encoded in several
// ways, into zero and into prefilled values.
func TestMsgpackFastEncoded(t *testing.T) {
	for _, typ := range fastPlainTypes {
		for seed := range uint64(200) {
			v := newFilled(seed)(typ)
			for _, encode := range fastEncoders() {
				data, err := encode(v)
				if err != nil {
					t.Fatalf("encoding %+v: %v", v, err)
				}
				compareDecoders(t, data, typ, newZero)
				compareDecoders(t, data, typ, newFilled(seed+1000))
			}
		}
	}
}

// fastWireValues are values of every msgpack type and width, each sent
// into every field.
var fastWireValues = [][]byte{
	{0xc0},         // nil
	{0xc2}, {0xc3}, // false, true
	{0x05}, {0xff}, // fixints 5 and -1
	{0xcc, 0xff},       // uint8 255
	{0xcd, 0xff, 0xfe}, // uint16
	{0xce, 0x80, 0, 0, 1},
	{0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	{0xd0, 0x80}, // int8 -128
	{0xd1, 0x80, 0x01},
	{0xd2, 0xff, 0xff, 0xff, 0x00},
	{0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0},
	{0xca, 0x3f, 0xc0, 0, 0},             // float32 1.5
	{0xca, 0x7f, 0xc0, 0, 0},             // float32 NaN
	{0xcb, 0xc0, 0x04, 0, 0, 0, 0, 0, 0}, // float64 -2.5
	{0xcb, 0x43, 0xf0, 0, 0, 0, 0, 0, 0}, // float64 2^64
	{0xa0}, {0xa3, 'a', 'b', 'c'}, {0xd9, 0x01, 'z'}, {0xda, 0, 2, 'h', 'i'},
	{0xc4, 0x02, 0x01, 0x02}, {0xc4, 0x00}, {0xc5, 0, 1, 'b'},
	{0x90}, {0x92, 0x01, 0x02}, {0x91, 0xc0}, {0x91, 0xa1, 'a'}, {0x92, 0xca, 0x3f, 0xc0, 0, 0, 0xc3},
	{0xdc, 0, 1, 0xcd, 1, 0}, {0x91, 0x90}, {0x91, 0x80},
	{0x96, 1, 2, 3, 4, 5, 0xa1, 'a'}, {0x96, 0xa0, 0xa0, 0xa0, 0xa0, 0xa1, 'b', 0x01}, // fail midway
	{0x96, 0xc2, 0xc3, 0xc2, 0xc3, 0xc2, 0x01},
	{0x80}, {0x81, 0xa1, 'x', 0x07}, {0x81, 0xa1, 'X', 0x07}, {0x81, 0xa1, 'V', 0x07},
	{0x82, 0xa1, 'x', 0x07, 0xa1, 'y', 0xa1, 'q'}, {0x81, 0x01, 0x02}, {0x81, 0xc0, 0x01},
	{0xde, 0, 1, 0xc4, 1, 'x', 0xc0},
	{0xd4, 0x01, 0x00}, {0xc7, 0x01, 0x05, 0x00}, // fixext1, ext8
	{0xd6, 0xff, 0, 0, 0, 1}, // a timestamp
}

// fastKeys lists the keys of typ's plan and a few that name no field.
func fastKeys(typ reflect.Type) [][]byte {
	p := msgpackPlanOf(reflect.New(typ).Interface())
	keys := [][]byte{
		{0xa7, 'u', 'n', 'k', 'n', 'o', 'w', 'n'},
		{0xc0},       // nil, read as ""
		{0xa0},       // ""
		{0x01},       // not a string: an error
		{0xd4, 1, 0}, // nor is an ext
		append([]byte{0xd9, 70}, bytes.Repeat([]byte{'k'}, 70)...),
	}
	for name := range p.byName {
		keys = append(keys, append([]byte{0xd9, byte(len(name))}, name...)) // str8
		keys = append(keys, append([]byte{0xc4, byte(len(name))}, name...)) // bin8
	}
	return keys
}

// TestMsgpackFastHandBuilt sends every wire value into every field, as a
// map entry and as an array, and decodes a few malformed structs.
func TestMsgpackFastHandBuilt(t *testing.T) {
	for _, typ := range fastPlainTypes {
		var inputs [][]byte
		for _, key := range fastKeys(typ) {
			for _, val := range fastWireValues {
				inputs = append(inputs,
					cat([]byte{0x81}, key, val),
					cat([]byte{0x82}, key, val, key, val),                // a repeated key
					cat([]byte{0xde, 0, 2}, key, val, key, []byte{0xc0})) // then nil
			}
		}
		n := len(msgpackPlanOf(reflect.New(typ).Interface()).list)
		for _, val := range fastWireValues {
			for _, size := range []int{n - 1, n, n + 1} {
				if size >= 0 {
					inputs = append(inputs, cat([]byte{0xdc, 0, byte(size)}, bytes.Repeat(val, size)))
				}
			}
			inputs = append(inputs, val) // the value itself in place of the struct
		}
		for _, data := range inputs {
			if _, err := checkMsgpack(data, nil); err != nil {
				t.Fatalf("test input %x: %v", data, err)
			}
			compareDecoders(t, data, typ, newZero)
			for seed := range uint64(3) {
				compareDecoders(t, data, typ, newFilled(seed))
			}
		}
	}
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestMsgpackFastReusesSlices checks that, like the library, the fast
// path decodes into the array of a slice that has room, which results
// compared by value cannot show.
func TestMsgpackFastReusesSlices(t *testing.T) {
	type slices struct {
		I64s   []int64
		Levels []fastLevel
		Ss     []string
		Names  []fastName
		Raw    []byte
	}
	data, err := msgpackMarshal(nil, &slices{
		I64s: []int64{1, 2}, Levels: []fastLevel{3}, Ss: []string{"a"}, Names: []fastName{"b"}, Raw: []byte{4},
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, unmarshal := range map[string]func([]byte, any) error{
		"fast path": msgpackUnmarshal,
		"library":   libraryUnmarshal,
	} {
		v := &slices{
			I64s: make([]int64, 0, 8), Levels: make([]fastLevel, 0, 8),
			Ss: make([]string, 0, 8), Names: make([]fastName, 0, 8), Raw: make([]byte, 0, 8),
		}
		before := []any{&v.I64s[:1][0], &v.Levels[:1][0], &v.Ss[:1][0], &v.Names[:1][0], &v.Raw[:1][0]}
		if err := unmarshal(data, v); err != nil {
			t.Fatal(err)
		}
		after := []any{&v.I64s[0], &v.Levels[0], &v.Ss[0], &v.Names[0], &v.Raw[0]}
		for i := range before {
			if before[i] != after[i] {
				t.Errorf("%s: field %d got a new array", name, i)
			}
		}
	}
}

// TestMsgpackFastErrorNamesField checks that an error says where it
// happened and what was expected.
func TestMsgpackFastErrorNamesField(t *testing.T) {
	// {"In": {"z": [1, "a"]}} into fastNested, whose In.Z is []int64.
	data := cat([]byte{0x81, 0xa2, 'I', 'n', 0x81, 0xa1, 'Z', 0x92, 0x01, 0xa1, 'a'})
	err := msgpackUnmarshal(data, new(fastNested))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"*codec.fastNested", "field In.Z[1]", "decoding int64"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// buildHasRace reports whether the test binary was built with -race.
func buildHasRace() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// TestMsgpackFastAllocs counts the allocations of msgpackUnmarshal into a
// reused fastSmall, reset to zero before each call, so that what is
// counted is the decoding alone: the string and the slice it returns.
func TestMsgpackFastAllocs(t *testing.T) {
	if testing.CoverMode() != "" || buildHasRace() {
		t.Skip("allocation counts are inflated by -cover and -race")
	}
	data, err := msgpackMarshal(nil, &fastSmall{ID: 42, Name: "kiev", Tags: []int64{1, 2, 3, 4}})
	if err != nil {
		t.Fatal(err)
	}
	var out fastSmall
	allocs := testing.AllocsPerRun(100, func() {
		out = fastSmall{}
		if err := msgpackUnmarshal(data, &out); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("allocs per msgpackUnmarshal: %v", allocs)
	if allocs > 3 {
		t.Errorf("msgpackUnmarshal allocates %v times, want at most 3 (the string and the slice, 2 today)", allocs)
	}
}

// BenchmarkMsgpackDecodeSmall decodes fastSmall into a reused value with
// the fast path and with the library.
func BenchmarkMsgpackDecodeSmall(b *testing.B) {
	data, err := msgpackMarshal(nil, &fastSmall{ID: 42, Name: "kiev", Tags: []int64{1, 2, 3, 4}})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name      string
		unmarshal func([]byte, any) error
	}{
		{"fast", msgpackUnmarshal},
		{"library", libraryUnmarshalPooled},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			var out fastSmall
			for b.Loop() {
				out = fastSmall{}
				if err := bc.unmarshal(data, &out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// libraryUnmarshalPooled is msgpackUnmarshal as it was before the fast
// path: the same checks and pooled decoder, then the library's Decode.
func libraryUnmarshalPooled(data []byte, v any) error {
	d := msgpackDecoders.Get().(*msgpackDecoder)
	var err error
	if d.stack, err = checkMsgpack(data, d.stack); err != nil {
		return err
	}
	d.r.Reset(data)
	d.r.codes, d.ready = d.r.codes[:0], false
	err = decodeMsgpack(d.lib(), v)
	d.r.Reset(nil)
	if err == nil {
		msgpackDecoders.Put(d)
	}
	return err
}

// FuzzMsgpackFast decodes arbitrary bytes that pass checkMsgpack with the
// fast path and with the library, into zero and into prefilled values of
// a few plain types. Both must agree. Bytes that fail checkMsgpack must
// fail the fast path too, which makes the same checks as it reads.
func FuzzMsgpackFast(f *testing.F) {
	for seed := range uint64(3) {
		for _, typ := range fastPlainTypes {
			b, err := msgpackMarshal(nil, newFilled(seed)(typ))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	types := []reflect.Type{
		reflect.TypeFor[fastScalars](),
		reflect.TypeFor[fastNested](),
		reflect.TypeFor[fastShadowing](),
		reflect.TypeFor[fastArray](),
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if checkErr := func() error { _, err := checkMsgpack(data, nil); return err }(); checkErr != nil {
			// A plan checks as it decodes: what checkMsgpack refuses,
			// it refuses too.
			for _, typ := range types {
				if err := msgpackUnmarshal(data, newZero(typ)); err == nil {
					t.Fatalf("%x fails checkMsgpack (%v) but decodes into %s", data, checkErr, typ)
				}
			}
			return
		}
		for _, typ := range types {
			compareDecoders(t, data, typ, newZero)
			compareDecoders(t, data, typ, newFilled(uint64(len(data))))
		}
	})
}

// TestMsgpackFastDepth checks that a plan, which checks as it reads,
// bounds the nesting of a recursive type as checkMsgpack does: 1000
// nested maps decode, 1001 do not, and ten million fail fast.
func TestMsgpackFastDepth(t *testing.T) {
	// {"Next": {"Next": ... {}}}: depth maps with one key each.
	nested := func(depth int) []byte {
		level := []byte{0x81, 0xa4, 'N', 'e', 'x', 't'}
		return append(bytes.Repeat(level, depth), 0x80)
	}
	for _, c := range []struct {
		depth int
		ok    bool
	}{{999, true}, {1000, true}, {1001, false}, {10_000_000, false}} {
		data := nested(c.depth)
		_, checkErr := checkMsgpack(data, nil)
		err := msgpackUnmarshal(data, new(fastNode))
		if (err == nil) != c.ok || (checkErr == nil) != c.ok {
			t.Errorf("%d nested maps: plan error %v, checkMsgpack error %v; want ok=%v", c.depth, err, checkErr, c.ok)
		}
	}
}

// TestMsgpackFastRefusesUnchecked sends the plan inputs that checkMsgpack
// refuses, where the plan would otherwise read them without noticing:
// a skipped value that is malformed or nests too deep, and trailing bytes.
func TestMsgpackFastRefusesUnchecked(t *testing.T) {
	unknown := []byte{0xa1, 'u'} // a key that names no field
	for name, data := range map[string][]byte{
		"reserved code in a skipped value": cat([]byte{0x81}, unknown, []byte{0x91, 0xc1}),
		"truncated skipped value":          cat([]byte{0x81}, unknown, []byte{0x92, 0x01}),
		"skipped array longer than input":  cat([]byte{0x81}, unknown, []byte{0xdd, 0x7f, 0xff, 0xff, 0xff, 0x01}),
		"deep skipped value":               cat([]byte{0x81}, unknown, bytes.Repeat([]byte{0x91}, 1000), []byte{0xc0}),
		"trailing bytes":                   {0x80, 0x01},
		"empty":                            {},
		"slice longer than input":          {0x81, 0xa3, 'I', '6', '4', 0xdc, 0xff, 0xff, 0x01},
	} {
		if _, err := checkMsgpack(data, nil); err == nil {
			t.Fatalf("%s: checkMsgpack accepts %x", name, data)
		}
		if err := msgpackUnmarshal(data, new(fastScalars)); err == nil {
			t.Errorf("%s: the plan accepts %x", name, data)
		}
	}
}

// fastMessage is rpcx-benchmark's message, cut down: strings, integers
// and booleans.
type fastMessage struct {
	Field1, Field9, Field18, Field4, Field7 string
	Field2, Field3, Field6                  int32
	Field22                                 int64
	Field80, Field81                        bool
	Field5                                  []uint64
}

// TestMsgpackFastStringAllocs checks that the strings of one message
// share one allocation, and that decoding again into a value that holds
// the same strings allocates nothing.
func TestMsgpackFastStringAllocs(t *testing.T) {
	if testing.CoverMode() != "" || buildHasRace() {
		t.Skip("allocation counts are inflated by -cover and -race")
	}
	text := strings.Repeat("消息", 9)
	in := &fastMessage{Field1: text, Field9: text, Field18: text, Field4: text, Field7: text + "!",
		Field2: 100000, Field3: 100000, Field6: -1, Field22: 1 << 40, Field80: true}
	data, err := msgpackMarshal(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	fresh := testing.AllocsPerRun(100, func() {
		var out fastMessage
		if err := msgpackUnmarshal(data, &out); err != nil {
			t.Fatal(err)
		}
	})
	var out fastMessage
	reused := testing.AllocsPerRun(100, func() {
		if err := msgpackUnmarshal(data, &out); err != nil {
			t.Fatal(err)
		}
	})
	if fresh > 2 || reused != 0 {
		t.Errorf("allocs per decode: %v into a new value, want at most 2 (one for five strings, and the value); %v into a reused one, want 0", fresh, reused)
	}
	if diff := cmp.Diff(in, &out); diff != "" {
		t.Errorf("decoded value differs (-sent +got):\n%s", diff)
	}
}

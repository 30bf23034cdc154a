package codec_test

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"github.com/kievrpc/kiev/codec"
)

func TestMsgpackJSONTagFallback(t *testing.T) {
	b, err := codec.Msgpack.Marshal(nil, &small{ID: 7, Name: "n"})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := codec.Msgpack.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	// ID has a msgpack tag, Name and Tags only a json tag.
	if _, ok := m["tags"]; len(m) != 3 || m["id"] != int64(7) || m["name"] != "n" || !ok {
		t.Errorf("encoded keys = %v, want map[id:7 name:n tags:<nil>]", m)
	}
}

func TestMsgpackIgnoresUnknownFields(t *testing.T) {
	type newer struct {
		small
		Extra map[string][]any
	}
	in := &newer{small: small{ID: 1, Name: "a"}, Extra: map[string][]any{"x": {1, "y", nil}}}
	b, err := codec.Msgpack.Marshal(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	var got small
	if err := codec.Msgpack.Unmarshal(b, &got); err != nil {
		t.Fatalf("Unmarshal into an older struct: %v", err)
	}
	if got.ID != 1 || got.Name != "a" {
		t.Errorf("got %+v, want ID 1 and Name a", got)
	}
}

// TestMsgpackRefusesAnotherType checks that a map none of whose keys names
// a field is an error that says so, as gob's "no fields matched": it is a
// value of another type, such as net/rpc's "Bad type" case, which passes
// the reply where the arguments go. It decoded as a zero struct. A map
// that shares one key, an empty map and a struct inside the value that
// matches nothing still decode, so either peer may add or drop fields.
func TestMsgpackRefusesAnotherType(t *testing.T) {
	type reply struct{ C int }
	type args struct{ A, B int }
	type withMap struct { // decoded by the library, not a plan
		A, B int
		M    map[string]int
	}
	type outer struct {
		In   args
		Name string
	}
	enc := func(v any) []byte {
		b, err := codec.Msgpack.Marshal(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, into := range []any{new(args), new(withMap)} {
		err := codec.Msgpack.Unmarshal(enc(&reply{C: 3}), into)
		if err == nil || !strings.Contains(err.Error(), "keys name none of the fields of type") ||
			!strings.Contains(err.Error(), "(A, B") {
			t.Errorf("decoding a reply into %T: %v; want an error that names the type and its fields", into, err)
		}
		for _, v := range []any{
			map[string]int{"C": 3, "B": 2}, // one key in common
			map[string]int{},               // nothing sent
			struct{ A, Z int }{1, 2},       // a newer peer's struct
		} {
			if err := codec.Msgpack.Unmarshal(enc(v), into); err != nil {
				t.Errorf("decoding %#v into %T: %v", v, into, err)
			}
		}
	}
	var o outer
	if err := codec.Msgpack.Unmarshal(enc(map[string]any{"In": reply{C: 1}, "Name": "x"}), &o); err != nil || o.Name != "x" {
		t.Errorf("a struct inside the value that matches nothing: %+v, %v; want it decoded as before", o, err)
	}
}

func TestMsgpackRejectsMalformed(t *testing.T) {
	for _, c := range []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"reserved code", []byte{0xc1}},
		{"trailing bytes", []byte{0x01, 0x02}},
		{"truncated map", []byte{0x81, 0xa1, 'a'}},
		{"truncated str16 length", []byte{0xda, 0x00}},
		{"truncated fixext", []byte{0xd7, 0xff, 0, 0}},
	} {
		var v any
		if err := codec.Msgpack.Unmarshal(c.in, &v); err == nil {
			t.Errorf("%s: Unmarshal(%x) returned no error", c.name, c.in)
		} else if !strings.HasPrefix(err.Error(), "kiev/codec: ") {
			t.Errorf("%s: error %q lacks the kiev/codec prefix", c.name, err)
		}
	}
}

// TestMsgpackHugeLengths checks that a few bytes declaring a huge array,
// map, string, binary or extension fail fast, without a huge allocation.
// msgpack v5 on its own preallocates the declared length of a slice.
func TestMsgpackHugeLengths(t *testing.T) {
	const n, z = 0x80, 0x00 // big-endian 2^31 is n, z, z, z
	targets := []func() any{
		func() any { return new(any) },
		func() any { return new([]int64) },
		func() any { return new([]any) },
		func() any { return new(map[string]any) },
		func() any { return new(string) },
		func() any { return new([]byte) },
		func() any { return new(small) },
		func() any { return new(rich) },
	}
	for _, in := range [][]byte{
		{0xdd, n, z, z, z, 0x01, 0x02, 0x03, 0x04, 0x05},         // array32
		{0xdf, n, z, z, z, 0xa1, 'a', 0x01, 0x02, 0x03},          // map32
		{0xdb, n, z, z, z, 'a', 'b', 'c', 'd', 'e'},              // str32
		{0xc6, n, z, z, z, 0x01, 0x02, 0x03, 0x04, 0x05},         // bin32
		{0xc9, n, z, z, z, 0x01, 0x02, 0x03, 0x04, 0x05},         // ext32
		{0xdc, 0xff, 0xff, 0x01},                                 // array16
		{0x81, 0xa4, 'T', 'a', 'g', 's', 0xdd, n, z, z, z, 0x01}, // a field
	} {
		for _, newValue := range targets {
			v := newValue()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := codec.Msgpack.Unmarshal(in, v)
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Errorf("Unmarshal(%x, %T) returned no error", in, v)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
				t.Errorf("Unmarshal(%x, %T) allocated %d bytes", in, v, alloc)
			}
		}
	}
}

func TestMsgpackDepth(t *testing.T) {
	nested := func(depth int) []byte {
		return append(bytes.Repeat([]byte{0x91}, depth), 0xc0) // [[[...nil]]]
	}
	var v any
	if err := codec.Msgpack.Unmarshal(nested(1000), &v); err != nil {
		t.Errorf("1000 nested arrays: %v", err)
	}
	if err := codec.Msgpack.Unmarshal(nested(1001), &v); err == nil {
		t.Error("1001 nested arrays: no error")
	}
	if err := codec.Msgpack.Unmarshal(nested(10_000_000), &v); err == nil {
		t.Error("10 million nested arrays: no error")
	}
}

func TestMsgpackAllocs(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("allocation counts are inflated by -cover and -race")
	}
	in := &small{ID: 42, Name: "kiev", Tags: []int64{1, 2, 3}}
	buf, err := codec.Msgpack.Marshal(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	marshal := testing.AllocsPerRun(100, func() {
		buf, _ = codec.Msgpack.Marshal(buf[:0], in)
	})
	var out small
	unmarshal := testing.AllocsPerRun(100, func() {
		out = small{}
		_ = codec.Msgpack.Unmarshal(buf, &out)
	})
	t.Logf("allocs per call: Marshal %v, Unmarshal %v", marshal, unmarshal)
	// Unmarshal allocates the string and the slice it returns, and no
	// more: a plain struct decodes through its plan (msgpack_fast.go), not
	// msgpack v5's reflection, which spends 4 more growing the slice.
	// Fields tagged omitempty cost msgpack up to 2 allocations more in
	// Marshal.
	if marshal > 1 || unmarshal > 2 {
		t.Errorf("allocs per call: Marshal %v, want <= 1; Unmarshal %v, want <= 2", marshal, unmarshal)
	}
}

// TestMsgpackRepeatedInterfaceKey is a regression test: msgpack v5 panics
// decoding into an interface that already holds a non-pointer value, which
// a repeated key reaches even in a zero struct.
func TestMsgpackRepeatedInterfaceKey(t *testing.T) {
	in := []byte{0x82, 0xa3, 'A', 'n', 'y', 0xa1, 'a', 0xa3, 'A', 'n', 'y', 0xa1, 'b'}
	if err := codec.Msgpack.Unmarshal(in, new(rich)); err == nil {
		t.Error("Unmarshal returned no error")
	}
	prefilled := &rich{Any: "text"}
	one := []byte{0x81, 0xa3, 'A', 'n', 'y', 0xa1, 'a'}
	if err := codec.Msgpack.Unmarshal(one, prefilled); err == nil {
		t.Error("Unmarshal into an interface holding a string returned no error")
	}
}

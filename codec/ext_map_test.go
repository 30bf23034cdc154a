package codec_test

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/kievrpc/kiev/codec"
)

// TestMsgpackExtReadAsMap is the regression test of a fuzzer's find:
// msgpack v5, decoding into a map, reads an extension whose data starts
// with nil as that nil and goes on reading the rest of the extension's
// data as the next values, where an array header declared 800 million
// elements that checkMsgpack had seen as extension bytes. The 15 bytes
// made it allocate 13 GB.
//
// The plain structs decode through a plan, which marks the codes for the
// library only when it hands it a value: here, the unknown field's.
func TestMsgpackExtReadAsMap(t *testing.T) {
	bad := "\x99\xc0\xc0\xc0\xd50\xc0\xdd00000"
	type plain struct {
		Tags  []string
		Inner struct{ N int }
	}
	// Wrapped, the bytes are a valid value to skip, or a key of the wrong
	// type: only the allocation bound holds for them.
	for i, in := range [][]byte{
		[]byte(bad),
		[]byte("\x81\xa2zz" + bad),       // as an unknown field's value
		[]byte("\x82\xa2zz" + bad + bad), // and as the next key
	} {
		for _, v := range []any{new(rich), new(map[string]string), new(map[string]any), new(struct{ M map[int]int }), new(any), new(small), new(plain)} {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := codec.Msgpack.Unmarshal(in, v)
			runtime.ReadMemStats(&after)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
				t.Errorf("Unmarshal(%x, %T) allocated %d bytes", in, v, alloc)
			}
			if _, isAny := v.(*any); err == nil && !isAny && i == 0 {
				t.Errorf("Unmarshal(%x, %T): no error", in, v)
			}
		}
	}
}

// TestMsgpackTimesBesideMaps checks that the guard above refuses no real
// value: times, whose extension data may start like a map, in a struct
// that has a map.
func TestMsgpackTimesBesideMaps(t *testing.T) {
	type withMap struct {
		When  time.Time
		Attrs map[string]string
		After []time.Time
	}
	rng := rand.New(rand.NewPCG(3, 4))
	refused := 0
	for range 20000 {
		when := time.Unix(rng.Int64N(1<<34), rng.Int64N(1e9)).UTC()
		in := withMap{When: when, Attrs: map[string]string{"k": "v"}, After: []time.Time{when.Add(time.Duration(rng.Int64N(1e9)))}}
		b, err := codec.Msgpack.Marshal(nil, &in)
		if err != nil {
			t.Fatal(err)
		}
		var out withMap
		if err := codec.Msgpack.Unmarshal(b, &out); err != nil {
			refused++
			if refused < 5 {
				t.Errorf("%v: %v", when, err)
			}
			continue
		}
		if !out.When.Equal(in.When) {
			t.Fatalf("round trip of %v gave %v", in.When, out.When)
		}
	}
	if refused > 0 {
		t.Errorf("%d of 20000 real values refused", refused)
	}
}

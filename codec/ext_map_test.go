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
func TestMsgpackExtReadAsMap(t *testing.T) {
	in := []byte("\x99\xc0\xc0\xc0\xd50\xc0\xdd00000")
	for _, v := range []any{new(rich), new(map[string]string), new(map[string]any), new(struct{ M map[int]int }), new(any)} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := codec.Msgpack.Unmarshal(in, v)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
			t.Errorf("Unmarshal(%x, %T) allocated %d bytes", in, v, alloc)
		}
		if _, isAny := v.(*any); err == nil && !isAny {
			t.Errorf("Unmarshal(%x, %T): no error", in, v)
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

package promreg

import (
	"fmt"
	"sync"
	"testing"
)

func TestSeries(t *testing.T) {
	var s Series[string, string]
	made := 0
	var mu sync.Mutex
	get := func(k string) string {
		return s.Get(k, 2, func(overflow bool) string {
			mu.Lock()
			made++
			mu.Unlock()
			if overflow {
				return "other"
			}
			return k
		})
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 3 {
				get(fmt.Sprint("k", i))
			}
		})
	}
	wg.Wait()
	if made != 3 {
		t.Errorf("made %d series for 3 keys", made)
	}
	if a, b, c := get("k0"), get("k1"), get("k2"); a != "k0" || b != "k1" || c != "other" {
		t.Errorf("series %q %q %q; want the third key past the cap of 2 labelled other", a, b, c)
	}
	if n := testing.AllocsPerRun(100, func() { get("k1") }); n != 0 {
		t.Errorf("a lookup of a known key allocates %v times", n)
	}
}

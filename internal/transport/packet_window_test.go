package transport

import "testing"

// TestAnsweredWindow marks calls answered in and out of order, and far
// ahead, and checks what the window says of each id.
func TestAnsweredWindow(t *testing.T) {
	var w answered
	w.advance(1) // the client's first id
	for _, id := range []uint64{1, 2, 4, 70, 200} {
		w.mark(id)
	}
	if w.base != 3 {
		t.Errorf("base = %d after marking 1, 2, 4, 70, 200; want 3", w.base)
	}
	for id, want := range map[uint64]bool{0: true, 1: true, 2: true, 3: false, 4: true, 5: false, 69: false, 70: true, 71: false, 200: true, 201: false} {
		if got := w.has(id); got != want {
			t.Errorf("has(%d) = %v; want %v", id, got, want)
		}
	}
	w.mark(3)
	if w.base != 5 {
		t.Errorf("base = %d after marking 3; want 5", w.base)
	}
	far := ^uint64(0) - 1
	w.mark(far) // a hostile id: the window moves, nothing is allocated
	if !w.has(far) || w.has(far+1) || !w.has(far-answeredWindow) || w.base != far-answeredWindow+1 {
		t.Errorf("after marking %d: base %d, has(far) %v, has(far+1) %v", far, w.base, w.has(far), w.has(far+1))
	}
	// Every shift, word by word and bit by bit, keeps the marks.
	for shift := uint64(1); shift < 200; shift++ {
		var v answered
		v.mark(0)
		for _, id := range []uint64{3, 64, 65, 130, 1000} {
			v.mark(id)
		}
		v.advance(shift)
		for _, id := range []uint64{3, 64, 65, 130, 1000} {
			if !v.has(id) {
				t.Fatalf("shift %d: has(%d) = false", shift, id)
			}
		}
		for _, id := range []uint64{200, 201, 999, 1001} {
			if v.has(id) {
				t.Fatalf("shift %d: has(%d) = true", shift, id)
			}
		}
	}
}

package transport

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The table's rules, as a connection meets them: calls in and out once,
// a retiring table fails with its error once its last call is out, and a
// failed one hands its calls over once and takes no more.
func TestPending(t *testing.T) {
	var p Pending[string]
	for id, c := range map[uint64]string{1: "a", 2: "b", 3: "c"} {
		if err := p.Add(id, c); err != nil {
			t.Fatalf("Add to an open table: %v", err)
		}
	}
	if c, ok, retired := p.Take(2); c != "b" || !ok || retired != nil {
		t.Fatalf("Take(2) = %q, %v, %v; want b, true, nil", c, ok, retired)
	}
	if _, ok, _ := p.Take(2); ok || p.Has(2) {
		t.Fatal("a call taken twice")
	}

	bye := errors.New("server draining")
	if idle := p.Retire(bye); idle {
		t.Fatal("Retire with two calls in says idle")
	}
	if err := p.Add(4, "d"); err != bye || p.Closed() != bye {
		t.Fatalf("Add to a retiring table = %v; want its error", err)
	}
	if _, _, retired := p.Take(1); retired != nil {
		t.Fatalf("Take of a call not the last: retired = %v", retired)
	}
	if _, _, retired := p.Take(3); retired != bye {
		t.Fatalf("Take of the last call of a retiring table: retired = %v; want %v", retired, bye)
	}

	var q Pending[string]
	_ = q.Add(7, "x")
	_ = q.Add(9, "y")
	dead := errors.New("connection reset")
	calls, first := q.Fail(dead)
	if !first || !slices.Equal(slices.Sorted(maps.Keys(calls)), []uint64{7, 9}) || q.Len() != 0 {
		t.Fatalf("Fail = %v, %v; want both calls, first", calls, first)
	}
	if calls, first := q.Fail(errors.New("later")); first || calls != nil || q.Err() != dead {
		t.Fatalf("a second Fail = %v, %v, err %v; want nothing, and the first error kept", calls, first, q.Err())
	}
	if err := q.Add(10, "z"); err != dead {
		t.Fatalf("Add to a failed table = %v; want %v", err, dead)
	}
	if _, _, retired := q.Take(7); retired != nil {
		t.Fatal("a failed table retires")
	}
}

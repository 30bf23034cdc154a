package balance

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// hashKeys returns n keys shaped like real ones.
func hashKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint("user:", i)
	}
	return keys
}

// owners maps each key to the ID of the node p picks for it.
func owners(t *testing.T, p Picker, keys []string) []string {
	t.Helper()
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = mustPick(t, p, keyInfo(k)).ID()
	}
	return ids
}

func TestHashPinned(t *testing.T) {
	// Clients of different processes and versions must agree on where
	// keys go: these values must never change.
	for _, tt := range []struct {
		key  string
		want uint64
	}{
		{"", 0xf52a15e9a9b5e89b},
		{"user:42", 0xd68cb863fc5e0c34},
		{"tcp://10.0.0.7:7000", 0xe8b8e0b975e8b7},
	} {
		if got := hashKey(tt.key); got != tt.want {
			t.Errorf("hashKey(%q) = %#x, want %#x", tt.key, got, tt.want)
		}
	}
	for _, tt := range []struct {
		id   string
		r    int
		want uint64
	}{
		{"tcp://10.0.0.7:7000", 0, 0xee425e664c191813},
		{"tcp://10.0.0.7:7000", 1, 0xe059065f9c06ff1a},
		{"tcp://10.0.0.7:7000", 159, 0xaf5291cb2f89ac0},
		{"unix:///run/kiev.sock", 300, 0x228700bc9b22e5fd},
	} {
		if got := hashPoint(tt.id, tt.r); got != tt.want {
			t.Errorf("hashPoint(%q, %d) = %#x, want %#x", tt.id, tt.r, got, tt.want)
		}
	}
}

func TestHashPinnedPlacement(t *testing.T) {
	// Pins the ring as a whole (its points, search and wrap-around), not
	// just the hashes: these placements must never change.
	p := ConsistentHash().Build(makeNodes(3))
	for _, tt := range []struct{ key, want string }{
		{"", "tcp://10.0.0.0:7000"},
		{"user:1", "tcp://10.0.0.0:7000"},
		{"user:2", "tcp://10.0.0.2:7000"},
		{"user:3", "tcp://10.0.0.0:7000"},
		{"user:6", "tcp://10.0.0.2:7000"},
		{"order:1", "tcp://10.0.0.1:7000"},
		{"order:2", "tcp://10.0.0.2:7000"},
	} {
		if got := mustPick(t, p, keyInfo(tt.key)).ID(); got != tt.want {
			t.Errorf("key %q went to %s, want %s", tt.key, got, tt.want)
		}
	}
}

func TestHashSameAcrossPickers(t *testing.T) {
	// Two clients in different processes have their own Node values, in
	// whatever order; they must send each key to the same node.
	keys := append(hashKeys(10000), "", "ключ", strings.Repeat("x", 1000))
	a := makeNodes(7)
	b := makeNodes(7)
	slices.Reverse(b)
	pa := ConsistentHash().Build(a)
	pb := ConsistentHash().Build(b)
	got, want := owners(t, pb, keys), owners(t, pa, keys)
	for i := range keys {
		if got[i] != want[i] {
			t.Fatalf("key %q: one picker picks %s, another %s", keys[i], want[i], got[i])
		}
	}
	// And a Picker sends a key to the same node every time.
	if again := owners(t, pa, keys); !slices.Equal(again, want) {
		t.Errorf("a Picker sent keys to different nodes on a second pass")
	}
}

func TestHashKeyMovement(t *testing.T) {
	keys := hashKeys(100000)
	for _, n := range []int{3, 5, 10} {
		nodes := makeNodes(n)
		before := owners(t, ConsistentHash().Build(nodes), keys)
		fair := 1 / float64(n)

		t.Run(fmt.Sprintf("Leave/N=%d", n), func(t *testing.T) {
			var fractions []string
			for gone := range nodes {
				rest := slices.Delete(slices.Clone(nodes), gone, gone+1)
				after := owners(t, ConsistentHash().Build(rest), keys)
				moved := 0
				for i := range keys {
					if after[i] == before[i] {
						continue
					}
					moved++
					if before[i] != nodes[gone].ID() {
						t.Fatalf("key %q moved from %s to %s when %s left", keys[i], before[i], after[i], nodes[gone].ID())
					}
				}
				f := float64(moved) / float64(len(keys))
				fractions = append(fractions, fmt.Sprintf("%.4f", f))
				if math.Abs(f-fair) > 0.35*fair {
					t.Errorf("%s left: %.4f of the keys moved, want %.4f ± 35%%", nodes[gone].ID(), f, fair)
				}
			}
			t.Logf("N=%d, one node leaves: fraction moved %v, want about %.4f", n, fractions, fair)
		})

		t.Run(fmt.Sprintf("Join/N=%d", n), func(t *testing.T) {
			newcomer := &fakeNode{id: nodeID(n), weight: 1}
			more := append(slices.Clone(nodes), newcomer)
			sortByID(more)
			after := owners(t, ConsistentHash().Build(more), keys)
			moved := 0
			for i := range keys {
				if after[i] == before[i] {
					continue
				}
				moved++
				if after[i] != newcomer.ID() {
					t.Fatalf("key %q moved from %s to %s when %s joined", keys[i], before[i], after[i], newcomer.ID())
				}
			}
			f, want := float64(moved)/float64(len(keys)), 1/float64(n+1)
			if math.Abs(f-want) > 0.35*want {
				t.Errorf("%s joined: %.4f of the keys moved, want %.4f ± 35%%", newcomer.ID(), f, want)
			}
			t.Logf("N=%d, one node joins: fraction moved %.4f, want about %.4f", n, f, want)
		})
	}
}

func TestHashBalance(t *testing.T) {
	// With 160 points per node the share of each node has a relative
	// spread of about 1/sqrt(160) = 8%; the busiest of 100 nodes measures
	// 1.19 times its fair share.
	const tolerance = 1.3
	keys := hashKeys(100000)
	for _, n := range []int{2, 3, 5, 10, 20, 50, 100} {
		p := ConsistentHash().Build(makeNodes(n))
		counts := map[string]int{}
		for _, id := range owners(t, p, keys) {
			counts[id]++
		}
		if len(counts) != n {
			t.Errorf("N=%d: only %d nodes got keys", n, len(counts))
		}
		most, least := 0, len(keys)
		for _, c := range counts {
			most, least = max(most, c), min(least, c)
		}
		fair := float64(len(keys)) / float64(n)
		t.Logf("N=%d: busiest node %.3f × fair share, idlest %.3f ×", n, float64(most)/fair, float64(least)/fair)
		if float64(most) > tolerance*fair {
			t.Errorf("N=%d: a node got %d keys, %.3f times its fair share %.0f; want at most %.1f times",
				n, most, float64(most)/fair, fair, tolerance)
		}
	}
}

func TestHashVirtualNodes(t *testing.T) {
	nodes := makeNodes(4)
	for _, tt := range []struct {
		opts []HashOption
		want int // points per node
	}{
		{nil, 160},
		{[]HashOption{VirtualNodes(0)}, 160},
		{[]HashOption{VirtualNodes(1)}, 1},
		{[]HashOption{VirtualNodes(500)}, 500},
		{[]HashOption{VirtualNodes(7), VirtualNodes(0)}, 160},
		{[]HashOption{VirtualNodes(7), BoundedLoad(1.5)}, 7},
	} {
		p := ConsistentHash(tt.opts...).Build(nodes).(*hashPicker)
		if got := len(p.points); got != tt.want*len(nodes) {
			t.Errorf("ConsistentHash(%d options) built a ring of %d points over %d nodes, want %d",
				len(tt.opts), got, len(nodes), tt.want*len(nodes))
		}
		if !slices.IsSorted(p.points) {
			t.Errorf("ring is not sorted")
		}
	}
}

func TestHashOptionPanics(t *testing.T) {
	for _, tt := range []struct {
		name   string
		option func() HashOption
		panics bool
	}{
		{"VirtualNodes(-1)", func() HashOption { return VirtualNodes(-1) }, true},
		{"VirtualNodes(0)", func() HashOption { return VirtualNodes(0) }, false},
		{"VirtualNodes(1)", func() HashOption { return VirtualNodes(1) }, false},
		{"BoundedLoad(0)", func() HashOption { return BoundedLoad(0) }, false},
		{"BoundedLoad(1.0001)", func() HashOption { return BoundedLoad(1.0001) }, false},
		{"BoundedLoad(1.25)", func() HashOption { return BoundedLoad(1.25) }, false},
		{"BoundedLoad(3)", func() HashOption { return BoundedLoad(3) }, false},
		{"BoundedLoad(1)", func() HashOption { return BoundedLoad(1) }, true},
		{"BoundedLoad(0.5)", func() HashOption { return BoundedLoad(0.5) }, true},
		{"BoundedLoad(-1.25)", func() HashOption { return BoundedLoad(-1.25) }, true},
		{"BoundedLoad(NaN)", func() HashOption { return BoundedLoad(math.NaN()) }, true},
		{"BoundedLoad(+Inf)", func() HashOption { return BoundedLoad(math.Inf(1)) }, true},
		{"BoundedLoad(-Inf)", func() HashOption { return BoundedLoad(math.Inf(-1)) }, true},
	} {
		var msg any
		func() {
			defer func() { msg = recover() }()
			tt.option()
		}()
		switch {
		case tt.panics && msg == nil:
			t.Errorf("%s did not panic", tt.name)
		case !tt.panics && msg != nil:
			t.Errorf("%s panicked: %v", tt.name, msg)
		case tt.panics && !strings.HasPrefix(fmt.Sprint(msg), "kiev/balance: "+tt.name[:strings.IndexByte(tt.name, '(')]):
			t.Errorf("%s panicked with %q, want a message that starts with kiev/balance: and names the option", tt.name, msg)
		}
	}
}

func TestHashNoKey(t *testing.T) {
	// Calls without a key go to each node in turn, bound or not.
	for _, b := range []Balancer{ConsistentHash(), ConsistentHash(BoundedLoad(1.25))} {
		nodes := makeNodes(3)
		nodes[0].(*fakeNode).inFlight.Store(100)
		p := b.Build(nodes)
		counts := map[Node]int{}
		for range 3000 {
			counts[mustPick(t, p, Info{HashKey: "ignored"})]++
		}
		for _, n := range nodes {
			if counts[n] != 1000 {
				t.Errorf("node %v got %d of 3000 calls without a key, want 1000", n, counts[n])
			}
		}
	}
}

func TestBoundedLoadSkipsFullNode(t *testing.T) {
	// Of 5 idle nodes with c = 1.25, the bound is ceil(1.25 × (T+1) / 5):
	// one call with T = 0, so a node with 1 call in flight (T = 1) is
	// full, and with 2 such nodes (T = 2) so are both.
	nodes := makeNodes(5)
	plain := ConsistentHash().Build(nodes)
	bounded := ConsistentHash(BoundedLoad(1.25)).Build(nodes)
	without := func(gone ...Node) Picker {
		rest := slices.DeleteFunc(slices.Clone(nodes), func(n Node) bool { return slices.Contains(gone, n) })
		return ConsistentHash().Build(rest)
	}
	reset := func() {
		for _, n := range nodes {
			n.(*fakeNode).inFlight.Store(0)
		}
	}
	for _, k := range hashKeys(200) {
		info := keyInfo(k)
		reset()
		home := mustPick(t, plain, info)
		if got := mustPick(t, bounded, info); got != home {
			t.Fatalf("key %q with no calls in flight: bounded pick %v, want its home %v", k, got, home)
		}

		// The key's node is full: the call goes to the next node on the
		// ring, the one the key would have if its node left.
		home.(*fakeNode).inFlight.Store(1)
		next := mustPick(t, without(home), info)
		if got := mustPick(t, bounded, info); got != next {
			t.Fatalf("key %q, home %v full: bounded pick %v, want the next node on the ring %v", k, home, got, next)
		}

		// The next node is full too: on to the one after.
		next.(*fakeNode).inFlight.Store(1)
		third := mustPick(t, without(home, next), info)
		if got := mustPick(t, bounded, info); got != third {
			t.Fatalf("key %q, %v and %v full: bounded pick %v, want %v", k, home, next, got, third)
		}

		// Calls elsewhere raise the bound to 3, so the key's node has
		// room again.
		for _, n := range nodes {
			if n != home && n != next {
				n.(*fakeNode).inFlight.Store(2)
			}
		}
		if got := mustPick(t, bounded, info); got != home {
			t.Fatalf("key %q, bound raised to 2: bounded pick %v, want its home %v", k, got, home)
		}
	}
}

func TestBoundedLoadSimulation(t *testing.T) {
	// Skewed traffic: half the calls carry one hot key. Keep about 200
	// calls in flight, ending a random one for each new one, and check
	// the bound at every placement.
	const (
		n        = 10
		c        = 1.25
		inFlight = 200
		calls    = 100000
	)
	rng := rand.New(rand.NewPCG(1, 2))
	keys := hashKeys(1000)
	for _, bounded := range []bool{true, false} {
		nodes := makeNodes(n)
		var p Picker
		if bounded {
			p = ConsistentHash(BoundedLoad(c)).Build(nodes)
		} else {
			p = ConsistentHash().Build(nodes)
		}
		var open []*fakeNode // the node of each call in flight
		peak := 0
		for range calls {
			key := "hot"
			if rng.IntN(2) == 0 {
				key = keys[rng.IntN(len(keys))]
			}
			node := mustPick(t, p, keyInfo(key)).(*fakeNode)
			limit := int(math.Ceil(c * float64(len(open)+1) / n))
			load := node.inFlight.Add(1)
			open = append(open, node)
			peak = max(peak, int(load))
			if bounded && int(load) > limit {
				t.Fatalf("node %v has %d calls in flight, over the bound %d for %d calls on %d nodes",
					node, load, limit, len(open), n)
			}
			if len(open) > inFlight {
				i := rng.IntN(len(open))
				open[i].inFlight.Add(-1)
				open[i] = open[len(open)-1]
				open = open[:len(open)-1]
			}
		}
		t.Logf("bounded=%v: busiest node peaked at %d calls in flight; average %d, bound %d",
			bounded, peak, inFlight/n, int(math.Ceil(c*(inFlight+1)/n)))
		if !bounded && peak <= int(math.Ceil(c*(inFlight+1)/n)) {
			t.Errorf("without a bound the hot key's node peaked at %d calls; the test's traffic is not skewed enough", peak)
		}
	}
}

package balance

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// loadedNodes returns nodes with the given calls in flight.
func loadedNodes(loads ...int) []Node {
	nodes := makeNodes(len(loads))
	for i, l := range loads {
		nodes[i].(*fakeNode).inFlight.Store(int64(l))
	}
	return nodes
}

func TestLeastLoadedPicksLessLoaded(t *testing.T) {
	tests := []struct {
		loads []int
		draws []int // what randIntN returns, in order
		want  []int // acceptable picks, by index
	}{
		{[]int{5, 0, 3}, []int{0, 0}, []int{1}}, // nodes 0 and 1
		{[]int{5, 0, 3}, []int{2, 0}, []int{2}}, // nodes 2 and 0
		{[]int{5, 0, 3}, []int{1, 1}, []int{1}}, // nodes 1 and 2
		{[]int{5, 0, 3}, []int{2, 1}, []int{1}}, // nodes 2 and 1
		{[]int{0, 9}, []int{1, 0}, []int{0}},
		{[]int{4, 4}, []int{0, 0}, []int{0, 1}}, // a tie: either
		{[]int{7, 1, 7, 7, 7}, []int{3, 3}, []int{3, 4}},
	}
	for _, tt := range tests {
		nodes := loadedNodes(tt.loads...)
		draws := slices.Clone(tt.draws)
		bounds := []int{len(nodes), len(nodes) - 1} // the first draw is of n, the second of the n-1 others
		setRand(t, func(n int) int {
			if len(draws) == 0 {
				t.Fatalf("loads %v: more than %d random draws", tt.loads, len(tt.draws))
			}
			if want := bounds[len(tt.draws)-len(draws)]; n != want {
				t.Errorf("loads %v: randIntN(%d), want randIntN(%d)", tt.loads, n, want)
			}
			d := draws[0]
			draws = draws[1:]
			return d
		})
		p := LeastLoaded().Build(nodes)
		got := mustPick(t, p, Info{})
		if !slices.ContainsFunc(tt.want, func(i int) bool { return nodes[i] == got }) {
			t.Errorf("loads %v, draws %v: picked %v, want one of nodes %v", tt.loads, tt.draws, got, tt.want)
		}
		if len(draws) != 0 {
			t.Errorf("loads %v: %d random draws left unused", tt.loads, len(draws))
		}
	}
}

func TestLeastLoadedOneNode(t *testing.T) {
	setRand(t, func(int) int { t.Fatal("randIntN called with one node"); return 0 })
	nodes := loadedNodes(3)
	if got := mustPick(t, LeastLoaded().Build(nodes), Info{}); got != nodes[0] {
		t.Errorf("Pick = %v, want the only node %v", got, nodes[0])
	}
}

func TestLeastLoadedDistinct(t *testing.T) {
	// The two choices are distinct nodes, so of two nodes the idle one
	// always wins.
	nodes := loadedNodes(1, 0)
	p := LeastLoaded().Build(nodes)
	for range 1000 {
		if got := mustPick(t, p, Info{}); got != nodes[1] {
			t.Fatalf("Pick = %v (1 in flight), want the idle %v", got, nodes[1])
		}
	}
}

func TestLeastLoadedSimulation(t *testing.T) {
	// Keep 100 calls in flight on 10 nodes, ending a random call for each
	// new one. One random choice lets the busiest node drift far above the
	// average of 10; two choices keep it close.
	const (
		n        = 10
		inFlight = 100
		calls    = 100000
	)
	rng := rand.New(rand.NewPCG(3, 4))
	setRand(t, rng.IntN)
	simulate := func(p Picker) (peak int) {
		var open []*fakeNode // the node of each call in flight
		for range calls {
			node := mustPick(t, p, Info{}).(*fakeNode)
			peak = max(peak, int(node.inFlight.Add(1)))
			open = append(open, node)
			if len(open) > inFlight {
				i := rng.IntN(len(open))
				open[i].inFlight.Add(-1)
				open[i] = open[len(open)-1]
				open = open[:len(open)-1]
			}
		}
		return peak
	}
	twoChoices := simulate(LeastLoaded().Build(makeNodes(n)))
	oneChoice := simulate(randomPicker{makeNodes(n)})
	t.Logf("busiest node peaked at %d calls in flight with two choices, %d with one; average %d",
		twoChoices, oneChoice, inFlight/n)
	if twoChoices > 2*inFlight/n {
		t.Errorf("with two choices the busiest node peaked at %d calls, want at most twice the average %d", twoChoices, inFlight/n)
	}
	if twoChoices >= oneChoice {
		t.Errorf("two choices peaked at %d calls, not below one random choice's %d", twoChoices, oneChoice)
	}
}

// randomPicker picks a node at random, the baseline two choices beat.
type randomPicker struct{ nodes []Node }

func (p randomPicker) Pick(Info) (Result, error) {
	return Result{Node: p.nodes[randIntN(len(p.nodes))]}, nil
}

// streamNode is a node that counts its open streams apart from its calls.
type streamNode struct {
	fakeNode
	streams int
}

func (n *streamNode) Streams() int { return n.streams }

func TestLeastLoadedWeighsOpenStreamsForAStream(t *testing.T) {
	// Node a has many calls in flight and no streams; node b has no call
	// in flight and many streams. A call goes to b, a stream to a.
	a := &streamNode{fakeNode: fakeNode{id: "a", weight: 1}}
	a.inFlight.Store(50)
	b := &streamNode{fakeNode: fakeNode{id: "b", weight: 1}, streams: 50}
	setRand(t, func(n int) int { return 0 }) // draws a, then b
	p := LeastLoaded().Build([]Node{a, b})
	if got := mustPick(t, p, Info{}); got != b {
		t.Fatalf("a call went to %v, want b, the node with fewer calls in flight", got)
	}
	if got := mustPick(t, p, Info{Stream: true}); got != a {
		t.Fatalf("a stream went to %v, want a, the node with fewer open streams", got)
	}
}

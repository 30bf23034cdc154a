package balance

import (
	"math"
	"strings"
	"testing"
)

// weightedNodes returns nodes named a, b, c, ... with the given weights.
func weightedNodes(weights ...int) []Node {
	nodes := make([]Node, len(weights))
	for i, w := range weights {
		nodes[i] = &fakeNode{id: string(rune('a' + i)), weight: w}
	}
	return nodes
}

// pickIDs concatenates the IDs of n picks.
func pickIDs(t *testing.T, p Picker, n int) string {
	t.Helper()
	var b strings.Builder
	for range n {
		b.WriteString(mustPick(t, p, Info{}).ID())
	}
	return b.String()
}

func TestWeightedSequence(t *testing.T) {
	setRand(t, func(int) int { return 0 }) // start at the beginning of the cycle
	tests := []struct {
		weights []int
		want    string // one cycle
	}{
		{[]int{5, 1, 1}, "aabacaa"}, // nginx's example
		{[]int{1, 1, 1}, "abc"},
		{[]int{3, 2}, "ababa"},
		{[]int{2, 1}, "aba"},
		{[]int{1, 4}, "bbabb"},
		{[]int{0, -3, 2}, "cabc"}, // weights below 1 count as 1
		{[]int{7}, "aaaaaaa"},
	}
	for _, tt := range tests {
		p := WeightedRoundRobin().Build(weightedNodes(tt.weights...))
		want := strings.Repeat(tt.want, 3)
		if got := pickIDs(t, p, len(want)); got != want {
			t.Errorf("weights %v: picks %q, want %q", tt.weights, got, want)
		}
	}
}

func TestWeightedStart(t *testing.T) {
	const cycle = "aabacaa" // weights 5, 1, 1
	for phase := range len(cycle) {
		setRand(t, func(n int) int {
			if n != len(cycle) {
				t.Errorf("randIntN(%d), want randIntN(%d), the total weight", n, len(cycle))
			}
			return phase
		})
		p := WeightedRoundRobin().Build(weightedNodes(5, 1, 1))
		want := cycle[phase:] + cycle + cycle[:phase]
		if got := pickIDs(t, p, len(want)); got != want {
			t.Errorf("phase %d: picks %q, want %q", phase, got, want)
		}
	}
}

func TestWeightedProportions(t *testing.T) {
	tests := [][]int{
		{5, 1, 1},
		{3, 2},
		{10, 7, 3, 1},
		{100, 1},
		{1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
		{2, 3, 5, 7, 11, 13},
	}
	for _, weights := range tests {
		total := 0
		for _, w := range weights {
			total += w
		}
		// From a random start, every run of total picks holds exactly
		// weight picks of each node.
		p := WeightedRoundRobin().Build(weightedNodes(weights...))
		picks := pickIDs(t, p, 200*total)
		for start := 0; start+total <= len(picks); start++ {
			window := picks[start : start+total]
			for i, w := range weights {
				if got := strings.Count(window, string(rune('a'+i))); got != w {
					t.Fatalf("weights %v: picks[%d:%d] = %q has %d of node %c, want %d",
						weights, start, start+total, window, got, 'a'+i, w)
				}
			}
		}
	}
}

func TestWeightedHuge(t *testing.T) {
	// Weights are capped so that the total cannot overflow, and Build
	// stays fast however large the weights.
	var maxN int
	setRand(t, func(n int) int { maxN = max(maxN, n); return n - 1 })
	p := WeightedRoundRobin().Build(weightedNodes(math.MaxInt, math.MaxInt))
	if maxN > phaseWork {
		t.Errorf("Build moved up to %d steps into the cycle, want at most %d", maxN, phaseWork)
	}
	got := pickIDs(t, p, 8)
	if got != "abababab" && got != "babababa" {
		t.Errorf("equal huge weights: picks %q, want a and b in turn", got)
	}
	p = WeightedRoundRobin().Build(weightedNodes(math.MaxInt, 1))
	if got := pickIDs(t, p, 1000); strings.Count(got, "b") > 1 {
		t.Errorf("weights MaxInt, 1: picks %q, want b at most once", got)
	}
}

package balance

import (
	"math"
	"slices"
	"sync"
)

// WeightedRoundRobin returns the Balancer named "weighted_round_robin".
// Its Pickers use nginx's smooth weighted round robin: on each call every
// node's current value grows by its weight, the node with the largest
// value (the first in ID order on a tie) gets the call, and its value
// drops by the total weight. In every run of W calls, W the total weight,
// each node gets exactly its weight's worth, spread out: weights 5, 1, 1
// give a a b a c a a.
//
// Weights are read once, in Build; a weight below 1 counts as 1, and one
// above math.MaxInt32 as math.MaxInt32. Build starts the Picker at a random
// point of its cycle, so that clients built together do not send in step.
// Pick holds a lock while it walks the nodes once, and ignores InFlight.
func WeightedRoundRobin() Balancer { return weightedRoundRobin{} }

// phaseWork bounds the node updates Build spends on moving the Picker to
// its random starting point; with a large total weight the start falls in
// an early part of the cycle.
const phaseWork = 1 << 16

type weightedRoundRobin struct{}

func (weightedRoundRobin) Name() string { return "weighted_round_robin" }

func (weightedRoundRobin) Build(nodes []Node) Picker {
	if len(nodes) == 0 {
		return noNodes{}
	}
	p := &wrrPicker{
		nodes:   slices.Clone(nodes),
		weights: make([]int64, len(nodes)),
		current: make([]int64, len(nodes)),
	}
	for i, n := range p.nodes {
		w := int64(min(max(n.Weight(), 1), math.MaxInt32))
		p.weights[i] = w
		p.total += w
	}
	steps := min(p.total, max(1, phaseWork/int64(len(nodes))))
	for range randIntN(int(steps)) {
		p.next()
	}
	return p
}

type wrrPicker struct {
	nodes   []Node
	weights []int64
	total   int64

	mu      sync.Mutex
	current []int64 // guarded by mu
}

func (p *wrrPicker) Pick(Info) (Result, error) {
	p.mu.Lock()
	i := p.next()
	p.mu.Unlock()
	return Result{Node: p.nodes[i]}, nil
}

// next advances the smooth weighted round robin by one call and returns
// the index of the node that gets it. The caller holds p.mu.
func (p *wrrPicker) next() int {
	best := 0
	for i, w := range p.weights {
		p.current[i] += w
		if p.current[i] > p.current[best] {
			best = i
		}
	}
	p.current[best] -= p.total
	return best
}

package balance

import "slices"

// LeastLoaded returns the Balancer named "least_loaded". Its Pickers use
// the power of two random choices: for each call they draw two distinct
// nodes at random and send the call to the one with fewer calls in flight
// (Node.InFlight), either one on a tie; for a stream (Info.Stream), the
// one with fewer open streams (StreamNode.Streams), if the nodes count
// them. Two random choices keep the
// busiest node far closer to the average than one choice does, without
// the herding of always taking the least loaded node, which every client
// would pick at once. LeastLoaded ignores Weight.
func LeastLoaded() Balancer { return leastLoaded{} }

type leastLoaded struct{}

func (leastLoaded) Name() string { return "least_loaded" }

func (leastLoaded) Build(nodes []Node) Picker {
	if len(nodes) == 0 {
		return noNodes{}
	}
	return &llPicker{nodes: slices.Clone(nodes)}
}

type llPicker struct {
	nodes []Node
}

func (p *llPicker) Pick(info Info) (Result, error) {
	n := len(p.nodes)
	if n == 1 {
		return Result{Node: p.nodes[0]}, nil
	}
	i := randIntN(n)
	j := randIntN(n - 1)
	if j >= i {
		j++ // j is drawn from the n-1 nodes other than i
	}
	a, b := p.nodes[i], p.nodes[j]
	if info.Stream {
		if load(b, true) < load(a, true) {
			a = b
		}
		return Result{Node: a}, nil
	}
	if b.InFlight() < a.InFlight() {
		a = b
	}
	return Result{Node: a}, nil
}

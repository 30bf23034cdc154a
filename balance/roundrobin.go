package balance

import (
	"slices"
	"sync/atomic"
)

// RoundRobin returns the Balancer named "round_robin", kiev's default. Its
// Pickers send each call to the next node in ID order, starting at a
// random node so that clients started together do not all call the same
// node first. Pick takes no lock. RoundRobin ignores Weight and InFlight.
func RoundRobin() Balancer { return roundRobin{} }

type roundRobin struct{}

func (roundRobin) Name() string { return "round_robin" }

func (roundRobin) Build(nodes []Node) Picker {
	if len(nodes) == 0 {
		return noNodes{}
	}
	p := &rrPicker{nodes: slices.Clone(nodes)}
	p.next.Store(uint64(randIntN(len(nodes))))
	return p
}

// rrPicker hands out nodes[next % len(nodes)] and advances next.
type rrPicker struct {
	nodes []Node
	next  atomic.Uint64
}

func (p *rrPicker) Pick(Info) (Result, error) {
	i := p.next.Add(1) - 1
	return Result{Node: p.nodes[i%uint64(len(p.nodes))]}, nil
}

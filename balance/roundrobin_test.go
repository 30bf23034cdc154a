package balance

import (
	"sync"
	"testing"
)

func TestRoundRobinEven(t *testing.T) {
	nodes := makeNodes(3)
	p := RoundRobin().Build(nodes)
	index := map[Node]int{}
	for i, n := range nodes {
		index[n] = i
	}
	counts := make([]int, len(nodes))
	prev := -1
	for range 3000 {
		i := index[mustPick(t, p, Info{})]
		if prev >= 0 && i != (prev+1)%len(nodes) {
			t.Fatalf("picked node %d after node %d, want node %d", i, prev, (prev+1)%len(nodes))
		}
		counts[i]++
		prev = i
	}
	for i, c := range counts {
		if c != 1000 {
			t.Errorf("node %d picked %d times in 3000 calls, want 1000", i, c)
		}
	}
}

func TestRoundRobinStart(t *testing.T) {
	nodes := makeNodes(3)
	t.Run("Random", func(t *testing.T) {
		// Clients built together must not all start on the same node.
		first := map[Node]int{}
		for range 300 {
			first[mustPick(t, RoundRobin().Build(nodes), Info{})]++
		}
		for _, n := range nodes {
			if first[n] == 0 {
				t.Errorf("no Picker of 300 started on %v: %v", n, first)
			}
		}
	})
	t.Run("Offset", func(t *testing.T) {
		setRand(t, func(n int) int { return n - 1 })
		p := RoundRobin().Build(nodes)
		for _, want := range []Node{nodes[2], nodes[0], nodes[1], nodes[2]} {
			if got := mustPick(t, p, Info{}); got != want {
				t.Fatalf("Pick = %v, want %v", got, want)
			}
		}
	})
}

func TestRoundRobinConcurrent(t *testing.T) {
	const goroutines, picks = 8, 3000
	nodes := makeNodes(3)
	p := RoundRobin().Build(nodes)
	counts := make([]map[Node]int, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		counts[g] = map[Node]int{}
		wg.Go(func() {
			for range picks {
				r, err := p.Pick(Info{})
				if err != nil {
					t.Errorf("Pick: %v", err)
					return
				}
				counts[g][r.Node]++
			}
		})
	}
	wg.Wait()
	// The picks take consecutive counter values, so however they
	// interleave, each node gets exactly its share.
	for _, n := range nodes {
		total := 0
		for g := range counts {
			total += counts[g][n]
		}
		if want := goroutines * picks / len(nodes); total != want {
			t.Errorf("node %v picked %d times, want %d", n, total, want)
		}
	}
}

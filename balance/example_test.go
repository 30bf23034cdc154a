package balance_test

import (
	"fmt"

	"github.com/kievrpc/kiev/balance"
)

// node is a provider with a fixed number of calls in flight.
type node struct {
	id       string
	weight   int
	inFlight int
}

func (n *node) ID() string    { return n.id }
func (n *node) Weight() int   { return max(n.weight, 1) }
func (n *node) InFlight() int { return n.inFlight }

func nodes(ids ...string) []balance.Node {
	ns := make([]balance.Node, len(ids))
	for i, id := range ids {
		ns[i] = &node{id: id}
	}
	return ns
}

// A key keeps its node when another node leaves, and every process maps
// it alike.
func ExampleConsistentHash() {
	b := balance.ConsistentHash()
	before := b.Build(nodes("tcp://10.0.0.1:7000", "tcp://10.0.0.2:7000", "tcp://10.0.0.3:7000"))
	after := b.Build(nodes("tcp://10.0.0.1:7000", "tcp://10.0.0.3:7000")) // 10.0.0.2 left
	for _, key := range []string{"user:1", "user:2", "user:3", "user:4", "user:5", "user:6", "user:7", "user:8"} {
		info := balance.Info{ServiceMethod: "Cart.Get", HashKey: key, HasKey: true}
		r1, err := before.Pick(info)
		if err != nil {
			fmt.Println(err)
			return
		}
		r2, err := after.Pick(info)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s  %s -> %s\n", key, r1.Node.ID(), r2.Node.ID())
	}
	// Output:
	// user:1  tcp://10.0.0.2:7000 -> tcp://10.0.0.3:7000
	// user:2  tcp://10.0.0.2:7000 -> tcp://10.0.0.3:7000
	// user:3  tcp://10.0.0.1:7000 -> tcp://10.0.0.1:7000
	// user:4  tcp://10.0.0.3:7000 -> tcp://10.0.0.3:7000
	// user:5  tcp://10.0.0.3:7000 -> tcp://10.0.0.3:7000
	// user:6  tcp://10.0.0.2:7000 -> tcp://10.0.0.1:7000
	// user:7  tcp://10.0.0.1:7000 -> tcp://10.0.0.1:7000
	// user:8  tcp://10.0.0.3:7000 -> tcp://10.0.0.3:7000
}

// Each node in turn, from a random first one.
func ExampleRoundRobin() {
	ns := nodes("tcp://10.0.0.1:7000", "tcp://10.0.0.2:7000", "tcp://10.0.0.3:7000")
	p := balance.RoundRobin().Build(ns)
	calls := map[string]int{}
	for range 3000 {
		r, err := p.Pick(balance.Info{ServiceMethod: "Arith.Add"})
		if err != nil {
			fmt.Println(err)
			return
		}
		calls[r.Node.ID()]++
	}
	fmt.Println(calls)
	// Output:
	// map[tcp://10.0.0.1:7000:1000 tcp://10.0.0.2:7000:1000 tcp://10.0.0.3:7000:1000]
}

// Every run of 7 calls gives a node of weight 5 five of them, spread out.
func ExampleWeightedRoundRobin() {
	ns := []balance.Node{&node{id: "a", weight: 5}, &node{id: "b"}, &node{id: "c"}}
	p := balance.WeightedRoundRobin().Build(ns)
	calls := map[string]int{}
	for range 7 {
		r, _ := p.Pick(balance.Info{})
		calls[r.Node.ID()]++
	}
	fmt.Println(calls)
	// Output:
	// map[a:5 b:1 c:1]
}

// Of two nodes, the one with fewer calls in flight gets the call.
func ExampleLeastLoaded() {
	ns := []balance.Node{&node{id: "busy", inFlight: 12}, &node{id: "idle", inFlight: 2}}
	p := balance.LeastLoaded().Build(ns)
	r, _ := p.Pick(balance.Info{})
	fmt.Println(r.Node.ID())
	// Output:
	// idle
}

// A Picker over no nodes says so.
func ExampleErrNoNodes() {
	_, err := balance.RoundRobin().Build(nil).Pick(balance.Info{})
	fmt.Println(err)
	// Output:
	// kiev/balance: no provider is available
}

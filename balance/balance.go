// Package balance picks a provider for each call of a kiev Client that
// serves one service from many providers.
//
// A Balancer builds a Picker each time the set of usable providers
// changes; the Client then asks the Picker for a node on every call.
// Four balancers ship with kiev:
//
//   - [RoundRobin], the default: each node in turn.
//   - [WeightedRoundRobin]: nginx's smooth weighted round robin, so a node
//     of weight 3 gets three calls in every five next to a node of
//     weight 2, spread out rather than in a burst.
//   - [ConsistentHash]: a ring with virtual nodes, keyed per call by
//     kiev.WithHashKey, with an optional bound on any node's share of the
//     calls in flight ([BoundedLoad]). When one of N nodes leaves, only
//     about 1/N of the keys move.
//   - [LeastLoaded]: the power of two random choices: of two nodes picked
//     at random, the one with fewer calls in flight.
//
// Choose one with kiev.WithBalancer, e.g.
// kiev.WithBalancer(balance.ConsistentHash()).
package balance

import (
	"errors"
	"math/rand/v2"
)

// ErrNoNodes is returned by a Picker that has no node to offer.
var ErrNoNodes = errors.New("kiev/balance: no provider is available")

// Node is one provider as a balancer sees it. Its methods are safe for
// concurrent use and do not block.
type Node interface {
	// ID identifies the node stably for as long as it is a provider, e.g.
	// "tcp://10.0.0.7:7000". Consistent hashing places nodes on the ring
	// by ID, so a node keeps its keys across list changes.
	ID() string
	// Weight is the node's capacity relative to the others, at least 1.
	Weight() int
	// InFlight is the number of calls the client has sent to the node and
	// not yet seen answered. The client keeps it up to date.
	InFlight() int
}

// Info describes the call being placed.
type Info struct {
	// ServiceMethod is the "Service.Method" being called.
	ServiceMethod string
	// HashKey is the key set by kiev.WithHashKey, if HasKey.
	HashKey string
	HasKey  bool
	// Stream says a stream is being opened: a balancer that weighs load
	// counts the node's open streams (StreamNode), apart from its calls.
	Stream bool
}

// StreamNode is a Node that counts the streams the client has open to
// it; kiev's nodes are. A stream holds no call in flight once open, so
// InFlight does not count it.
type StreamNode interface {
	Node
	// Streams is the number of streams open to the node.
	Streams() int
}

// load is what a balancer weighs of n: its open streams for a stream
// (or its calls in flight, if n does not count streams), else its calls
// in flight.
func load(n Node, stream bool) int {
	if stream {
		if sn, ok := n.(StreamNode); ok {
			return sn.Streams()
		}
	}
	return n.InFlight()
}

// Result is a Picker's answer.
type Result struct {
	// Node is where the call goes.
	Node Node
	// Done, if not nil, is called once when the call ends, with its error
	// (nil on success), so a balancer can learn from outcomes without
	// global state.
	Done func(err error)
}

// Picker picks nodes for calls. Pick is called by many goroutines at once
// and must not block: it may take a short lock, but never waits for I/O or
// for another call.
type Picker interface {
	Pick(info Info) (Result, error)
}

// Balancer makes Pickers. A client calls Build each time its set of
// usable nodes changes, never from two goroutines at once, with the nodes
// sorted by ID; nodes is never empty. The Picker it returns replaces the
// previous one for new calls; calls already placed keep the node they
// got. Build may keep the Nodes but not the slice, which the caller
// reuses.
//
// A Balancer value may be shared by many clients: Build must not share
// mutable state between the Pickers it makes. Clients that share a
// Balancer may call Build at the same time.
type Balancer interface {
	// Name names the balancer in logs and on the status page, e.g.
	// "round_robin".
	Name() string
	// Build returns a Picker over nodes.
	Build(nodes []Node) Picker
}

// randIntN returns a random int in [0, n). It is a variable so that tests
// can make the balancers' choices predictable.
var randIntN = rand.IntN

// noNodes is the Picker of a Build over no nodes.
type noNodes struct{}

func (noNodes) Pick(Info) (Result, error) { return Result{}, ErrNoNodes }

package balance

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
)

// ConsistentHash returns the Balancer named "consistent_hash". Its Pickers
// place each node on a ring of 64-bit hashes at 160 points, its virtual
// nodes (see [VirtualNodes]), and send a call with a hash key
// (Info.HasKey) to the node of the first point at or after the key's
// hash, going round. A key keeps its node for as long as the node stays:
// when one of N nodes leaves, only its keys move, about 1/N of them, each
// to the node that follows on the ring; a node that joins takes about
// 1/(N+1) of the keys and moves no others. Calls without a key go to each
// node in turn, as with [RoundRobin], whatever the [BoundedLoad].
//
// The ring depends only on the nodes' IDs: clients in different processes
// send a key to the same node. A point is the FNV-1a 64 hash of the node's
// ID followed by the point's index as 8 little-endian bytes, and a key's
// place is the FNV-1a 64 hash of the key; both are finished with
// SplitMix64's mixer. Changing this would move keys between clients of
// different versions, so a test pins it.
//
// Every node gets the same number of points: the ring ignores Weight, so
// that its size does not grow with the weights. [BoundedLoad] keeps a hot
// key from overloading its node.
//
// The options are checked when they are made: an invalid one panics.
func ConsistentHash(opts ...HashOption) Balancer {
	b := hashBalancer{vnodes: defaultVirtualNodes}
	for _, o := range opts {
		o(&b)
	}
	return b
}

// defaultVirtualNodes is the number of points each node has on the ring:
// enough that no node of up to 100 gets more than about 1.2 times its fair
// share of keys (TestHashBalance).
const defaultVirtualNodes = 160

// HashOption configures [ConsistentHash].
type HashOption func(*hashBalancer)

// VirtualNodes sets how many points each node has on the ring; 0 means
// the default, 160. More points spread keys more evenly (the spread of a
// node's share shrinks as 1/sqrt(n)), at the cost of 12 bytes of memory per
// point in each Picker and a slower Build. VirtualNodes panics if n is
// negative.
func VirtualNodes(n int) HashOption {
	if n < 0 {
		panic(fmt.Sprintf("kiev/balance: VirtualNodes(%d): the number of points per node must be positive, or 0 for the default %d", n, defaultVirtualNodes))
	}
	return func(b *hashBalancer) {
		b.vnodes = cmp.Or(n, defaultVirtualNodes)
	}
}

// BoundedLoad bounds the calls in flight on any one node, as in
// consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam,
// 2016): a node takes a call only while it has fewer than
// ceil(c × (T+1) / N) calls in flight (Node.InFlight), where T is the
// number of calls in flight on all N nodes. A call whose node is full goes
// to the next node clockwise on the ring that is not. With c = 1.25 a node
// takes no call that would put it more than 25% above the average (rounded
// up), and a key still keeps its node while that node is not full.
//
// The bound holds for calls placed one at a time; calls picked at the same
// moment may each see room for one more call. Pick reads every node's
// InFlight, so it costs O(N).
//
// c must be greater than 1; 0 means no bound, as when the option is left
// out, so that a factor read from a configuration whose zero value is unset
// works. BoundedLoad panics for any other c, including NaN and infinities.
func BoundedLoad(c float64) HashOption {
	if c != 0 && (!(c > 1) || math.IsInf(c, 1)) {
		panic(fmt.Sprintf("kiev/balance: BoundedLoad(%v): the load factor must be greater than 1 (e.g. 1.25), or 0 for no bound", c))
	}
	return func(b *hashBalancer) {
		b.load = c
	}
}

type hashBalancer struct {
	vnodes int
	load   float64 // 0: unbounded
}

func (hashBalancer) Name() string { return "consistent_hash" }

func (b hashBalancer) Build(nodes []Node) Picker {
	if len(nodes) == 0 {
		return noNodes{}
	}
	// Nodes come sorted by ID; sort anyway, since ties between points are
	// broken by ID order and must not depend on the caller.
	nodes = slices.Clone(nodes)
	slices.SortStableFunc(nodes, func(x, y Node) int { return strings.Compare(x.ID(), y.ID()) })

	type point struct {
		hash  uint64
		owner int32
	}
	ring := make([]point, 0, len(nodes)*b.vnodes)
	for i, n := range nodes {
		h := fnv1a(fnvOffset, n.ID())
		for r := range b.vnodes {
			ring = append(ring, point{pointHash(h, r), int32(i)})
		}
	}
	slices.SortFunc(ring, func(x, y point) int {
		switch {
		case x.hash < y.hash:
			return -1
		case x.hash > y.hash:
			return 1
		}
		return int(x.owner - y.owner)
	})

	p := &hashPicker{
		nodes:  nodes,
		points: make([]uint64, len(ring)),
		owners: make([]int32, len(ring)),
		load:   b.load,
	}
	for i, pt := range ring {
		p.points[i], p.owners[i] = pt.hash, pt.owner
	}
	p.next.Store(uint64(randIntN(len(nodes))))
	return p
}

type hashPicker struct {
	nodes  []Node   // sorted by ID
	points []uint64 // the ring, in ascending order
	owners []int32  // owners[i] indexes the node that owns points[i]
	load   float64  // the BoundedLoad factor; 0: unbounded
	next   atomic.Uint64
}

func (p *hashPicker) Pick(info Info) (Result, error) {
	if !info.HasKey {
		i := p.next.Add(1) - 1
		return Result{Node: p.nodes[i%uint64(len(p.nodes))]}, nil
	}
	i, _ := slices.BinarySearch(p.points, hashKey(info.HashKey))
	if i == len(p.points) {
		i = 0
	}
	if p.load == 0 {
		return Result{Node: p.nodes[p.owners[i]]}, nil
	}
	return Result{Node: p.bounded(i)}, nil
}

// bounded walks the ring clockwise from point start to the first node
// with room under the bound. If calls end or start during the walk so that
// no node has room, the node of point start gets the call.
func (p *hashPicker) bounded(start int) Node {
	total := 0
	for _, n := range p.nodes {
		total += n.InFlight()
	}
	limit := int(math.Ceil(p.load * float64(total+1) / float64(len(p.nodes))))
	last := int32(-1)
	for k := range len(p.points) {
		i := start + k
		if i >= len(p.points) {
			i -= len(p.points)
		}
		if o := p.owners[i]; o != last {
			if p.nodes[o].InFlight() < limit {
				return p.nodes[o]
			}
			last = o
		}
	}
	return p.nodes[p.owners[start]]
}

// FNV-1a 64 parameters.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// hashKey places a call's hash key on the ring.
func hashKey(key string) uint64 {
	return mix64(fnv1a(fnvOffset, key))
}

// hashPoint places point r of the node with the given ID on the ring.
func hashPoint(id string, r int) uint64 {
	return pointHash(fnv1a(fnvOffset, id), r)
}

// pointHash is hashPoint with the ID already hashed into h, so that Build
// hashes each ID once.
func pointHash(h uint64, r int) uint64 {
	for i := range 8 {
		h ^= uint64(r>>(8*i)) & 0xff
		h *= fnvPrime
	}
	return mix64(h)
}

// fnv1a continues the FNV-1a 64 hash h with the bytes of s.
func fnv1a(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// mix64 is SplitMix64's finalizer: it spreads every input bit over the
// whole output, which FNV alone does poorly for the last bytes.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

package balance

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// fakeNode is a Node whose weight and in-flight count tests set.
type fakeNode struct {
	id       string
	weight   int
	inFlight atomic.Int64
}

func (n *fakeNode) ID() string     { return n.id }
func (n *fakeNode) Weight() int    { return n.weight }
func (n *fakeNode) InFlight() int  { return int(n.inFlight.Load()) }
func (n *fakeNode) String() string { return n.id }

// nodeID formats the ID of the i'th test node the way a registry would.
func nodeID(i int) string { return fmt.Sprintf("tcp://10.0.%d.%d:7000", i/256, i%256) }

// makeNodes returns n nodes of weight 1, sorted by ID as Build expects.
func makeNodes(n int) []Node {
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i] = &fakeNode{id: nodeID(i), weight: 1}
	}
	sortByID(nodes)
	return nodes
}

func sortByID(nodes []Node) {
	slices.SortFunc(nodes, func(a, b Node) int { return strings.Compare(a.ID(), b.ID()) })
}

// setRand replaces randIntN for the rest of the test. Tests that call it
// must not run in parallel.
func setRand(t *testing.T, f func(n int) int) {
	t.Helper()
	old := randIntN
	randIntN = f
	t.Cleanup(func() { randIntN = old })
}

// mustPick picks or fails the test.
func mustPick(t testing.TB, p Picker, info Info) Node {
	t.Helper()
	r, err := p.Pick(info)
	if err != nil {
		t.Fatalf("Pick(%+v): %v", info, err)
	}
	if r.Node == nil {
		t.Fatalf("Pick(%+v) returned a nil Node", info)
	}
	if r.Done != nil {
		r.Done(nil)
	}
	return r.Node
}

// keyInfo is the Info of a call with hash key k.
func keyInfo(k string) Info { return Info{ServiceMethod: "Arith.Add", HashKey: k, HasKey: true} }

// balancers lists every balancer the package ships, for the tests that
// every one must pass.
var balancers = []struct {
	name string // the Balancer's Name
	b    Balancer
}{
	{"round_robin", RoundRobin()},
	{"weighted_round_robin", WeightedRoundRobin()},
	{"consistent_hash", ConsistentHash()},
	{"consistent_hash", ConsistentHash(BoundedLoad(1.25))},
	{"least_loaded", LeastLoaded()},
}

// TestBalancers checks the Balancer and Picker contract of every balancer.
func TestBalancers(t *testing.T) {
	infos := []Info{{ServiceMethod: "Arith.Add"}, keyInfo("user:42"), keyInfo("")}
	for i, bb := range balancers {
		b := bb.b
		t.Run(fmt.Sprintf("%d_%s", i, bb.name), func(t *testing.T) {
			t.Run("Name", func(t *testing.T) {
				if got := b.Name(); got != bb.name {
					t.Errorf("Name() = %q, want %q", got, bb.name)
				}
			})
			t.Run("NoNodes", func(t *testing.T) {
				for _, nodes := range [][]Node{nil, {}} {
					p := b.Build(nodes)
					for _, info := range infos {
						if r, err := p.Pick(info); !errors.Is(err, ErrNoNodes) || r.Node != nil {
							t.Errorf("Build(%#v).Pick(%+v) = %v, %v; want no node, ErrNoNodes", nodes, info, r.Node, err)
						}
					}
				}
			})
			t.Run("OneNode", func(t *testing.T) {
				nodes := makeNodes(1)
				p := b.Build(nodes)
				for i := range 100 {
					for _, info := range append(infos, keyInfo(fmt.Sprint(i))) {
						if got := mustPick(t, p, info); got != nodes[0] {
							t.Fatalf("Pick(%+v) = %v, want the only node %v", info, got, nodes[0])
						}
					}
				}
			})
			t.Run("EveryNodeUsed", func(t *testing.T) {
				nodes := makeNodes(5)
				p := b.Build(nodes)
				seen := map[Node]int{}
				for i := range 1000 {
					seen[mustPick(t, p, keyInfo(fmt.Sprint("k", i)))]++
					seen[mustPick(t, p, Info{})]++
				}
				for _, n := range nodes {
					if seen[n] == 0 {
						t.Errorf("node %v never picked in 2000 calls", n)
					}
				}
				if len(seen) != len(nodes) {
					t.Errorf("picked %d distinct nodes, want %d: %v", len(seen), len(nodes), seen)
				}
			})
			t.Run("CopiesSlice", func(t *testing.T) {
				nodes := makeNodes(4)
				want := slices.Clone(nodes)
				p := b.Build(nodes)
				intruder := &fakeNode{id: "tcp://intruder:1", weight: 1000}
				for i := range nodes {
					nodes[i] = intruder // the caller reuses its slice
				}
				for i := range 1000 {
					for _, info := range []Info{{}, keyInfo(fmt.Sprint(i))} {
						if got := mustPick(t, p, info); !slices.Contains(want, got) {
							t.Fatalf("Pick(%+v) = %v after the caller reused its slice, want one of %v", info, got, want)
						}
					}
				}
			})
			t.Run("PickersIndependent", func(t *testing.T) {
				// With randomness fixed, a fresh Picker's picks must not
				// depend on what another Picker of the same Balancer did.
				setRand(t, func(int) int { return 0 })
				nodes := makeNodes(5)
				for i, n := range nodes {
					n.(*fakeNode).weight = i + 1
				}
				sequence := func(p Picker) []string {
					var ids []string
					for i := range 20 {
						ids = append(ids, mustPick(t, p, Info{}).ID(), mustPick(t, p, keyInfo(fmt.Sprint(i))).ID())
					}
					return ids
				}
				want := sequence(b.Build(nodes))
				a, c := b.Build(nodes), b.Build(nodes)
				for range 7 {
					mustPick(t, a, Info{})
				}
				if got := sequence(c); !slices.Equal(got, want) {
					t.Errorf("after another Picker's picks, a new Picker picked\n%v\nwant\n%v", got, want)
				}
			})
			t.Run("Concurrent", func(t *testing.T) {
				// Run under -race: Builds of one shared Balancer at once,
				// and Picks at once while in-flight counts change.
				var wg sync.WaitGroup
				pickers := make([]Picker, 4)
				nodes := makeNodes(8)
				for i := range pickers {
					wg.Go(func() { pickers[i] = b.Build(slices.Clone(nodes)) })
				}
				wg.Wait()
				for g := range 8 {
					wg.Go(func() {
						p := pickers[g%len(pickers)]
						for i := range 500 {
							info := Info{}
							if i%2 == 0 {
								info = keyInfo(fmt.Sprint(i % 50))
							}
							r, err := p.Pick(info)
							if err != nil {
								t.Errorf("Pick: %v", err)
								return
							}
							n := r.Node.(*fakeNode)
							n.inFlight.Add(1)
							if r.Done != nil {
								r.Done(nil)
							}
							n.inFlight.Add(-1)
						}
					})
				}
				wg.Wait()
			})
		})
	}
}

// TestPickAllocs guards the call path: Pick must not allocate.
func TestPickAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates; make test runs this without -race")
	}
	nodes := makeNodes(10)
	info := keyInfo("user:12345")
	for i, bb := range balancers {
		p := bb.b.Build(nodes)
		for _, info := range []Info{{}, info} {
			if got := testing.AllocsPerRun(1000, func() { p.Pick(info) }); got != 0 {
				t.Errorf("balancers[%d] (%s): Pick(%+v) allocates %v times, want 0", i, bb.name, info, got)
			}
		}
	}
}

// BenchmarkPick measures Pick over 10 nodes. The consistent hash
// benchmarks pick for 1024 different keys of 8 to 9 bytes.
func BenchmarkPick(b *testing.B) {
	for _, bm := range pickBenchmarks() {
		b.Run(bm.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				bm.p.Pick(bm.infos[i&1023])
				i++
			}
		})
	}
}

// BenchmarkPickParallel measures Pick from GOMAXPROCS goroutines at once.
func BenchmarkPickParallel(b *testing.B) {
	for _, bm := range pickBenchmarks() {
		b.Run(bm.name, func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					bm.p.Pick(bm.infos[i&1023])
					i++
				}
			})
		})
	}
}

type pickBenchmark struct {
	name  string
	p     Picker
	infos []Info // 1024 of them
}

func pickBenchmarks() []pickBenchmark {
	nodes := makeNodes(10)
	for i, n := range nodes {
		n.(*fakeNode).weight = i%3 + 1
		n.(*fakeNode).inFlight.Store(int64(i % 4))
	}
	noKey := make([]Info, 1024)
	keys := make([]Info, 1024)
	for i := range keys {
		keys[i] = keyInfo(fmt.Sprint("user:", i*7919))
	}
	return []pickBenchmark{
		{"round_robin", RoundRobin().Build(nodes), noKey},
		{"weighted_round_robin", WeightedRoundRobin().Build(nodes), noKey},
		{"consistent_hash", ConsistentHash().Build(nodes), keys},
		{"consistent_hash_bounded", ConsistentHash(BoundedLoad(1.25)).Build(nodes), keys},
		{"least_loaded", LeastLoaded().Build(nodes), noKey},
	}
}

// BenchmarkBuild measures Build over 100 nodes, which runs each time a
// client's set of providers changes.
func BenchmarkBuild(b *testing.B) {
	nodes := makeNodes(100)
	for _, b1 := range []Balancer{RoundRobin(), WeightedRoundRobin(), ConsistentHash(), LeastLoaded()} {
		b.Run(b1.Name(), func(b *testing.B) {
			for b.Loop() {
				b1.Build(nodes)
			}
		})
	}
}

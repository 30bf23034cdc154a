package kiev_test

import (
	"context"
	"net"
	"net/rpc"
	"testing"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/testpb"
	"github.com/kievrpc/kiev/registry/memory"
)

// Small is the benchmark payload: an int64, a short string, a short list.
type Small struct {
	ID   int64
	Name string
	Tags []int64
}

var smallArgs = Small{ID: 42, Name: "push-ack", Tags: []int64{1, 2, 3, 4}}

var smallProto = &testpb.Small{Id: 42, Name: "push-ack", Tags: []int64{1, 2, 3, 4}}

// Bench echoes its argument.
type Bench struct{}

func (Bench) Echo(ctx context.Context, in *Small, out *Small) error {
	*out = *in
	return nil
}

func (Bench) EchoProto(ctx context.Context, in *testpb.Small, out *testpb.Small) error {
	out.Id, out.Name, out.Tags = in.Id, in.Name, in.Tags
	return nil
}

// NetRPCBench is the same service for net/rpc, which has no context.
type NetRPCBench struct{}

func (NetRPCBench) Echo(in *Small, out *Small) error {
	*out = *in
	return nil
}

// caller makes one call with fresh reply storage, as a real caller would.
type caller func() error

func kievCallers(b testing.TB) map[string]caller {
	srv := kiev.NewServer()
	if err := srv.Register(Bench{}); err != nil {
		b.Fatal(err)
	}
	addr := startServer(b, srv)
	mc := dial(b, addr)
	pc := dial(b, addr, kiev.WithCodec(codec.Protobuf))
	ctx := context.Background()

	// The same service from three providers found in a registry, balanced
	// round robin: the cost of discovery and balancing on the call path.
	reg := memory.New()
	for range 3 {
		srv := kiev.NewServer(kiev.WithRegistry(reg))
		if err := srv.Register(Bench{}); err != nil {
			b.Fatal(err)
		}
		startServer(b, srv)
	}
	// The same service over UDP, one datagram each way.
	usrv := kiev.NewServer()
	if err := usrv.Register(Bench{}); err != nil {
		b.Fatal(err)
	}
	uc := dial(b, servePacket(b, usrv, nil))

	sc := dial(b, "Bench", kiev.WithRegistry(reg))
	if err := kiev.WaitProviders(ctx, sc, 3); err != nil {
		b.Fatal(err)
	}
	return map[string]caller{
		"kiev-msgpack": func() error {
			var out Small
			return mc.Call(ctx, "Bench.Echo", &smallArgs, &out)
		},
		"kiev-protobuf": func() error {
			var out testpb.Small
			return pc.Call(ctx, "Bench.EchoProto", smallProto, &out)
		},
		"kiev-msgpack-udp": func() error {
			var out Small
			return uc.Call(ctx, "Bench.Echo", &smallArgs, &out)
		},
		"kiev-msgpack-3-providers": func() error {
			var out Small
			return sc.Call(ctx, "Bench.Echo", &smallArgs, &out)
		},
	}
}

func netRPCCaller(b *testing.B) caller {
	srv := rpc.NewServer()
	if err := srv.Register(NetRPCBench{}); err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Accept(l)
	c, err := rpc.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c.Close()
		l.Close()
	})
	return func() error {
		var out Small
		return c.Call("NetRPCBench.Echo", &smallArgs, &out)
	}
}

func allCallers(b *testing.B) []struct {
	name string
	call caller
} {
	k := kievCallers(b)
	return []struct {
		name string
		call caller
	}{
		{"kiev-msgpack", k["kiev-msgpack"]},
		{"kiev-protobuf", k["kiev-protobuf"]},
		{"kiev-msgpack-3-providers", k["kiev-msgpack-3-providers"]},
		{"kiev-msgpack-udp", k["kiev-msgpack-udp"]},
		{"net-rpc-gob", netRPCCaller(b)},
	}
}

// BenchmarkCall measures one caller at a time: latency per round trip,
// and allocations per call on both sides (client and server run in this
// process).
func BenchmarkCall(b *testing.B) {
	for _, s := range allCallers(b) {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := s.call(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCallParallel measures many goroutines sharing one client and
// one connection.
func BenchmarkCallParallel(b *testing.B) {
	for _, s := range allCallers(b) {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := s.call(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// TestCallAllocations guards the call path's allocations, counted on both
// sides since client and server share this process. The bounds are today's
// counts: kiev's own work is three allocations, on the server (the call
// record, the args, the reply); the caller allocates its reply, and each
// side's codec the payload's string and slice.
func TestCallAllocations(t *testing.T) {
	if raceEnabled || testing.CoverMode() != "" {
		t.Skip("allocation counts differ under -race and -cover")
	}
	k := kievCallers(t)
	for _, tc := range []struct {
		name string
		max  float64
	}{
		{"kiev-protobuf", 8},
		{"kiev-msgpack", 8},
		{"kiev-msgpack-3-providers", 8},
	} {
		call := k[tc.name]
		call() // warm the pools and the connection
		if n := testing.AllocsPerRun(200, func() { _ = call() }); n > tc.max {
			t.Errorf("%s: %.1f allocations per call, want at most %.0f", tc.name, n, tc.max)
		}
	}
}

// Blob is the payload of the compression benchmarks.
type Blob struct{ Data []byte }

// EchoBlob echoes a Blob.
func (Bench) EchoBlob(ctx context.Context, in *Blob, out *Blob) error {
	out.Data = in.Data
	return nil
}

// compressedCallers returns callers of a 16 KiB payload of repetitive
// JSON: without compression, and with each algorithm on both sides.
func compressedCallers(b testing.TB) map[string]caller {
	srv := kiev.NewServer(kiev.WithCompression(kiev.Zstd, kiev.S2))
	if err := srv.Register(Bench{}); err != nil {
		b.Fatal(err)
	}
	addr := startServer(b, srv)
	in := &Blob{Data: jsonText(16 << 10)}
	ctx := context.Background()
	out := make(map[string]caller)
	for name, opts := range map[string][]kiev.DialOption{
		"none": nil,
		"zstd": {kiev.WithCompression(kiev.Zstd)},
		"s2":   {kiev.WithCompression(kiev.S2)},
	} {
		c := dial(b, addr, opts...)
		out[name] = func() error {
			var r Blob
			return c.Call(ctx, "Bench.EchoBlob", in, &r)
		}
	}
	return out
}

// BenchmarkCallCompressed measures one caller at a time echoing 16 KiB
// of repetitive JSON, without compression and with each algorithm.
func BenchmarkCallCompressed(b *testing.B) {
	calls := compressedCallers(b)
	for _, name := range []string{"none", "zstd", "s2"} {
		b.Run(name, func(b *testing.B) {
			call := calls[name]
			if err := call(); err != nil { // connected, Settings read
				b.Fatal(err)
			}
			b.SetBytes(16 << 10)
			b.ReportAllocs()
			for b.Loop() {
				if err := call(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCompressedCallAllocations guards a compressed call's allocations:
// encoders, decoders and the buffers of decompressed bodies come from
// pools, so a call costs no more allocations than the same call
// uncompressed (6 today, both sides).
func TestCompressedCallAllocations(t *testing.T) {
	if raceEnabled || testing.CoverMode() != "" {
		t.Skip("allocation counts differ under -race and -cover")
	}
	calls := compressedCallers(t)
	counts := make(map[string]float64)
	for _, name := range []string{"none", "zstd", "s2"} {
		call := calls[name]
		call() // warm the pools and the connection
		counts[name] = testing.AllocsPerRun(200, func() { _ = call() })
	}
	for _, name := range []string{"zstd", "s2"} {
		if counts[name] > counts["none"] {
			t.Errorf("%s: %.1f allocations per call, against %.1f uncompressed", name, counts[name], counts["none"])
		}
	}
	t.Logf("allocations per call: %v", counts)
}

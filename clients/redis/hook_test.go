package redis

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// hookChain returns the Client's hook around a command that succeeds at
// once, without a server.
func hookChain(t testing.TB) (redis.ProcessHook, *Client) {
	c, err := New(Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return hook{c}.ProcessHook(func(context.Context, redis.Cmder) error { return nil }), c
}

// TestHookAllocs guards the cost of the hook on every command: the one
// allocation is the ctx that marks go-redis's own commands under it.
func TestHookAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	process, c := hookChain(t)
	ctx := context.Background()
	cmd := redis.NewStringCmd(ctx, "get", "k")
	process(ctx, cmd) // makes the metrics of "get"
	if n := testing.AllocsPerRun(1000, func() { process(ctx, cmd) }); n > 1 {
		t.Fatalf("the hook allocates %v times per command; want at most 1", n)
	}
	if s := c.Stats(); s.Commands != 1002 {
		t.Fatalf("Stats.Commands = %d; want 1002", s.Commands)
	}
}

// BenchmarkHook measures what the hook adds to each command, without the
// round trip to a server.
func BenchmarkHook(b *testing.B) {
	process, _ := hookChain(b)
	ctx := context.Background()
	cmd := redis.NewStringCmd(ctx, "get", "k")
	b.ReportAllocs()
	for b.Loop() {
		process(ctx, cmd)
	}
}

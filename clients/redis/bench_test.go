package redis_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"

	"github.com/kievrpc/kiev/clients/redis"
)

// BenchmarkGet measures a GET of a present key against the shared
// server: go-redis alone, then kiev's Client, whose hook adds the
// metrics, the ctx check and the log's level check.
func BenchmarkGet(b *testing.B) {
	addr := sharedAddr(b)
	ctx := context.Background()
	k := key(b, "k")
	bare := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer bare.Close()
	if err := bare.Set(ctx, k, "value", 0).Err(); err != nil {
		b.Fatal(err)
	}
	defer bare.Del(ctx, k)
	kiev, err := redis.New(redis.Options{Addrs: []string{addr}, Name: "bench", Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	defer kiev.Close()

	for _, bc := range []struct {
		name string
		c    goredis.Cmdable
	}{
		{"bare", bare},
		{"kiev", kiev},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.c.Get(ctx, k).Err(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

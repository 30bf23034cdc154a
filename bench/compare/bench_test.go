package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// BenchmarkEcho runs the closed-loop scenarios of the compare program as
// go test benchmarks: every system, payload and concurrency, server and
// client in this one process (so allocs/op counts both sides). For the
// figures of separate processes, run the program.
//
//	go test -run '^$' -bench 'Echo/.*/small/c=128' -benchmem ./compare/
func BenchmarkEcho(b *testing.B) {
	srv, err := startServers()
	if err != nil {
		b.Fatal(err)
	}
	defer srv.stop()
	for _, sys := range allSystems {
		c, err := dialSystem(sys, srv.addrs)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range allPayloads {
			for _, n := range []int{1, 16, 128, 1024} {
				b.Run(fmt.Sprintf("%s/%s/c=%d", strings.ReplaceAll(sys, "/", "-"), p, n), func(b *testing.B) {
					benchClosed(b, c, p, n)
				})
			}
		}
		c.close()
	}
}

// benchClosed shares b.N calls among n callers.
func benchClosed(b *testing.B, c conn, payload string, n int) {
	calls := make([]func(context.Context) error, n)
	for i := range calls {
		call, err := c.caller(payload)
		if err != nil {
			b.Fatal(err)
		}
		calls[i] = call
	}
	ctx := context.Background()
	if err := calls[0](ctx); err != nil { // connected and warm
		b.Fatal(err)
	}
	if size := blobSize(payload); size > 0 {
		b.SetBytes(int64(size))
	}
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	var mu sync.Mutex
	left := b.N
	take := func() bool {
		mu.Lock()
		defer mu.Unlock()
		left--
		return left >= 0
	}
	for _, call := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for take() {
				if err := call(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

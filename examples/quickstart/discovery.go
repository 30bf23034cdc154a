package main

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/balance"
)

// Shard is served by several servers; Owner says which one ran the call.
type Shard struct{ name string }

// Owner answers with the server's name.
func (s Shard) Owner(ctx context.Context, key string, reply *string) error {
	*reply = s.name
	return nil
}

// startShard serves Shard as name. With no registry option, the server
// registers in kiev.DefaultRegistry(), in memory: clients of this process
// find it by name.
func startShard(name string, logger *slog.Logger) *kiev.Server {
	srv := kiev.NewServer(kiev.WithLogger(logger))
	if err := srv.RegisterName("Shard", Shard{name}); err != nil {
		log.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(l)
	return srv
}

// discovery dials a service by name before any server of it exists,
// balances over three, and shuts one down under load.
func discovery(ctx context.Context, logger *slog.Logger) {
	c, err := kiev.Dial("Shard", kiev.WithLogger(logger)) // no server yet: Dial of a name does not wait
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	first := make(chan string, 1)
	go func() {
		var owner string
		if err := c.Call(ctx, "Shard.Owner", "k", &owner); err != nil {
			log.Fatal(err)
		}
		first <- owner
	}()
	servers := map[string]*kiev.Server{}
	for _, name := range []string{"east", "north", "west"} {
		servers[name] = startShard(name, logger)
		defer servers[name].Close()
	}
	fmt.Println("discovery: a call made before any Shard server started was answered by", <-first)

	for len(c.Providers()) < 3 {
		time.Sleep(time.Millisecond) // the demo waits for all three to be known
	}
	counts := map[string]int{}
	for range 300 {
		var owner string
		if err := c.Call(ctx, "Shard.Owner", "k", &owner); err != nil {
			log.Fatal(err)
		}
		counts[owner]++
	}
	fmt.Println("discovery: 300 calls, round robin:", sorted(counts))

	hc, err := kiev.Dial("Shard", kiev.WithBalancer(balance.ConsistentHash()), kiev.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	defer hc.Close()
	var owners []string
	for range 3 {
		var owner string
		if err := hc.Call(kiev.WithHashKey(ctx, "alice"), "Shard.Owner", "alice", &owner); err != nil {
			log.Fatal(err)
		}
		owners = append(owners, owner)
	}
	fmt.Println("discovery: key alice, consistent hash, three calls:", owners)

	// Shut one server down while 20 goroutines call: it deregisters, then
	// drains; calls it turns away are retried on the others.
	var calls, failed atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 20 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				var owner string
				if err := c.Call(ctx, "Shard.Owner", "k", &owner); err != nil {
					failed.Add(1)
				}
				calls.Add(1)
			}
		})
	}
	for calls.Load() < 2000 {
		time.Sleep(time.Millisecond)
	}
	if err := servers["north"].Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	for n := calls.Load(); calls.Load() < n+2000; {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	fmt.Printf("discovery: north shut down during %d calls: %d failed; the client now calls %d providers\n",
		calls.Load(), failed.Load(), len(c.Providers()))
}

func sorted(counts map[string]int) string {
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	s := ""
	for _, n := range names {
		s += fmt.Sprintf("%s %d  ", n, counts[n])
	}
	return s
}

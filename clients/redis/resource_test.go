package redis_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/kievrpc/kiev/clients/redis"
	"github.com/kievrpc/kiev/shed"
)

// waitWaiting waits until n commands wait for a slot of r.
func waitWaiting(t *testing.T, r *shed.Resource, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second) // a safety net, not synchronization
	for r.Stats().Waiting != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d commands waiting for a connection, want %d", r.Stats().Waiting, n)
		}
		runtime.Gosched()
	}
}

// Every command takes a slot of the Client's Resource, its pool, before
// a connection: with every slot held, a command waits for one, and one
// whose caller gives up meanwhile is never sent.
func TestCommandsAcquireThePool(t *testing.T) {
	c := newClient(t, redis.Options{Addrs: []string{sharedAddr(t)}, Name: "resource", PoolSize: 2})
	r := c.Resource()
	if st := r.Stats(); st.Capacity != 2 {
		t.Fatalf("resource %+v, want the pool's 2 connections", st)
	}
	ctx := context.Background()
	var held []shed.Slot
	for range 2 {
		rel, err := r.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, rel)
	}
	k := key(t, "k")
	done := make(chan error, 1)
	go func() { done <- c.Set(ctx, k, "v", time.Minute).Err() }()
	waitWaiting(t, r, 1)
	gone, cancel := context.WithCancel(ctx)
	failed := make(chan error, 1)
	go func() { failed <- c.Set(gone, k, "never", time.Minute).Err() }()
	waitWaiting(t, r, 2)
	cancel()
	if err := <-failed; !errors.Is(err, context.Canceled) {
		t.Fatalf("the command whose caller left: %v, want context.Canceled", err)
	}
	held[0].Release()
	if err := <-done; err != nil {
		t.Fatalf("the command that waited: %v", err)
	}
	held[1].Release()
	if v, err := c.Get(ctx, k).Result(); err != nil || v != "v" {
		t.Fatalf("Get = %q, %v; want the first command's value alone", v, err)
	}
}

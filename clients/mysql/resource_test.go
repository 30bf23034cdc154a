package mysql_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/kievrpc/kiev/clients/mysql"
	"github.com/kievrpc/kiev/shed"
)

// Every statement takes a slot of the DB's Resource, its pools, before a
// connection: with every slot held, a statement waits for one, and one
// whose caller gives up meanwhile is never sent.
func TestStatementsAcquireThePool(t *testing.T) {
	db := open(t, mysql.Options{DSN: sharedDSN(t), Name: "resource", MaxOpen: 2})
	r := db.Resource()
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
	waiting := func(n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second) // a safety net, not synchronization
		for r.Stats().Waiting != n {
			if time.Now().After(deadline) {
				t.Fatalf("%d statements waiting, want %d", r.Stats().Waiting, n)
			}
			runtime.Gosched()
		}
	}
	done := make(chan error, 1)
	go func() {
		var one int
		done <- db.WithContext(ctx).Raw("SELECT 1").Scan(&one).Error
	}()
	waiting(1)
	gone, cancel := context.WithCancel(ctx)
	failed := make(chan error, 1)
	go func() {
		var one int
		failed <- db.WithContext(gone).Raw("SELECT 1").Scan(&one).Error
	}()
	waiting(2)
	cancel()
	if err := <-failed; !errors.Is(err, context.Canceled) {
		t.Fatalf("the statement whose caller left: %v, want context.Canceled", err)
	}
	held[0].Release()
	if err := <-done; err != nil {
		t.Fatalf("the statement that waited: %v", err)
	}
	held[1].Release()
}

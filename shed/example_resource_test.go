package shed_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/kievrpc/kiev/shed"
)

// A handler acquires a slot of its dependency's pool before it uses a
// connection. In a kiev handler, ctx carries the call, so slots go to the
// most important calls first, a call that could not finish by its
// deadline gets none, and the method is bounded by the pool's size from
// its first call.
func ExampleResource() {
	db := shed.NewResource("orders-db", 64) // the pool's 64 connections

	lookup := func(ctx context.Context, id int) (string, error) {
		slot, err := db.Acquire(ctx)
		if errors.Is(err, shed.ErrResourceBusy) {
			return "", err // answer now: the caller can retry elsewhere
		} else if err != nil {
			return "", err
		}
		defer slot.Release()
		return fmt.Sprintf("order %d", id), nil // the query, on a connection
	}

	order, err := lookup(context.Background(), 7)
	fmt.Println(order, err)
	fmt.Println("in use after:", db.Stats().InUse)
	// Output:
	// order 7 <nil>
	// in use after: 0
}

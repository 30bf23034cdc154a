package mongo

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/event"
)

// newHookClient returns a Client with its hooks and no driver, for driving
// the hooks with made-up events.
func newHookClient(t testing.TB) *Client {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry(), "hooks")
	if err != nil {
		t.Fatal(err)
	}
	return &Client{
		name:         "hooks",
		log:          slog.New(slog.DiscardHandler),
		slow:         DefaultSlowThreshold,
		metrics:      m,
		commandNames: newLabelSet(MaxCommandLabels),
		collections:  newLabelSet(MaxCollectionLabels),
		inflight:     make(map[int64]inflight),
		servers:      make(map[string]bool),
	}
}

// findEvents returns the events of a find by _id that succeeded.
func findEvents(t testing.TB) (*event.CommandStartedEvent, *event.CommandSucceededEvent) {
	cmd := raw(t, d("find", "orders", "filter", d("_id", "o-1"), "limit", int64(1), "singleBatch", true, "$db", "shop"))
	reply := raw(t, d("cursor", d("firstBatch", []any{d("_id", "o-1", "total", 5)}, "id", int64(0), "ns", "shop.orders"), "ok", 1.0))
	started := &event.CommandStartedEvent{Command: cmd, DatabaseName: "shop", CommandName: "find", RequestID: 1, ConnectionID: "db1:27017[-1]"}
	succeeded := &event.CommandSucceededEvent{
		CommandFinishedEvent: event.CommandFinishedEvent{Duration: 300 * time.Microsecond, CommandName: "find", DatabaseName: "shop", RequestID: 1, ConnectionID: "db1:27017[-1]"},
		Reply:                reply,
	}
	return started, succeeded
}

// TestHooksAllocs guards the hooks' path of a command that succeeds under
// the slow threshold, and of a connection's check-out and check-in: they
// allocate nothing once the command's series exist.
func TestHooksAllocs(t *testing.T) {
	c := newHookClient(t)
	started, succeeded := findEvents(t)
	ctx := context.Background()
	checkedOut := &event.PoolEvent{Type: event.ConnectionCheckedOut, Address: "db1:27017", ConnectionID: 1}
	checkedIn := &event.PoolEvent{Type: event.ConnectionCheckedIn, Address: "db1:27017", ConnectionID: 1}
	n := testing.AllocsPerRun(1000, func() {
		c.poolEvent(checkedOut)
		c.commandStarted(ctx, started)
		c.commandSucceeded(ctx, succeeded)
		c.poolEvent(checkedIn)
	})
	if n != 0 {
		t.Errorf("the hooks of one command allocate %v times, want 0", n)
	}
	if len(c.inflight) != 0 {
		t.Errorf("%d commands left in flight", len(c.inflight))
	}
	if st := c.Stats(); st.Commands == 0 || st.InUseConns != 0 {
		t.Errorf("Stats = %+v", st)
	}
}

// BenchmarkHooks measures what the hooks add to a command: its start and
// success events, and the check-out and check-in of its connection.
func BenchmarkHooks(b *testing.B) {
	c := newHookClient(b)
	started, succeeded := findEvents(b)
	ctx := context.Background()
	checkedOut := &event.PoolEvent{Type: event.ConnectionCheckedOut, Address: "db1:27017", ConnectionID: 1}
	checkedIn := &event.PoolEvent{Type: event.ConnectionCheckedIn, Address: "db1:27017", ConnectionID: 1}
	b.ReportAllocs()
	for b.Loop() {
		c.poolEvent(checkedOut)
		c.commandStarted(ctx, started)
		c.commandSucceeded(ctx, succeeded)
		c.poolEvent(checkedIn)
	}
}

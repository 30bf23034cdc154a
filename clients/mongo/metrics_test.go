package mongo_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	driver "go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/kievrpc/kiev/clients/mongo"
)

// TestMetrics runs known commands and reads back the counters, the
// histogram and the pool gauges.
func TestMetrics(t *testing.T) {
	c, reg, _ := newClient(t, mongo.Options{Name: "metrics"})
	ctx := t.Context()
	coll := c.DB().Collection("things")
	for _, id := range []string{"a", "b"} {
		if _, err := coll.InsertOne(ctx, d("_id", id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := coll.FindOne(ctx, d("_id", "a")).Err(); err != nil {
		t.Fatal(err)
	}
	// A command the server refuses, and a write that fails for its
	// document: both count as errors.
	if err := coll.FindOne(ctx, d("$where", "true")).Err(); err == nil {
		t.Fatal("a find with $where succeeded; FerretDB refuses it")
	}
	if _, err := coll.InsertOne(ctx, d("_id", "a")); !driver.IsDuplicateKeyError(err) {
		t.Fatalf("inserting a duplicate _id: %v, want a duplicate key error", err)
	}

	// Every outcome's series exists from a command's first use, at 0, so
	// that rates work from the start. New's ping is counted too.
	want := `
# HELP kiev_mongo_commands_total MongoDB commands that got an answer or failed, by command, collection (for the commands that name one) and outcome (ok, error, timeout, canceled).
# TYPE kiev_mongo_commands_total counter
kiev_mongo_commands_total{client="metrics",collection="",command="ping",outcome="canceled"} 0
kiev_mongo_commands_total{client="metrics",collection="",command="ping",outcome="error"} 0
kiev_mongo_commands_total{client="metrics",collection="",command="ping",outcome="ok"} 1
kiev_mongo_commands_total{client="metrics",collection="",command="ping",outcome="timeout"} 0
kiev_mongo_commands_total{client="metrics",collection="things",command="find",outcome="canceled"} 0
kiev_mongo_commands_total{client="metrics",collection="things",command="find",outcome="error"} 1
kiev_mongo_commands_total{client="metrics",collection="things",command="find",outcome="ok"} 1
kiev_mongo_commands_total{client="metrics",collection="things",command="find",outcome="timeout"} 0
kiev_mongo_commands_total{client="metrics",collection="things",command="insert",outcome="canceled"} 0
kiev_mongo_commands_total{client="metrics",collection="things",command="insert",outcome="error"} 1
kiev_mongo_commands_total{client="metrics",collection="things",command="insert",outcome="ok"} 2
kiev_mongo_commands_total{client="metrics",collection="things",command="insert",outcome="timeout"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kiev_mongo_commands_total"); err != nil {
		t.Error(err)
	}
	for cmd, n := range map[string]float64{"ping": 1, "insert": 3, "find": 2} {
		if got := counterValue(t, reg, "kiev_mongo_command_duration_seconds", "command", cmd); got != n {
			t.Errorf("%s durations observed: %v, want %v", cmd, got, n)
		}
	}
	if open := counterValue(t, reg, "kiev_mongo_pool_connections", "state", "open"); open < 1 {
		t.Errorf("open connections: %v, want at least 1", open)
	}
	if inUse := counterValue(t, reg, "kiev_mongo_pool_connections", "state", "in_use"); inUse != 0 {
		t.Errorf("connections in use between operations: %v, want 0", inUse)
	}
	st := c.Stats()
	if st.Commands != 6 || st.Failures != 2 || st.InUseConns != 0 || st.OpenConns < 1 {
		t.Errorf("Stats = %+v; want 6 commands, 2 failures, none in use", st)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n == 0 {
		t.Fatalf("GatherAndCount = %d, %v", n, err)
	}

	// Close unregisters the metrics.
	if err := c.DB().Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("%d series left registered after Close (%v)", n, err)
	}
	if err := c.Close(ctx); !errors.Is(err, mongo.ErrClosed) {
		t.Errorf("a second Close: %v, want ErrClosed", err)
	}
	if err := c.Health(ctx); !errors.Is(err, mongo.ErrClosed) {
		t.Errorf("Health after Close: %v, want ErrClosed", err)
	}
}

// TestMetricsSharedName shows two Clients of one name counting into the
// same series, and Clients of other names beside them.
func TestMetricsSharedName(t *testing.T) {
	reg := prometheus.NewRegistry()
	db := uniqueDB(t)
	a, _, _ := newClient(t, mongo.Options{Name: "shared", Registerer: reg, Database: db})
	b, _, _ := newClient(t, mongo.Options{Name: "shared", Registerer: reg, Database: db})
	other, _, _ := newClient(t, mongo.Options{Name: "other", Registerer: reg, Database: db})
	for _, c := range []*mongo.Client{a, b, other} {
		if err := c.Ping(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := counterValue(t, reg, "kiev_mongo_commands_total", "client", "shared", "command", "ping", "outcome", "ok"); n != 4 {
		t.Errorf("pings of the two Clients named shared: %v, want 4 (two in New, two after)", n)
	}
	if n := counterValue(t, reg, "kiev_mongo_commands_total", "client", "other", "command", "ping", "outcome", "ok"); n != 2 {
		t.Errorf("pings of the Client named other: %v, want 2", n)
	}
}

// TestMetricsConflict shows New refusing a Registerer that holds other
// metrics of the same names.
func TestMetricsConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kiev_mongo_commands_total", Help: "something else",
	}, []string{"op"}))
	_, err := mongo.New(context.Background(), mongo.Options{URI: "mongodb://127.0.0.1:1", Registerer: reg})
	if !errors.Is(err, mongo.ErrOptions) || !strings.Contains(err.Error(), "Registerer") {
		t.Fatalf("New with a conflicting Registerer: %v; want ErrOptions naming the Registerer", err)
	}
}

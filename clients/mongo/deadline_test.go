package mongo_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"
	driver "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/kievrpc/kiev/clients/mongo"
)

// slowFilter and slowSort make a find that takes FerretDB tens of
// milliseconds or more over the documents of fillSlow: a regular
// expression matching none, and a sort, neither indexed.
var (
	slowFilter = d("s", d("$regex", "y$"))
	slowSort   = d("i", -1)
)

// slowFind runs that find with Find, which opens a cursor.
func slowFind(ctx context.Context, coll *driver.Collection) error {
	cur, err := coll.Find(ctx, slowFilter, options.Find().SetSort(slowSort))
	if err != nil {
		return err
	}
	var out []bson.D
	return cur.All(ctx, &out)
}

// slowFindOne runs that find with FindOne.
func slowFindOne(ctx context.Context, coll *driver.Collection) error {
	err := coll.FindOne(ctx, slowFilter, options.FindOne().SetSort(slowSort)).Err()
	if errors.Is(err, driver.ErrNoDocuments) {
		return nil
	}
	return err
}

// fillSlow fills coll for slowFind and returns how long slowFindOne takes.
func fillSlow(t *testing.T, coll *driver.Collection) time.Duration {
	t.Helper()
	docs := make([]any, 6000)
	for i := range docs {
		docs[i] = d("i", i, "s", strings.Repeat("x", 200))
	}
	if _, err := coll.InsertMany(t.Context(), docs); err != nil {
		t.Fatalf("InsertMany: %v", err)
	}
	start := time.Now()
	if err := slowFindOne(t.Context(), coll); err != nil {
		t.Fatalf("the slow find: %v", err)
	}
	return time.Since(start)
}

// TestDeadline shows that the caller's deadline bounds each operation:
// one whose deadline has passed is not sent; one whose deadline passes
// while the server works returns at the deadline, and the server, told
// the deadline as maxTimeMS, stops too; a canceled one returns at the
// cancel; and the Client serves the next operations as before.
func TestDeadline(t *testing.T) {
	c, reg, log := newClient(t, mongo.Options{Name: "deadline", SlowThreshold: time.Minute})
	coll := c.DB().Collection("big")
	took := fillSlow(t, coll)
	t.Logf("the slow find takes %v with no deadline", took)
	if took < 40*time.Millisecond {
		t.Skipf("the slow find takes only %v here; it cannot be cut short reliably", took)
	}
	short := max(took/4, 30*time.Millisecond)

	t.Run("expired", func(t *testing.T) {
		before := c.Stats().Commands
		ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
		defer cancel()
		err := coll.FindOne(ctx, d()).Err()
		if !errors.Is(err, context.DeadlineExceeded) || !driver.IsTimeout(err) {
			t.Fatalf("FindOne past its deadline: %v; want context.DeadlineExceeded", err)
		}
		if after := c.Stats().Commands; after != before {
			t.Errorf("%d commands were sent past their deadline", after-before)
		}
	})

	t.Run("cut short", func(t *testing.T) {
		from := log.Mark()
		ctx, cancel := context.WithTimeout(t.Context(), short)
		defer cancel()
		start := time.Now()
		err := slowFindOne(ctx, coll)
		elapsed := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) || !driver.IsTimeout(err) {
			t.Fatalf("a find with a %v deadline: %v; want context.DeadlineExceeded", short, err)
		}
		t.Logf("returned after %v with %v", elapsed, err)
		if elapsed > short+time.Second {
			t.Errorf("the find returned after %v; its deadline was %v", elapsed, short)
		}
		// The deadline went to the server too, as maxTimeMS, so the
		// query does not outlive the call there either.
		line := log.WaitFor(t, from, "command failed", "command=find", "collection=big")
		if !strings.Contains(line, "maxTimeMS") {
			t.Errorf("the failed find did not carry maxTimeMS: %s", line)
		}
		if n := counterValue(t, reg, "kiev_mongo_commands_total", "command", "find", "collection", "big", "outcome", "timeout"); n != 1 {
			t.Errorf("finds counted as timeouts: %v, want 1", n)
		}
	})

	t.Run("cut short, cursor", func(t *testing.T) {
		// Find and Aggregate open a cursor, and the driver sends them
		// without maxTimeMS (DRIVERS-2722): the call returns at the
		// deadline; the server may finish the query.
		ctx, cancel := context.WithTimeout(t.Context(), short)
		defer cancel()
		start := time.Now()
		err := slowFind(ctx, coll)
		elapsed := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) || !driver.IsTimeout(err) {
			t.Fatalf("a Find with a %v deadline: %v; want context.DeadlineExceeded", short, err)
		}
		if elapsed > short+time.Second {
			t.Errorf("the Find returned after %v; its deadline was %v", elapsed, short)
		}
	})

	t.Run("canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(short, cancel)
		if err := slowFindOne(ctx, coll); !errors.Is(err, context.Canceled) {
			t.Fatalf("a canceled find: %v; want context.Canceled", err)
		}
	})

	// The Client works as before.
	if n, err := coll.CountDocuments(t.Context(), d()); err != nil || n != 6000 {
		t.Fatalf("CountDocuments after the deadlines: %d, %v; want 6000", n, err)
	}
	if err := slowFindOne(t.Context(), coll); err != nil {
		t.Fatalf("the slow find with no deadline, after: %v", err)
	}
	if err := c.Health(t.Context()); err != nil {
		t.Errorf("Health after the deadlines: %v", err)
	}
}

// counterValue returns the value of the counter name whose labels hold the
// pairs of labels, or 0 if there is none.
func counterValue(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue metrics
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

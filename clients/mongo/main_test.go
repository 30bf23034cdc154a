package mongo_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/goleak"

	"github.com/kievrpc/kiev/clients/mongo"
	"github.com/kievrpc/kiev/internal/logtest"
)

// Environment variables the tests read; scripts/services.sh env sets them.
const (
	envMongo    = "KIEV_MONGO"    // the URI of a shared MongoDB-wire server (FerretDB)
	envFerretDB = "KIEV_FERRETDB" // the path of a FerretDB binary, for private servers
)

// waitTimeout bounds every wait of these tests for something to happen.
const waitTimeout = 20 * time.Second

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// Close (the driver's Disconnect) waits for the driver's
		// goroutines; none has to be ignored.
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// sharedURI returns the shared server's URI, or skips t.
func sharedURI(t testing.TB) string {
	t.Helper()
	uri := os.Getenv(envMongo)
	if uri == "" {
		t.Skipf("set %s to a MongoDB URI (eval \"$(scripts/services.sh env)\" after scripts/services.sh up starts FerretDB)", envMongo)
	}
	return uri
}

var dbSeq atomic.Int64

// uniqueDB returns a database name no other test of any run uses.
func uniqueDB(t testing.TB) string {
	return fmt.Sprintf("kievtest_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9, dbSeq.Add(1))
}

// newClient returns a Client of the shared server, on a database of its
// own that is dropped at the end of t, with a fresh registry and a log
// of its own. opts' URI and Database are set when empty.
func newClient(t testing.TB, opts mongo.Options) (*mongo.Client, *prometheus.Registry, *logtest.Log) {
	t.Helper()
	if opts.URI == "" {
		opts.URI = sharedURI(t)
	}
	if opts.Database == "" {
		opts.Database = uniqueDB(t)
	}
	reg := prometheus.NewRegistry()
	if opts.Registerer == nil {
		opts.Registerer = reg
	}
	logger, lines := logtest.New(t)
	lines.Timeout = waitTimeout
	if opts.Logger == nil {
		opts.Logger = logger
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := mongo.New(ctx, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if errors.Is(c.Health(ctx), mongo.ErrClosed) {
			return // the test closed it, and dropped the database
		}
		if err := c.DB().Drop(ctx); err != nil {
			t.Errorf("dropping %s: %v", c.DB().Name(), err)
		}
		if err := c.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c, reg, lines
}

// d returns the document of the keys and values of kv, in order:
// d("qty", d("$gt", 5)) is bson.D{{Key: "qty", Value: bson.D{{Key: "$gt", Value: 5}}}}.
func d(kv ...any) bson.D {
	doc := make(bson.D, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		doc = append(doc, bson.E{Key: kv[i].(string), Value: kv[i+1]})
	}
	return doc
}

package redis_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/kievrpc/kiev/clients/redis"
)

// waitTimeout bounds every wait of these tests for something to happen.
const waitTimeout = 15 * time.Second

// Environment variables that scripts/services.sh env sets.
const (
	envAddr   = "KIEV_REDIS"        // the shared server, "127.0.0.1:6379"
	envServer = "KIEV_REDIS_SERVER" // the redis-server binary, for private servers
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// sharedAddr returns the address of the shared Redis server, or skips
// the test if there is none.
func sharedAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(envAddr)
	if addr == "" {
		t.Skipf("%s is not set; run eval \"$(scripts/services.sh env)\" for a Redis server", envAddr)
	}
	return addr
}

// newClient returns a Client made with opts, with a registry of its own
// unless opts has one, closed when t ends.
func newClient(t testing.TB, opts redis.Options) *redis.Client {
	t.Helper()
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	c, err := redis.New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// key returns a key unique to the test, on the shared server.
func key(t testing.TB, suffix string) string {
	return fmt.Sprintf("kiev-test:%s:%d:%s", t.Name(), time.Now().UnixNano(), suffix)
}

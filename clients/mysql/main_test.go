package mysql_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/kievrpc/kiev/clients/mysql"
)

// waitTimeout bounds every wait of these tests for something to happen.
const waitTimeout = 15 * time.Second

// envDSN is the variable that scripts/services.sh env sets to the
// shared MariaDB's DSN, "root:@tcp(127.0.0.1:3306)/test".
const envDSN = "KIEV_MYSQL"

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// gorm's prepared-statement cache starts a goroutine that expires
		// its entries and never ends ("done channel is never closed",
		// gorm.io/gorm/internal/lru.NewLRU); dbresolver makes one cache
		// per server, so each DB with replicas leaves them behind.
		if err := goleak.Find(goleak.IgnoreAnyFunction("gorm.io/gorm/internal/lru.NewLRU[...].func1")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// sharedDSN returns the DSN of the shared MariaDB server, or skips the
// test if there is none.
func sharedDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(envDSN)
	if dsn == "" {
		t.Skipf("%s is not set; run eval \"$(scripts/services.sh env)\" for a MariaDB server", envDSN)
	}
	return dsn
}

// open returns a DB opened with opts, with a registry of its own unless
// opts has one, closed when t ends.
func open(t testing.TB, opts mysql.Options) *mysql.DB {
	t.Helper()
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	db, err := mysql.Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// tableName returns a table name unique to the test.
func tableName() string {
	return fmt.Sprintf("kiev_test_%d", time.Now().UnixNano())
}

package mysql_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"

	"github.com/kievrpc/kiev/clients/mysql"
	"github.com/kievrpc/kiev/internal/logtest"
	"github.com/kievrpc/kiev/internal/promtest"
)

// item is the row of the tests' tables.
type item struct {
	ID        int64  `gorm:"primaryKey"`
	Name      string `gorm:"size:64"`
	Price     int
	CreatedAt time.Time
}

// newTable makes a table of items unique to the test, dropped when the
// test ends, and returns its name.
func newTable(t testing.TB, db *gorm.DB) string {
	t.Helper()
	name := tableName()
	if err := db.Table(name).AutoMigrate(&item{}); err != nil {
		t.Fatalf("AutoMigrate: %v", err)
	}
	t.Cleanup(func() { db.Migrator().DropTable(name) })
	return name
}

func TestQueries(t *testing.T) {
	db := open(t, mysql.Options{DSN: sharedDSN(t), Name: "queries"})
	tbl := newTable(t, db.DB)
	ctx := context.Background()
	q := func() *gorm.DB { return db.WithContext(ctx).Table(tbl) }

	a := item{Name: "apple", Price: 3}
	if err := q().Create(&a).Error; err != nil || a.ID == 0 {
		t.Fatalf("Create: id %d, %v", a.ID, err)
	}
	var got item
	if err := q().First(&got, a.ID).Error; err != nil || got.Name != "apple" || got.CreatedAt.IsZero() {
		t.Fatalf("First = %+v, %v; want apple, with its time parsed", got, err)
	}
	if err := q().First(&got, a.ID+1000).Error; !errors.Is(err, gorm.ErrRecordNotFound) {
		t.Fatalf("First of a missing row: %v; want gorm.ErrRecordNotFound", err)
	}
	if err := q().Where("id = ?", a.ID).Update("price", 5).Error; err != nil {
		t.Fatalf("Update: %v", err)
	}
	var items []item
	if err := q().Where("price > ?", 4).Find(&items).Error; err != nil || len(items) != 1 {
		t.Fatalf("Find = %v, %v; want the apple", items, err)
	}
	var sum int
	if err := q().Select("SUM(price)").Row().Scan(&sum); err != nil || sum != 5 {
		t.Fatalf("Row: %d, %v; want 5", sum, err)
	}
	var name string
	if err := db.WithContext(ctx).Raw("SELECT name FROM "+tbl+" WHERE id = ?", a.ID).Scan(&name).Error; err != nil || name != "apple" {
		t.Fatalf("Raw: %q, %v", name, err)
	}
	if err := db.WithContext(ctx).Exec("UPDATE " + tbl + " SET price = price + 1").Error; err != nil {
		t.Fatalf("Exec: %v", err)
	}
	rollback := errors.New("roll back")
	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Table(tbl).Create(&item{Name: "banana"}).Error; err != nil {
			return err
		}
		return rollback
	})
	var n int64
	if q().Count(&n); !errors.Is(err, rollback) || n != 1 {
		t.Fatalf("after a rolled back transaction (%v): %d rows; want 1", err, n)
	}
	if err := q().Delete(&item{}, a.ID).Error; err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := db.Health(ctx); err != nil {
		t.Fatalf("Health: %v", err)
	}
	if sqlDB, err := db.DB.DB(); err != nil || sqlDB.Stats().OpenConnections == 0 {
		t.Fatalf("gorm's DB(): %v", err)
	}
	if s := db.Stats(); s.Queries < 10 || s.Errors != 0 || s.Primary.OpenConnections == 0 || len(s.Replicas) != 0 {
		t.Fatalf("Stats = %+v", s)
	}
}

func TestDeadline(t *testing.T) {
	dsn := sharedDSN(t)
	// One connection: after a statement cut short, the next needs a new
	// one.
	db := open(t, mysql.Options{DSN: dsn, Name: "deadline", MaxOpen: 1})
	tbl := newTable(t, db.DB)

	t.Run("cut short", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		var v int
		err := db.WithContext(ctx).Raw("SELECT SLEEP(2)").Scan(&v).Error
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("SELECT SLEEP(2) under a 100ms ctx: err = %v; want context.DeadlineExceeded", err)
		}
		if took > time.Second {
			t.Fatalf("SELECT SLEEP(2) under a 100ms ctx returned after %v", took)
		}
		t.Logf("SELECT SLEEP(2) cut short after %v: %v", took, err)
	})
	t.Run("ended before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := db.WithContext(ctx).Table(tbl).Create(&item{Name: "never"}).Error; !errors.Is(err, context.Canceled) {
			t.Fatalf("Create under a cancelled ctx: err = %v; want context.Canceled", err)
		}
		var n int64
		if err := db.Table(tbl).Count(&n).Error; err != nil || n != 0 {
			t.Fatalf("%d rows, %v; want none: a statement of an ended ctx ran", n, err)
		}
	})
	t.Run("query timeout", func(t *testing.T) {
		db := open(t, mysql.Options{DSN: dsn, Name: "timeout", QueryTimeout: 100 * time.Millisecond})
		var v int
		if err := db.Raw("SELECT SLEEP(2)").Scan(&v).Error; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("SELECT SLEEP(2) with a QueryTimeout of 100ms and no ctx: err = %v; want context.DeadlineExceeded", err)
		}
	})
	// The pool is as good as before.
	var v int
	if err := db.WithContext(context.Background()).Raw("SELECT 41 + 1").Scan(&v).Error; err != nil || v != 42 {
		t.Fatalf("SELECT after the deadlines: %d, %v", v, err)
	}
	if s := db.Stats(); s.Primary.OpenConnections != 1 {
		t.Fatalf("Stats.Primary = %+v; want 1 open connection", s.Primary)
	}
}

// TestServerRestart kills a private server under a DB, and starts it
// again: statements fail while it is down, and succeed again once it is
// back, with the same DB.
func TestServerRestart(t *testing.T) {
	srv := startServer(t)
	log, rec := logtest.New(t)
	reg := prometheus.NewRegistry()
	db := open(t, mysql.Options{DSN: srv.dsn("pw"), Name: "restart", Logger: log, Registerer: reg})
	tbl := newTable(t, db.DB)
	ctx := context.Background()
	if err := db.WithContext(ctx).Table(tbl).Create(&item{Name: "before"}).Error; err != nil {
		t.Fatalf("Create: %v", err)
	}

	// A statement in flight when the server dies fails then, not at the
	// end of its ctx.
	inflight := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		var v int
		inflight <- db.WithContext(ctx).Raw("SELECT SLEEP(60)").Scan(&v).Error
	}()
	srv.waitRunning(t, "SELECT SLEEP(60)")
	from := rec.Mark()
	srv.kill()
	killed := time.Now()
	select {
	case err := <-inflight:
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("SELECT SLEEP(60) in flight when the server died: err = %v; want the broken connection", err)
		}
		t.Logf("SELECT SLEEP(60) in flight failed %v after the server died: %v", time.Since(killed), err)
	case <-time.After(waitTimeout):
		t.Fatalf("SELECT SLEEP(60) in flight when the server died has not returned after %v", waitTimeout)
	}

	var got item
	err := db.WithContext(ctx).Table(tbl).First(&got).Error
	if err == nil {
		t.Fatalf("First with the server down succeeded")
	}
	t.Logf("First with the server down: %v", err)
	if !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("First with the server down: err = %v; want a refused connection", err)
	}
	rec.WaitFor(t, from, "mysql: cannot connect", "client=restart", `server="primary root@tcp(`+srv.addr+`)/test"`)
	if err := db.Health(ctx); !errors.Is(err, mysql.ErrUnavailable) || !strings.Contains(err.Error(), srv.addr) {
		t.Fatalf("Health with the server down = %v; want ErrUnavailable naming %s", err, srv.addr)
	}

	srv.start()
	start := time.Now()
	deadline := start.Add(waitTimeout)
	for {
		// Polls the DB until the server is back in its eyes.
		err = db.WithContext(ctx).Table(tbl).First(&got).Error
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("First still fails %v after the server came back: %v", waitTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("statements succeed again %v after the server came back", time.Since(start))
	if got.Name != "before" {
		t.Fatalf("First after the restart = %+v", got)
	}
	rec.WaitFor(t, from, "mysql: connected again", "client=restart", "down=")
	if err := db.Health(ctx); err != nil {
		t.Fatalf("Health after the restart: %v", err)
	}
	if s := db.Stats(); s.DialErrors == 0 || s.Errors == 0 {
		t.Fatalf("Stats = %+v; want the failed dials and statements counted", s)
	}
	if v := promtest.Metric(t, reg, "kiev_mysql_queries_total", map[string]string{"client": "restart", "table": tbl, "operation": "query", "outcome": "error"}); v < 1 {
		t.Fatalf("failed queries counted %v; want at least 1", v)
	}
}

func TestMetrics(t *testing.T) {
	dsn := sharedDSN(t)
	reg := prometheus.NewRegistry()
	a := open(t, mysql.Options{DSN: dsn, Name: "a", Registerer: reg})
	b := open(t, mysql.Options{DSN: dsn, Name: "b", Registerer: reg})
	tbl := newTable(t, a.DB)
	ctx := context.Background()
	q := func() *gorm.DB { return a.WithContext(ctx).Table(tbl) }

	q().Create(&item{ID: 1, Name: "x"})
	q().Create(&item{ID: 1, Name: "dup"}) // duplicate key: error
	var it item
	q().First(&it, 1)
	q().First(&it, 2) // not found: ok
	q().Where("id = ?", 1).Update("price", 2)
	q().Delete(&item{}, 1)
	a.WithContext(ctx).Exec("SELEC 1") // syntax error
	var v int
	b.WithContext(ctx).Raw("SELECT 1").Scan(&v)

	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"kiev_mysql_queries_total", map[string]string{"client": "a", "table": tbl, "operation": "create", "outcome": "ok"}, 1},
		{"kiev_mysql_queries_total", map[string]string{"client": "a", "table": tbl, "operation": "create", "outcome": "error"}, 1},
		{"kiev_mysql_queries_total", map[string]string{"client": "a", "table": tbl, "operation": "query", "outcome": "ok"}, 2},
		{"kiev_mysql_queries_total", map[string]string{"client": "a", "table": tbl, "operation": "update", "outcome": "ok"}, 1},
		{"kiev_mysql_queries_total", map[string]string{"client": "a", "table": tbl, "operation": "delete", "outcome": "ok"}, 1},
		{"kiev_mysql_queries_total", map[string]string{"client": "a", "table": "", "operation": "raw", "outcome": "error"}, 1},
		{"kiev_mysql_queries_total", map[string]string{"client": "b", "table": "", "operation": "row", "outcome": "ok"}, 1},
		{"kiev_mysql_query_duration_seconds", map[string]string{"client": "a", "table": tbl, "operation": "query"}, 2},
	} {
		if got := promtest.Metric(t, reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v; want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if idle := promtest.Metric(t, reg, "kiev_mysql_pool_connections", map[string]string{"client": "a", "state": "idle"}); idle < 1 {
		t.Errorf("idle connections of a = %v; want at least 1", idle)
	}
	promtest.Metric(t, reg, "kiev_mysql_pool_connections", map[string]string{"client": "b", "state": "in_use"})
	promtest.Metric(t, reg, "kiev_mysql_pool_waits_total", map[string]string{"client": "a"})
	promtest.Metric(t, reg, "kiev_mysql_pool_wait_seconds_total", map[string]string{"client": "a"})
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("metrics break Prometheus conventions: %v %v", problems, err)
	}
	if s := a.Stats(); s.Errors != 2 {
		t.Errorf("a's Stats.Errors = %d; want 2", s.Errors)
	}

	// Another DB of the same name on the registry is refused.
	if _, err := mysql.Open(mysql.Options{DSN: dsn, Name: "a", Registerer: reg}); !errors.Is(err, mysql.ErrOptions) || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("Open with a Name in use: err = %v; want ErrOptions naming it", err)
	}
	// Close removes a DB's series and frees its name.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kiev_mysql_queries_total", "kiev_mysql_query_duration_seconds", "kiev_mysql_pool_connections"} {
		if _, ok := promtest.FindMetric(t, reg, name, map[string]string{"client": "a"}); ok {
			t.Errorf("%s{client=a} is still there after Close", name)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "kiev_mysql_queries_total"); err != nil || n != 2 {
		t.Errorf("%d series of kiev_mysql_queries_total after a's Close (%v); want b's two, ok and error", n, err)
	}
	a2 := open(t, mysql.Options{DSN: dsn, Name: "a", Registerer: reg})
	a2.WithContext(ctx).Raw("SELECT 1").Scan(&v)
	if got := promtest.Metric(t, reg, "kiev_mysql_queries_total", map[string]string{"client": "a", "operation": "row", "outcome": "ok"}); got != 1 {
		t.Errorf("a new DB a counts from %v; want 1", got)
	}
}

func TestSlowAndFailedLogged(t *testing.T) {
	const password = "s3cret-Pa55w0rd-never-logged"
	const param = "param-value-never-logged"
	srv := startServer(t)
	log, rec := logtest.New(t)
	db := open(t, mysql.Options{DSN: srv.dsn(password), Name: "slow", SlowThreshold: 30 * time.Millisecond, Logger: log})
	// The lines are logged with the statement's ctx.
	ctx := logtest.WithRequest(context.Background(), "r1")

	var v []map[string]any
	if err := db.WithContext(ctx).Raw("SELECT   SLEEP(?),\n\t? AS p", 0.05, param).Scan(&v).Error; err != nil {
		t.Fatalf("SELECT SLEEP: %v", err)
	}
	line := rec.WaitFor(t, 0, "mysql: slow statement", `sql="SELECT SLEEP(?), ? AS p"`, "client=slow", "op=row", "req=r1")
	t.Logf("slow: %s", line)
	db.WithContext(ctx).Raw("SELECT ?", param).Scan(&v)
	if rec.Has("mysql: slow statement", `sql="SELECT ?"`) {
		t.Fatalf("a fast SELECT was logged as slow:\n%s", rec.All())
	}

	err := db.WithContext(ctx).Exec("INSERT INTO no_such_table VALUES (?)", param).Error
	if err == nil {
		t.Fatal("INSERT into a missing table succeeded")
	}
	line = rec.WaitFor(t, 0, "mysql: statement failed", `sql="INSERT INTO no_such_table VALUES (?)"`, "doesn't exist", "req=r1")
	t.Logf("failed: %s", line)

	// Long statements are cut.
	long := "SELECT 1 AS " + strings.Repeat("c", 400)
	slowAll := open(t, mysql.Options{DSN: srv.dsn(password), Name: "slow-all", SlowThreshold: time.Nanosecond, Logger: log})
	slowAll.WithContext(ctx).Raw(long).Scan(&v)
	line = rec.WaitFor(t, 0, "mysql: slow statement", "client=slow-all", "SELECT 1 AS ccc")
	if want := `sql="SELECT 1 AS ` + strings.Repeat("c", 300-len("SELECT 1 AS ")) + `…"`; !strings.Contains(line, want) {
		t.Errorf("logged %s\nwant it to hold %s", line, want)
	}

	all := rec.All()
	for _, secret := range []string{password, param} {
		if strings.Contains(all, secret) {
			t.Fatalf("%q is in the log:\n%s", secret, all)
		}
	}
	if s := db.Stats(); s.Slow != 1 || s.Errors != 1 {
		t.Fatalf("Stats = %+v; want 1 slow, 1 failed", s)
	}
}

// TestReplicas opens a DB whose replica is another server: reads go to
// it, writes to the primary.
func TestReplicas(t *testing.T) {
	primaryDSN := sharedDSN(t)
	replica := startServer(t)
	log, rec := logtest.New(t)
	db := open(t, mysql.Options{DSN: primaryDSN, Replicas: []string{replica.dsn("")}, Name: "replicas", Logger: log})
	// The same table on both, with a row that tells which it is.
	onPrimary, onReplica := gormOn(t, primaryDSN), gormOn(t, replica.dsn(""))
	tbl := newTable(t, onPrimary)
	if err := onReplica.Table(tbl).AutoMigrate(&item{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := db.WithContext(ctx).Table(tbl).Create(&item{ID: 1, Name: "primary"}).Error; err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := onReplica.Table(tbl).Create(&item{ID: 1, Name: "replica"}).Error; err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := onPrimary.Table(tbl).Count(&n).Error; err != nil || n != 1 {
		t.Fatalf("the primary has %d rows (%v); want the one created through the DB", n, err)
	}

	var got item
	if err := db.WithContext(ctx).Table(tbl).First(&got, 1).Error; err != nil || got.Name != "replica" {
		t.Fatalf("First = %+v, %v; want the replica's row", got, err)
	}
	if err := db.WithContext(ctx).Clauses(dbresolver.Write).Table(tbl).First(&got, 1).Error; err != nil || got.Name != "primary" {
		t.Fatalf("First with dbresolver.Write = %+v, %v; want the primary's row", got, err)
	}
	if s := db.Stats(); len(s.Replicas) != 1 || s.Replicas[0].OpenConnections == 0 {
		t.Fatalf("Stats = %+v; want the replica's pool used", s)
	}
	if err := db.Health(ctx); err != nil {
		t.Fatalf("Health: %v", err)
	}
	rec.WaitFor(t, 0, "mysql: connected", `server="replica 1 root@tcp(`+replica.addr+`)/test"`)

	replica.kill()
	err := db.Health(ctx)
	if !errors.Is(err, mysql.ErrUnavailable) || !strings.Contains(err.Error(), "replica 1 root@tcp("+replica.addr+")/test") || strings.Contains(err.Error(), "primary") {
		t.Fatalf("Health with the replica down = %v; want ErrUnavailable naming the replica alone", err)
	}
	t.Logf("Health: %v", err)
}

// gormOn opens a bare gorm on dsn, closed when t ends.
func gormOn(t testing.TB, dsn string) *gorm.DB {
	t.Helper()
	g, err := gormOpen(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := g.DB(); err == nil {
			sqlDB.Close()
		}
	})
	return g
}

func TestOpenFails(t *testing.T) {
	dsn := sharedDSN(t)
	down := "127.0.0.1:" + strconv.Itoa(freePort(t))
	for _, tc := range []struct {
		name string
		opts mysql.Options
		want string
	}{
		{"no server", mysql.Options{DSN: "root@tcp(" + down + ")/test"}, `"default": primary root@tcp(` + down + `)/test: dial tcp`},
		{"no replica", mysql.Options{DSN: dsn, Replicas: []string{"root@tcp(" + down + ")/test"}}, "replica 1 root@tcp(" + down + ")/test"},
		{"wrong password", mysql.Options{DSN: dsn, Password: "wrong-Pa55w0rd"}, "Access denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Registerer = prometheus.NewRegistry()
			start := time.Now()
			db, err := mysql.Open(tc.opts)
			if err == nil {
				db.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, mysql.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %v; want ErrUnavailable saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "Pa55w0rd") {
				t.Fatalf("Open's error holds the password: %v", err)
			}
			t.Logf("after %v: %v", time.Since(start), err)
		})
	}

	db := open(t, mysql.Options{DSN: dsn})
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("second Close: %v; want nil", err)
	}
	if err := db.Health(context.Background()); !errors.Is(err, mysql.ErrClosed) {
		t.Fatalf("Health after Close = %v; want ErrClosed", err)
	}
	var v int
	if err := db.Raw("SELECT 1").Scan(&v).Error; err == nil {
		t.Fatal("SELECT after Close succeeded")
	}
}

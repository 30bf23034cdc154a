package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kievrpc/kiev/clients/config"
	"github.com/kievrpc/kiev/clients/mysql"
)

// TestOptionsInvalid needs no server: Open refuses these before it
// connects.
func TestOptionsInvalid(t *testing.T) {
	const good = "root@tcp(127.0.0.1:3306)/test"
	for _, tc := range []struct {
		name string
		opts mysql.Options
		want string // in the error
	}{
		{"no DSN", mysql.Options{}, "DSN is empty; give a DSN such as user:password@tcp(10.0.0.1:3306)/shop"},
		{"url", mysql.Options{DSN: "mysql://root:Pa55w0rd@10.0.0.1:3306/shop"}, "DSN is a mysql:// URL; the driver takes a DSN such as"},
		{"no slash", mysql.Options{DSN: "root:Pa55w0rd@tcp(10.0.0.1:3306)"}, "DSN does not parse (invalid DSN: missing the slash separating the database name)"},
		{"open paren", mysql.Options{DSN: "root:Pa55w0rd@tcp(10.0.0.1:3306/shop"}, "network address not terminated"},
		{"bad param", mysql.Options{DSN: good + "?parseTime=maybe"}, "DSN does not parse (invalid bool value: maybe)"},
		{"bad port", mysql.Options{DSN: "root:Pa55w0rd@tcp(10.0.0.1:mysql)/shop"}, `DSN: port "mysql" is not a number`},
		{"no network", mysql.Options{DSN: "root:Pa55w0rd@10.0.0.1:3306/shop"}, "DSN gives the address 10.0.0.1:3306 without its network; write tcp(10.0.0.1:3306)"},
		{"no host", mysql.Options{DSN: "root:Pa55w0rd@tcp(:3306)/shop"}, "DSN: the address in tcp(...) is not host:port"},
		{"no database", mysql.Options{DSN: "root:Pa55w0rd@tcp(10.0.0.1:3306)/"}, "DSN names no database"},
		{"slash in a password", mysql.Options{DSN: "root:Pa/55w0rd@tcp(10.0.0.1:3306)"}, "missing the slash"},
		{"bad replica", mysql.Options{DSN: good, Replicas: []string{good, "Pa55w0rd"}}, "Replicas[1] does not parse"},
		{"negative max open", mysql.Options{DSN: good, MaxOpen: -1}, "MaxOpen is -1"},
		{"negative max idle", mysql.Options{DSN: good, MaxIdle: -1}, "MaxIdle is -1"},
		{"idle over open", mysql.Options{DSN: good, MaxOpen: 4, MaxIdle: 8}, "MaxIdle (8) is more than MaxOpen (4)"},
		{"negative lifetime", mysql.Options{DSN: good, ConnMaxLifetime: -time.Second}, "ConnMaxLifetime is -1s"},
		{"negative idle time", mysql.Options{DSN: good, ConnMaxIdleTime: -time.Second}, "ConnMaxIdleTime"},
		{"negative connect timeout", mysql.Options{DSN: good, ConnectTimeout: -time.Second}, "ConnectTimeout"},
		{"negative query timeout", mysql.Options{DSN: good, QueryTimeout: -time.Second}, "QueryTimeout"},
		{"negative slow", mysql.Options{DSN: good, SlowThreshold: -time.Second}, "SlowThreshold"},
		{"bad name", mysql.Options{DSN: good, Name: "my db"}, `Name "my db"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Registerer = prometheus.NewRegistry()
			db, err := mysql.Open(tc.opts)
			if err == nil {
				db.Close()
				t.Fatalf("Open(%v) succeeded", tc.opts)
			}
			if !errors.Is(err, mysql.ErrOptions) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %v; want ErrOptions saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "Pa55w0rd") {
				t.Fatalf("Open's error holds the password: %v", err)
			}
			t.Log(err)
		})
	}
}

// TestOptionsFromConfig loads Options from a config source, as a service
// does, and uses them.
func TestOptionsFromConfig(t *testing.T) {
	dsn := sharedDSN(t)
	src := config.NewMemory(map[string]string{
		"mysql.dsn":            dsn,
		"mysql.replicas":       `["` + dsn + `"]`,
		"mysql.max_open":       "8",
		"mysql.slow_threshold": "50ms",
		"mysql.query_timeout":  "2s",
		"mysql.name":           "orders",
	})
	conf, err := config.New(context.Background(), src, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conf.Close()
	var cfg struct {
		MySQL mysql.Options `config:"mysql"`
	}
	if err := conf.Decode(&cfg); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	o := cfg.MySQL
	if o.DSN != dsn || len(o.Replicas) != 1 || o.MaxOpen != 8 || o.SlowThreshold != 50*time.Millisecond ||
		o.QueryTimeout != 2*time.Second || o.Name != "orders" {
		t.Fatalf("decoded %v", o)
	}
	db := open(t, o)
	if err := db.Health(context.Background()); err != nil {
		t.Fatalf("Health: %v", err)
	}
	if s := db.Stats(); s.Primary.MaxOpenConnections != 8 || len(s.Replicas) != 1 || s.Replicas[0].MaxOpenConnections != 8 {
		t.Fatalf("Stats = %+v; want pools of 8, the primary's and a replica's", s)
	}
}

func TestOptionsString(t *testing.T) {
	o := mysql.Options{
		DSN:      "app:dsn-secret@tcp(10.0.0.1:3306)/shop",
		Replicas: []string{"app:replica-secret@tcp(10.0.0.2:3306)/shop", "not a DSN, secret"},
		Password: "field-secret",
	}
	for _, s := range []string{o.String(), fmt.Sprintf("%v %+v", o, &o)} {
		if strings.Contains(s, "secret") {
			t.Fatalf("Options print a password: %s", s)
		}
		if !strings.Contains(s, "app:***@tcp(10.0.0.1:3306)/shop") || !strings.Contains(s, "Password:***") {
			t.Fatalf("Options print as %s", s)
		}
	}
}

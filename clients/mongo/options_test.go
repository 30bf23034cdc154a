package mongo_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kievrpc/kiev/clients/config"
	"github.com/kievrpc/kiev/clients/mongo"
)

// TestBadOptions shows New refusing options it cannot use, at once, with
// an error that names what is wrong, and never shows the password.
func TestBadOptions(t *testing.T) {
	for _, tc := range []struct {
		about string
		opts  mongo.Options
		want  string // in the error
	}{
		{"no scheme", mongo.Options{URI: "db1:27017"}, `scheme must be "mongodb" or "mongodb+srv"`},
		{"http", mongo.Options{URI: "http://db1:27017"}, `scheme must be "mongodb" or "mongodb+srv"`},
		{"no host", mongo.Options{URI: "mongodb://bob:s3cret@/shop"}, "must have at least 1 host"},
		{"bad port", mongo.Options{URI: "mongodb://bob:s3cret@db1:99999"}, "port must be in the range"},
		{"unescaped @", mongo.Options{URI: "mongodb://bob:s3c@ret@db1"}, "unescaped @"},
		{"bad escape", mongo.Options{URI: "mongodb://bob:s3cret%zz@db1"}, "invalid password"},
		{"misspelt option", mongo.Options{URI: "mongodb://bob:s3cret@db1/?replSet=rs0"}, `unknown option "replset"`},
		{"bad option value", mongo.Options{URI: "mongodb://db1/?connectTimeoutMS=soon"}, `invalid value for "connectTimeoutMS"`},
		{"bad read preference", mongo.Options{URI: "mongodb://db1/?readPreference=nearby"}, "nearby"},
		{"direct to a set", mongo.Options{URI: "mongodb://db1,db2/?directConnection=true"}, "direct connection"},
		{"srv with port", mongo.Options{URI: "mongodb+srv://bob:s3cret@cluster.example.com:27017"}, "port"},
		{"missing CA file", mongo.Options{URI: "mongodb://db1/?tlsCAFile=/nonexistent/ca.pem"}, "/nonexistent/ca.pem"},
		{"database with a dot", mongo.Options{Database: "shop.v2"}, `Database "shop.v2" holds "."`},
		{"database with a space", mongo.Options{Database: "my shop"}, `holds " "`},
		{"URI database with a $", mongo.Options{URI: "mongodb://db1/sh$op"}, `the URI's database (its path) "sh$op"`},
		{"database too long", mongo.Options{Database: strings.Repeat("d", 64)}, "64 bytes long"},
		{"negative pool", mongo.Options{MaxPoolSize: -1}, "MaxPoolSize is -1"},
		{"pool twice", mongo.Options{URI: "mongodb://db1/?maxPoolSize=5", MaxPoolSize: 10}, "set one of them"},
		{"negative connect timeout", mongo.Options{ConnectTimeout: -time.Second}, "ConnectTimeout is -1s"},
		{"connect timeout twice", mongo.Options{URI: "mongodb://db1/?connectTimeoutMS=500", ConnectTimeout: time.Second}, "connectTimeoutMS=500"},
		{"negative slow threshold", mongo.Options{SlowThreshold: -time.Millisecond}, "SlowThreshold is -1ms"},
	} {
		t.Run(tc.about, func(t *testing.T) {
			tc.opts.Registerer = prometheus.NewRegistry()
			start := time.Now()
			c, err := mongo.New(context.Background(), tc.opts)
			if err == nil {
				c.Close(context.Background())
				t.Fatalf("New(%+v) succeeded", tc.opts)
			}
			if !errors.Is(err, mongo.ErrOptions) {
				t.Errorf("New: %v; want it to wrap ErrOptions", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v; want it to say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("New: %v; shows the password", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("New took %v to refuse bad options", d)
			}
		})
	}
}

// TestUnreachable shows New failing, within its ctx, when no server
// answers.
func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	reg := prometheus.NewRegistry()
	start := time.Now()
	_, err = mongo.New(ctx, mongo.Options{URI: "mongodb://bob:s3cret@" + addr, Registerer: reg})
	if !errors.Is(err, mongo.ErrUnavailable) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("New of %s, where nothing listens: %v; want ErrUnavailable naming the address", addr, err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error shows the password: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("New took %v with a 500ms ctx", d)
	}
	if n, _ := reg.Gather(); len(n) != 0 {
		t.Errorf("a failed New left %d metrics registered", len(n))
	}
	t.Log(err)
}

// TestOptionsFromConfig loads Options from the config center, here a
// Memory source, and makes a Client with them.
func TestOptionsFromConfig(t *testing.T) {
	uri := sharedURI(t)
	db := uniqueDB(t)
	src := config.NewMemory(map[string]string{
		"mongo.uri":             uri,
		"mongo.database":        db,
		"mongo.max_pool_size":   "8",
		"mongo.connect_timeout": "3s",
		"mongo.slow_threshold":  "250ms",
		"mongo.name":            "orders",
	})
	cc, err := config.New(t.Context(), src, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var cfg struct {
		Mongo mongo.Options `config:"mongo"`
	}
	if err := cc.Decode(&cfg); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	want := mongo.Options{URI: uri, Database: db, MaxPoolSize: 8, ConnectTimeout: 3 * time.Second, SlowThreshold: 250 * time.Millisecond, Name: "orders"}
	if cfg.Mongo != want {
		t.Fatalf("decoded %+v, want %+v", cfg.Mongo, want)
	}
	c, reg, _ := newClient(t, cfg.Mongo)
	if c.DB().Name() != db {
		t.Errorf("DB() is %q, want %q", c.DB().Name(), db)
	}
	if n := counterValue(t, reg, "kiev_mongo_commands_total", "client", "orders", "command", "ping", "outcome", "ok"); n != 1 {
		t.Errorf("pings counted under client=orders: %v, want 1", n)
	}
}

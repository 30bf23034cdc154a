package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"

	"github.com/kievrpc/kiev/clients/config"
	"github.com/kievrpc/kiev/clients/redis"
	"github.com/kievrpc/kiev/internal/logtest"
)

func TestOptionsInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts redis.Options
		want string // in the error
	}{
		{"url", redis.Options{Addrs: []string{"redis://:pw@10.0.0.1:6379/0"}}, "a URL, not an address"},
		{"no port", redis.Options{Addrs: []string{"10.0.0.1"}}, `Addrs[0] "10.0.0.1": not host:port`},
		{"bad port", redis.Options{Addrs: []string{"10.0.0.1:redis"}}, `port "redis"`},
		{"port 0", redis.Options{Addrs: []string{"10.0.0.1:0"}}, `port "0"`},
		{"no host", redis.Options{Addrs: []string{":6379"}}, "no host"},
		{"empty addr", redis.Options{Addrs: []string{"10.0.0.1:6379", ""}}, "Addrs[1]"},
		{"socket in a cluster", redis.Options{Addrs: []string{"/run/redis.sock"}, Cluster: true}, "Unix socket"},
		{"cluster and sentinel", redis.Options{Cluster: true, MasterName: "m"}, "both Cluster and MasterName"},
		{"sentinel password alone", redis.Options{SentinelPassword: "x"}, "MasterName is empty"},
		{"negative db", redis.Options{DB: -1}, "DB is -1"},
		{"db in a cluster", redis.Options{Addrs: []string{"a:1", "b:2"}, DB: 2}, "database 0 only"},
		{"negative pool", redis.Options{PoolSize: -5}, "PoolSize is -5"},
		{"negative timeout", redis.Options{ReadTimeout: -time.Second}, "ReadTimeout is -1s"},
		{"negative dial timeout", redis.Options{DialTimeout: -1}, "DialTimeout"},
		{"negative slow", redis.Options{SlowThreshold: -time.Millisecond}, "SlowThreshold"},
		{"bad name", redis.Options{Name: "my client"}, `Name "my client"`},
		{"long name", redis.Options{Name: strings.Repeat("n", 65)}, "at most 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := redis.New(tc.opts)
			if err == nil {
				c.Close()
				t.Fatalf("New(%v) succeeded", tc.opts)
			}
			if !errors.Is(err, redis.ErrOptions) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v; want ErrOptions saying %q", err, tc.want)
			}
			t.Log(err)
		})
	}
}

// TestOptionsValid makes Clients of good options, without a server: New
// does not connect.
func TestOptionsValid(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts redis.Options
		want any // the type of UniversalClient
	}{
		{"zero", redis.Options{}, &goredis.Client{}},
		{"socket", redis.Options{Addrs: []string{"/run/redis.sock"}}, &goredis.Client{}},
		{"ipv6", redis.Options{Addrs: []string{"[::1]:6379"}}, &goredis.Client{}},
		{"cluster", redis.Options{Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379"}}, &goredis.ClusterClient{}},
		{"one-seed cluster", redis.Options{Addrs: []string{"cfg.example:6379"}, Cluster: true}, &goredis.ClusterClient{}},
		{"sentinel", redis.Options{Addrs: []string{"10.0.0.1:26379", "10.0.0.2:26379"}, MasterName: "m", DB: 3}, &goredis.Client{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var configured *goredis.UniversalOptions
			tc.opts.Configure = func(o *goredis.UniversalOptions) { configured = o }
			c := newClient(t, tc.opts)
			if got, want := fmt.Sprintf("%T", c.UniversalClient), fmt.Sprintf("%T", tc.want); got != want {
				t.Fatalf("UniversalClient is a %s; want a %s", got, want)
			}
			if configured == nil || !configured.ContextTimeoutEnabled || configured.ReadTimeout != redis.DefaultReadTimeout {
				t.Fatalf("Configure saw %+v; want ContextTimeoutEnabled and the defaults", configured)
			}
		})
	}
}

// TestOptionsFromConfig loads Options from a config source, as a service
// does, and uses them.
func TestOptionsFromConfig(t *testing.T) {
	addr := sharedAddr(t)
	src := config.NewMemory(map[string]string{
		"redis.addrs":          `["` + addr + `"]`,
		"redis.db":             "2",
		"redis.read_timeout":   "750ms",
		"redis.slow_threshold": "20ms",
		"redis.name":           "sessions",
		"redis.pool_size":      "4",
	})
	conf, err := config.New(context.Background(), src, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conf.Close()
	var cfg struct {
		Redis redis.Options `config:"redis"`
	}
	if err := conf.Decode(&cfg); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	o := cfg.Redis
	if len(o.Addrs) != 1 || o.Addrs[0] != addr || o.DB != 2 || o.ReadTimeout != 750*time.Millisecond ||
		o.SlowThreshold != 20*time.Millisecond || o.Name != "sessions" || o.PoolSize != 4 {
		t.Fatalf("decoded %v", o)
	}
	o.Registerer = prometheus.NewRegistry()
	c := newClient(t, o)
	ctx := context.Background()
	if err := c.Health(ctx); err != nil {
		t.Fatalf("Health: %v", err)
	}
	k := key(t, "k")
	defer c.Del(ctx, k)
	if err := c.Set(ctx, k, "in db 2", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	// The key is in database 2, not 0.
	db0 := newClient(t, redis.Options{Addrs: []string{addr}})
	if err := db0.Get(ctx, k).Err(); !errors.Is(err, goredis.Nil) {
		t.Fatalf("GET in database 0: %v; want redis.Nil", err)
	}
}

func TestOptionsString(t *testing.T) {
	o := redis.Options{Addrs: []string{"10.0.0.1:6379"}, Password: "hunter2-secret", SentinelPassword: "sentinel-secret", Name: "x"}
	for _, s := range []string{o.String(), fmtV(o), fmtV(&o)} {
		if strings.Contains(s, "secret") {
			t.Fatalf("Options print their password: %s", s)
		}
		if !strings.Contains(s, "10.0.0.1:6379") || !strings.Contains(s, "Password:***") {
			t.Fatalf("Options print as %s", s)
		}
	}
}

func fmtV(v any) string { return fmt.Sprintf("%v %+v", v, v) }

func TestLibraryLog(t *testing.T) {
	log, rec := logtest.New(t)
	_ = func() { goredis.SetLogger(redis.LibraryLog{}) } // it is go-redis's logger; not called, as that is global
	redis.LibraryLog{Logger: log}.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v\n", 5, "refused")
	rec.WaitFor(t, 0, "level=INFO", `msg="redis: go-redis says"`, `detail="redis: connection pool: failed to dial after 5 attempts: refused"`)
	redis.LibraryLog{}.Printf(context.Background(), "discarded")
}

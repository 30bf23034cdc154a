package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"

	"github.com/kievrpc/kiev/clients/config"
	"github.com/kievrpc/kiev/clients/redis"
)

// A service loads its Redis options from the config center, with the
// rest of its configuration. New checks them before anything connects.
func Example() {
	src := config.NewMemory(map[string]string{
		"redis.addrs":          `["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"]`,
		"redis.password":       "s3cret",
		"redis.read_timeout":   "500ms",
		"redis.slow_threshold": "50ms",
		"redis.name":           "sessions",
	})
	conf, err := config.New(context.Background(), src, config.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer conf.Close()
	var cfg struct {
		Redis redis.Options `config:"redis"`
	}
	if err := conf.Decode(&cfg); err != nil {
		log.Fatal(err)
	}
	fmt.Println(cfg.Redis.Addrs, cfg.Redis.ReadTimeout, cfg.Redis.Password == "s3cret")

	cfg.Redis.Registerer = prometheus.NewRegistry()
	rdb, err := redis.New(cfg.Redis)
	if err != nil {
		log.Fatal(err)
	}
	defer rdb.Close()
	_, cluster := rdb.UniversalClient.(*goredis.ClusterClient)
	fmt.Println("cluster:", cluster)

	// Options that cannot work are refused at once, saying why.
	_, err = redis.New(redis.Options{Addrs: []string{"redis://10.0.0.1:6379/0"}})
	fmt.Println(errors.Is(err, redis.ErrOptions))
	fmt.Println(err)
	// Output:
	// [10.0.0.1:6379 10.0.0.2:6379 10.0.0.3:6379] 500ms true
	// cluster: true
	// true
	// kiev/clients/redis: invalid options: Addrs[0] "redis://10.0.0.1:6379/0": a URL, not an address; write host:port, such as 10.0.0.1:6379, and set Username, Password and DB on their own
}

// A handler passes its ctx to every command, so that none outlives the
// call. (It needs a Redis server, so it is not run.)
func ExampleNew() {
	rdb, err := redis.New(redis.Options{
		Addrs:  []string{"127.0.0.1:6379"},
		Name:   "cache",
		Logger: slog.Default(),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer rdb.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	price, err := rdb.Get(ctx, "price:42").Int()
	switch {
	case errors.Is(err, goredis.Nil):
		fmt.Println("not cached")
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Println("Redis is too slow for this call")
	case err != nil:
		fmt.Println("Redis failed:", err)
	default:
		fmt.Println("price", price)
	}
	fmt.Printf("%+v\n", rdb.Stats())
}

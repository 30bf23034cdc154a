package redis_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	goredis "github.com/redis/go-redis/v9"

	"github.com/kievrpc/kiev/clients/redis"
	"github.com/kievrpc/kiev/internal/logtest"
	"github.com/kievrpc/kiev/internal/promtest"
)

func TestCommands(t *testing.T) {
	addr := sharedAddr(t)
	c := newClient(t, redis.Options{Addrs: []string{addr}, Name: "commands"})
	ctx := context.Background()
	if _, ok := c.UniversalClient.(*goredis.Client); !ok {
		t.Fatalf("UniversalClient is a %T; want a *redis.Client for one address", c.UniversalClient)
	}
	k := key(t, "k")
	t.Cleanup(func() { c.Del(context.Background(), k, k+"h", k+"n") })

	if err := c.Set(ctx, k, "v1", time.Minute).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.Get(ctx, k).Result(); err != nil || got != "v1" {
		t.Fatalf("GET = %q, %v; want v1", got, err)
	}
	if _, err := c.Get(ctx, k+"-missing").Result(); !errors.Is(err, goredis.Nil) {
		t.Fatalf("GET of a missing key: err = %v; want redis.Nil, unchanged", err)
	}
	if err := c.HSet(ctx, k+"h", "a", 1, "b", 2).Err(); err != nil {
		t.Fatalf("HSET: %v", err)
	}
	if got, err := c.HGetAll(ctx, k+"h").Result(); err != nil || got["a"] != "1" || got["b"] != "2" {
		t.Fatalf("HGETALL = %v, %v", got, err)
	}
	cmds, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		p.Incr(ctx, k+"n")
		p.Incr(ctx, k+"n")
		p.Get(ctx, k)
		return nil
	})
	if err != nil || len(cmds) != 3 || cmds[1].(*goredis.IntCmd).Val() != 2 || cmds[2].(*goredis.StringCmd).Val() != "v1" {
		t.Fatalf("pipeline: %v, %v", cmds, err)
	}
	if _, err := c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.Incr(ctx, k+"n")
		return nil
	}); err != nil {
		t.Fatalf("MULTI/EXEC: %v", err)
	}
	if n, err := c.Get(ctx, k+"n").Int(); err != nil || n != 3 {
		t.Fatalf("counter = %d, %v; want 3", n, err)
	}
	// A server's error reply is go-redis's, unchanged.
	if err := c.Incr(ctx, k).Err(); err == nil || !strings.Contains(err.Error(), "not an integer") {
		t.Fatalf("INCR of a string: err = %v; want the server's error", err)
	}
	if err := c.Health(ctx); err != nil {
		t.Fatalf("Health: %v", err)
	}
	s := c.Stats()
	// SET GET GET HSET HGETALL, 3 in the pipeline, MULTI INCR EXEC, GET,
	// INCR, PING.
	if s.Commands != 14 || s.Errors != 1 || s.Pool.TotalConns == 0 {
		t.Fatalf("Stats = %+v; want 14 commands, 1 error and a connection", s)
	}
}

func TestDeadline(t *testing.T) {
	addr := sharedAddr(t)
	c := newClient(t, redis.Options{Addrs: []string{addr}, Name: "deadline"})
	k := key(t, "list")
	t.Cleanup(func() { c.Del(context.Background(), k) })

	t.Run("cut short", func(t *testing.T) {
		// BLPOP on an empty list waits for ever; the ctx ends it.
		c.Ping(context.Background()) // a connection in the pool
		stale := c.Stats().Pool.StaleConns
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := c.BLPop(ctx, 0, k).Err()
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("BLPOP under a 100ms ctx: err = %v; want context.DeadlineExceeded", err)
		}
		if took > 2*time.Second {
			t.Fatalf("BLPOP under a 100ms ctx returned after %v", took)
		}
		t.Logf("BLPOP cut short after %v: %v", took, err)
		// Its connection, with a reply perhaps on its way, is dropped.
		if s := c.Stats().Pool; s.StaleConns != stale+1 || s.TotalConns != 0 {
			t.Fatalf("pool after BLPOP was cut short: %+v; want its connection dropped", s)
		}
	})
	t.Run("ended before", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), -time.Second)
		defer cancel()
		if err := c.RPush(ctx, k, "x").Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("RPUSH under an ended ctx: err = %v; want context.DeadlineExceeded", err)
		}
		cctx, ccancel := context.WithCancel(context.Background())
		ccancel()
		if _, err := c.Pipelined(cctx, func(p goredis.Pipeliner) error {
			p.RPush(cctx, k, "y")
			return nil
		}); !errors.Is(err, context.Canceled) {
			t.Fatalf("pipeline under a cancelled ctx: err = %v; want context.Canceled", err)
		}
		// Neither was sent.
		if n, err := c.LLen(context.Background(), k).Result(); err != nil || n != 0 {
			t.Fatalf("LLEN = %d, %v; want 0: a command of an ended ctx was sent", n, err)
		}
	})
	// The Client is as good as before.
	if err := c.Set(context.Background(), k+"s", "ok", time.Minute).Err(); err != nil {
		t.Fatalf("SET after the deadlines: %v", err)
	}
	c.Del(context.Background(), k+"s")
}

// TestServerRestart kills a private server under a Client, and starts it
// again: commands fail while it is down, and succeed again once it is
// back, with the same Client.
func TestServerRestart(t *testing.T) {
	srv := startServer(t)
	log, rec := logtest.New(t)
	reg := prometheus.NewRegistry()
	c := newClient(t, redis.Options{
		Addrs:       []string{srv.addr},
		Name:        "restart",
		DialTimeout: time.Second,
		ReadTimeout: time.Second,
		Logger:      log,
		Registerer:  reg,
	})
	ctx := context.Background()
	if err := c.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	// A command in flight when the server dies fails then, not at the
	// end of its ctx.
	inflight := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		inflight <- c.BLPop(ctx, 0, "list").Err()
	}()
	srv.waitBlocked(t)
	from := rec.Mark()
	srv.kill()
	killed := time.Now()
	select {
	case err := <-inflight:
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("BLPOP in flight when the server died: err = %v; want the broken connection", err)
		}
		t.Logf("BLPOP in flight failed %v after the server died: %v", time.Since(killed), err)
	case <-time.After(waitTimeout):
		t.Fatalf("BLPOP in flight when the server died has not returned after %v", waitTimeout)
	}

	start := time.Now()
	err := c.Get(ctx, "k").Err()
	if err == nil || errors.Is(err, goredis.Nil) {
		t.Fatalf("GET with the server down: err = %v; want a failure", err)
	}
	t.Logf("GET with the server down failed after %v: %v", time.Since(start), err)
	if !strings.Contains(err.Error(), "connection refused") && !strings.Contains(err.Error(), "EOF") {
		t.Fatalf("GET with the server down: err = %v; want a refused connection", err)
	}
	rec.WaitFor(t, from, "redis: cannot connect", "client=restart", "addr="+srv.addr)
	if err := c.Health(ctx); !errors.Is(err, redis.ErrUnavailable) || !strings.Contains(err.Error(), srv.addr) {
		t.Fatalf("Health with the server down = %v; want ErrUnavailable naming %s", err, srv.addr)
	}

	srv.start()
	start = time.Now()
	deadline := start.Add(waitTimeout)
	for {
		// Polls the Client until the server is back in its eyes.
		err = c.Set(ctx, "k", "after", 0).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SET still fails %v after the server came back: %v", waitTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("commands succeed again %v after the server came back", time.Since(start))
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "after" {
		t.Fatalf("GET after the restart = %q, %v", got, err)
	}
	rec.WaitFor(t, from, "redis: connected again", "client=restart", "down=")
	if err := c.Health(ctx); err != nil {
		t.Fatalf("Health after the restart: %v", err)
	}
	if s := c.Stats(); s.DialErrors == 0 || s.Errors == 0 {
		t.Fatalf("Stats = %+v; want the failed dials and commands counted", s)
	}
	if v := promtest.Metric(t, reg, "kiev_redis_commands_total", map[string]string{"client": "restart", "command": "get", "outcome": "error"}); v < 1 {
		t.Fatalf("failed GETs counted %v; want at least 1", v)
	}
}

func TestMetrics(t *testing.T) {
	addr := sharedAddr(t)
	reg := prometheus.NewRegistry()
	a := newClient(t, redis.Options{Addrs: []string{addr}, Name: "a", Registerer: reg})
	b := newClient(t, redis.Options{Addrs: []string{addr}, Name: "b", Registerer: reg})
	ctx := context.Background()
	k := key(t, "k")
	t.Cleanup(func() { a.Del(context.Background(), k) })

	a.Set(ctx, k, "v", time.Minute)
	for range 3 {
		a.Get(ctx, k)
	}
	a.Get(ctx, k+"-missing") // redis.Nil: ok
	a.LPush(ctx, k, "x")     // WRONGTYPE: error
	a.Pipelined(ctx, func(p goredis.Pipeliner) error {
		p.Get(ctx, k)
		p.Echo(ctx, "e")
		return nil
	})
	a.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.Echo(ctx, "in a transaction")
		return nil
	})
	b.Get(ctx, k)

	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"kiev_redis_commands_total", map[string]string{"client": "a", "command": "get", "outcome": "ok"}, 5},
		{"kiev_redis_commands_total", map[string]string{"client": "a", "command": "lpush", "outcome": "error"}, 1},
		{"kiev_redis_commands_total", map[string]string{"client": "a", "command": "set", "outcome": "ok"}, 1},
		{"kiev_redis_commands_total", map[string]string{"client": "a", "command": "echo", "outcome": "ok"}, 2},
		{"kiev_redis_commands_total", map[string]string{"client": "a", "command": "exec", "outcome": "ok"}, 1},
		{"kiev_redis_commands_total", map[string]string{"client": "b", "command": "get", "outcome": "ok"}, 1},
		{"kiev_redis_command_duration_seconds", map[string]string{"client": "a", "command": "get"}, 4},
		{"kiev_redis_command_duration_seconds", map[string]string{"client": "a", "command": "pipeline"}, 1},
		{"kiev_redis_command_duration_seconds", map[string]string{"client": "a", "command": "multi"}, 1},
	} {
		if got := promtest.Metric(t, reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v; want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if idle := promtest.Metric(t, reg, "kiev_redis_pool_connections", map[string]string{"client": "a", "state": "idle"}); idle < 1 {
		t.Errorf("idle connections of a = %v; want at least 1", idle)
	}
	promtest.Metric(t, reg, "kiev_redis_pool_connections", map[string]string{"client": "b", "state": "in_use"})
	promtest.Metric(t, reg, "kiev_redis_pool_timeouts_total", map[string]string{"client": "a"})
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("metrics break Prometheus conventions: %v %v", problems, err)
	}

	// Another Client of the same name on the registry is refused.
	if _, err := redis.New(redis.Options{Addrs: []string{addr}, Name: "a", Registerer: reg}); !errors.Is(err, redis.ErrOptions) || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("New with a Name in use: err = %v; want ErrOptions naming it", err)
	}
	// Close removes a Client's series and frees its name.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kiev_redis_commands_total", "kiev_redis_command_duration_seconds", "kiev_redis_pool_connections"} {
		if _, ok := promtest.FindMetric(t, reg, name, map[string]string{"client": "a"}); ok {
			t.Errorf("%s{client=a} is still there after Close", name)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "kiev_redis_commands_total"); err != nil || n != 2 {
		t.Errorf("%d series of kiev_redis_commands_total after a's Close (%v); want b's two, get ok and get error", n, err)
	}
	a2 := newClient(t, redis.Options{Addrs: []string{addr}, Name: "a", Registerer: reg})
	a2.Get(ctx, k)
	if got := promtest.Metric(t, reg, "kiev_redis_commands_total", map[string]string{"client": "a", "command": "get", "outcome": "ok"}); got != 1 {
		t.Errorf("a new Client a counts from %v; want 1", got)
	}
}

func TestSlowAndFailedLogged(t *testing.T) {
	const password = "s3cret-Pa55w0rd-never-logged"
	srv := startServer(t, "--requirepass", password, "--enable-debug-command", "yes")
	log, rec := logtest.New(t)
	c := newClient(t, redis.Options{
		Addrs:         []string{srv.addr},
		Password:      password,
		Name:          "slow",
		SlowThreshold: 50 * time.Millisecond,
		Logger:        log,
	})
	// The lines are logged with the command's ctx.
	ctx := logtest.WithRequest(context.Background(), "r1")

	if err := c.Do(ctx, "DEBUG", "SLEEP", "0.1").Err(); err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
	line := rec.WaitFor(t, 0, "redis: slow command", `cmd="debug SLEEP 0.1"`, "client=slow", "req=r1")
	t.Logf("slow: %s", line)
	c.Get(ctx, "fast")
	if rec.Has("redis: slow command", "cmd=\"get") {
		t.Fatalf("a fast GET was logged as slow:\n%s", rec.All())
	}

	// Arguments are cut to 32 bytes, and to 4 in all.
	long := strings.Repeat("x", 100)
	c.Do(ctx, "DEBUG", "SLEEP", "0.06", long, "5th", "6th") // wrong arity: fails, slowly or not
	c.RPush(ctx, "list", long, "b", "c", "d", "e", "f")
	c.Incr(ctx, "list") // WRONGTYPE
	line = rec.WaitFor(t, 0, "redis: command failed", "incr list", "WRONGTYPE", "req=r1")
	t.Logf("failed: %s", line)
	// Credentials: AUTH's and CONFIG SET's arguments are not logged,
	// slow or failed.
	c.Do(ctx, "AUTH", "nobody", password+"-wrong")
	c.Do(ctx, "CONFIG", "SET", "requirepass", password)
	rec.WaitFor(t, 0, "redis: command failed", `cmd="auth [2 arguments not logged]"`)

	slowAll := redis.Options{Addrs: []string{srv.addr}, Password: password, Name: "slow-all", SlowThreshold: time.Nanosecond, Logger: log}
	everything := newClient(t, slowAll)
	everything.RPush(ctx, "list", long, "b", "c", "d", "e", "f")
	line = rec.WaitFor(t, 0, "redis: slow command", "client=slow-all", "rpush")
	if want := `cmd="rpush list ` + strings.Repeat("x", 32) + `… b c …+3"`; !strings.Contains(line, want) {
		t.Errorf("logged %s\nwant it to hold %s", line, want)
	}
	everything.Do(ctx, "HELLO", "3", "AUTH", "default", password)

	all := rec.All()
	if strings.Contains(all, password) {
		t.Fatalf("the password is in the log:\n%s", all)
	}
	if strings.Contains(all, strings.Repeat("x", 33)) {
		t.Fatalf("an argument of more than 32 bytes is in the log:\n%s", all)
	}
	if s := c.Stats(); s.Slow < 1 {
		t.Fatalf("Stats.Slow = %d; want the DEBUG SLEEP counted", s.Slow)
	}
}

func TestHealth(t *testing.T) {
	down := "127.0.0.1:" + strconv.Itoa(freePort(t))
	c := newClient(t, redis.Options{Addrs: []string{down}, Name: "down", DialTimeout: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c.Health(ctx)
	if !errors.Is(err, redis.ErrUnavailable) || !strings.Contains(err.Error(), down) || !strings.Contains(err.Error(), `"down"`) {
		t.Fatalf("Health of a server that is not there = %v; want ErrUnavailable naming the Client and %s", err, down)
	}
	t.Logf("Health: %v", err)
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v; want nil", err)
	}
	if err := c.Health(ctx); !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("Health after Close = %v; want ErrClosed", err)
	}
	if err := c.Get(ctx, "k").Err(); err == nil {
		t.Fatalf("GET after Close succeeded")
	}
}

// TestCluster runs a one-node Redis Cluster: the Client is go-redis's
// ClusterClient, and the hooks see its commands and its nodes'
// connections.
func TestCluster(t *testing.T) {
	srv := startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	if reply, err := srv.raw("CLUSTER ADDSLOTSRANGE 0 16383"); err != nil || reply != "+OK" {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %q, %v", reply, err)
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		// Polls the server until it serves its slots.
		if reply, _ := srv.raw("GET probe"); reply == "$-1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster does not serve within %v", waitTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	log, rec := logtest.New(t)
	reg := prometheus.NewRegistry()
	c := newClient(t, redis.Options{Addrs: []string{srv.addr}, Cluster: true, Name: "cluster", Logger: log, Registerer: reg})
	if _, ok := c.UniversalClient.(*goredis.ClusterClient); !ok {
		t.Fatalf("UniversalClient is a %T; want a *redis.ClusterClient", c.UniversalClient)
	}
	ctx := context.Background()
	if err := c.Set(ctx, "{user:1}name", "Ann", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.Get(ctx, "{user:1}name").Result(); err != nil || got != "Ann" {
		t.Fatalf("GET = %q, %v", got, err)
	}
	if err := c.Health(ctx); err != nil {
		t.Fatalf("Health: %v", err)
	}
	rec.WaitFor(t, 0, "redis: connected", "client=cluster", "addr="+srv.addr)
	if got := promtest.Metric(t, reg, "kiev_redis_commands_total", map[string]string{"client": "cluster", "command": "get", "outcome": "ok"}); got != 1 {
		t.Fatalf("GETs counted: %v; want 1, once, not once by the cluster and once by the node", got)
	}
	if _, err := redis.New(redis.Options{Addrs: []string{srv.addr, srv.addr}, DB: 1}); !errors.Is(err, redis.ErrOptions) {
		t.Fatalf("New of a cluster with DB 1: err = %v; want ErrOptions", err)
	}
}

// TestSentinel runs a master watched by one Sentinel: the Client asks the
// Sentinel where the master is.
func TestSentinel(t *testing.T) {
	master := startServer(t)
	sentinel := startSentinel(t, "kievmaster", master)
	log, rec := logtest.New(t)
	c := newClient(t, redis.Options{Addrs: []string{sentinel.addr}, MasterName: "kievmaster", Name: "sentinel", Logger: log})
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET via the Sentinel: %v", err)
	}
	if got, err := master.raw("GET k"); err != nil || got != "$1" {
		t.Fatalf("GET k on the master = %q, %v; want the value SET via the Sentinel", got, err)
	}
	rec.WaitFor(t, 0, "redis: connected", "addr=127.0.0.1:"+strconv.Itoa(master.port))
	if err := c.Health(ctx); err != nil {
		t.Fatalf("Health: %v", err)
	}
}

// TestPubSub subscribes through a Client: Pub/Sub is go-redis's, and the
// handshake of its connection, outside any command, logs no failure.
func TestPubSub(t *testing.T) {
	addr := sharedAddr(t)
	log, rec := logtest.New(t)
	c := newClient(t, redis.Options{Addrs: []string{addr}, Name: "pubsub", Logger: log})
	ctx := context.Background()
	channel := key(t, "channel")
	sub := c.Subscribe(ctx, channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatalf("Receive: %v", err)
	}
	if err := c.Publish(ctx, channel, "hello").Err(); err != nil {
		t.Fatalf("PUBLISH: %v", err)
	}
	select {
	case msg := <-sub.Channel():
		if msg.Payload != "hello" {
			t.Fatalf("received %q", msg.Payload)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("no message within %v", waitTimeout)
	}
	if rec.Has("level=WARN") {
		t.Fatalf("warnings logged:\n%s", rec.All())
	}
}

// Package redis is kiev's Redis client: go-redis (github.com/redis/go-redis/v9),
// not hidden, with what every service otherwise writes around it: options
// checked at start and loadable from the config center, logs through
// slog, Prometheus metrics, deadlines from the RPC call, a health check,
// and a Close for shutdown.
//
// A Client embeds go-redis's redis.UniversalClient, so its commands,
// pipelines, transactions and Pub/Sub are go-redis's, with go-redis's
// types and errors (redis.Nil for a missing key). Both packages are named
// redis: import go-redis under another name, such as goredis, where both
// are used.
//
// # Using it
//
// A service makes a Client at start, from its configuration, and hands it
// to its kiev server's lifecycle:
//
//	var cfg struct {
//		Redis redis.Options `config:"redis"` // keys redis.addrs, redis.password...
//	}
//	if err := conf.Decode(&cfg); err != nil { ... } // conf: a *config.Client
//	cfg.Redis.Name = "sessions"
//	cfg.Redis.Logger = logger
//	rdb, err := redis.New(cfg.Redis)
//	if err != nil { ... } // the options are wrong; the error names the field
//	srv.RegisterHealth("redis-sessions", rdb.Health)
//	srv.OnShutdown(func(context.Context) error { return rdb.Close() })
//
// and its handlers pass their ctx, so that no command outlives the call
// that made it:
//
//	func (s *Sessions) Get(ctx context.Context, id string, reply *Session) error {
//		b, err := s.rdb.Get(ctx, "session:"+id).Bytes()
//		if errors.Is(err, goredis.Nil) { ... } // no such key
//		...
//	}
//
// # Deployments
//
// Options.Addrs chooses the deployment, with go-redis's rules: one
// address is one server (a Unix socket path works too); several are a
// Redis Cluster's seeds, as is one with Options.Cluster; with
// Options.MasterName they are Sentinels, and the Client follows the
// master they name through failovers. The Client's UniversalClient is then
// a *redis.Client, a *redis.ClusterClient or a Sentinel-backed
// *redis.Client. Options.Configure reaches every go-redis option that
// Options lacks.
//
// # Deadlines
//
// A command's ctx bounds it: New turns on go-redis's ContextTimeoutEnabled,
// so a ctx deadline cuts a socket read or write short, and a command
// whose ctx has already ended is not sent. The error wraps both the ctx's
// error and go-redis's, so errors.Is(err, context.DeadlineExceeded)
// holds. go-redis reads deadlines only: a ctx cancelled without one does
// not stop a command already sent, which Options.ReadTimeout and
// WriteTimeout (3 s) bound, or, for a blocking command (BLPOP, XREAD
// BLOCK), its own timeout. A kiev call made with a deadline passes it to
// its handler's ctx, which then bounds the handler's commands. A
// connection whose command was cut short is dropped, never reused half
// read.
//
// # Failures
//
// When a server goes away, commands fail with go-redis's network errors
// (go-redis retries each command up to three times first), and the Client
// logs "redis: cannot connect" once. It keeps trying: once the server is
// back, commands succeed again on new connections, with no new Client,
// and the log says "redis: connected again" and for how long it was down.
//
// # Logs and metrics
//
// The Client logs to Options.Logger: failed commands and slow ones (those
// that took Options.SlowThreshold, 100 ms, or longer) at WARN, servers
// lost and back, and every new connection at DEBUG. It logs with the
// command's ctx, so that a logger built on kiev.NewContextHandler adds the
// kiev call's attributes to a command's lines. A command is logged
// with at most 4 arguments, each cut to 32 bytes, as
//
//	set session:1f3a "{\"user\":42,\"name\":\"Ann\",\"roles\"… ex 3600
//
// and the arguments of AUTH, HELLO, ACL, CONFIG, MIGRATE and SENTINEL,
// which may hold credentials, are never logged. go-redis also writes a few
// messages of its own to a global logger, stderr by default; LibraryLog
// sends them to slog.
//
// Metrics go to Options.Registerer, labelled with Options.Name as
// "client":
//
//	kiev_redis_commands_total{client,command,outcome}    commands, outcome "ok" or "error"
//	kiev_redis_command_duration_seconds{client,command}  latency histogram
//	kiev_redis_pool_connections{client,state}            "idle" and "in_use"
//	kiev_redis_pool_timeouts_total{client}               waits for a connection that timed out
//
// A missing key (redis.Nil) is "ok", and a command not sent because its
// ctx had ended is an "error". Each command of a pipeline counts
// under its own name, and the pipeline's round trip is timed under
// "pipeline" ("multi" for a transaction). Client.Stats has the same
// counts, and go-redis's pool statistics, without Prometheus.
package redis

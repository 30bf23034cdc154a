package redis

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Defaults of Options.
const (
	DefaultAddr          = "localhost:6379"
	DefaultDialTimeout   = 5 * time.Second
	DefaultReadTimeout   = 3 * time.Second
	DefaultSlowThreshold = 100 * time.Millisecond
	DefaultName          = "default"
)

// Options configures a Client. The zero value works: one server on
// localhost:6379, database 0, go-redis's pool, the default timeouts, no
// logging, metrics on prometheus.DefaultRegisterer.
//
// The fields with a config tag load from a config center with
// config.Client.Decode; under a prefix "redis" the keys are
// "redis.addrs" (a JSON list: ["10.0.0.1:6379"]), "redis.password",
// "redis.read_timeout" ("500ms") and so on.
type Options struct {
	// Addrs are the servers, as host:port. One address is a single
	// server, or a cluster's seed if Cluster is set; several are a Redis
	// Cluster's seeds; with MasterName they are Sentinels'. A single
	// server may also be a Unix socket's absolute path. Empty means
	// DefaultAddr. The rules are go-redis's UniversalOptions'.
	Addrs []string `config:"addrs"`

	// Cluster makes a single address a Redis Cluster's seed, for a
	// cluster reached through one endpoint (a load balancer, AWS
	// ElastiCache's configuration endpoint). Several Addrs mean a
	// cluster without it.
	Cluster bool `config:"cluster"`

	// MasterName names the master that the Sentinels at Addrs watch;
	// the Client follows its failovers. Empty means no Sentinel.
	MasterName string `config:"master_name"`

	// SentinelPassword authenticates to the Sentinels, if they need it
	// (with MasterName only).
	SentinelPassword string `config:"sentinel_password"`

	// Username and Password authenticate to the servers (AUTH, or ACL
	// users with Redis 6 and later). They are never logged.
	Username string `config:"username"`
	Password string `config:"password"`

	// DB is the database to select; a cluster has database 0 only.
	DB int `config:"db"`

	// PoolSize caps the connections to each server. Zero means
	// go-redis's default, 10 per GOMAXPROCS.
	PoolSize int `config:"pool_size"`

	// DialTimeout bounds each attempt to connect. Zero means
	// DefaultDialTimeout (5 s).
	DialTimeout time.Duration `config:"dial_timeout"`

	// ReadTimeout and WriteTimeout bound each socket read and write, so
	// they bound a command made with a ctx that has no deadline; a ctx
	// deadline that comes sooner cuts them short. Zero means
	// DefaultReadTimeout (3 s) for both.
	ReadTimeout  time.Duration `config:"read_timeout"`
	WriteTimeout time.Duration `config:"write_timeout"`

	// SlowThreshold is the duration from which a command, or a pipeline,
	// is logged as slow and counted in Stats.Slow. Zero means
	// DefaultSlowThreshold (100 ms).
	SlowThreshold time.Duration `config:"slow_threshold"`

	// Name tells this Client from others of the process in logs and
	// metrics (the "client" label): letters, digits and "._:-", at most
	// 64. Zero means DefaultName, "default". Two open Clients on one
	// Registerer need different Names.
	Name string `config:"name"`

	// TLS, if not nil, makes connections use TLS with this
	// configuration.
	TLS *tls.Config `config:"-"`

	// Logger receives the Client's log: connections lost and back (WARN
	// and INFO), failed commands (WARN; DEBUG for a cancelled ctx), slow
	// commands (WARN), each new connection (DEBUG). Commands appear with
	// at most 4 arguments, each cut to 32 bytes; credentials never appear.
	// Nil discards the log.
	Logger *slog.Logger `config:"-"`

	// Registerer receives the Client's metrics. Nil means
	// prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer `config:"-"`

	// Configure, if not nil, is called with the go-redis options New has
	// made from the fields above, before the client is made: there it can
	// set what Options does not have (MaxRetries, MinIdleConns,
	// Protocol...). New sets ContextTimeoutEnabled; turning it off stops
	// ctx deadlines from cutting commands short.
	Configure func(*redis.UniversalOptions) `config:"-"`
}

// validName is what Options.Name may hold.
var validName = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// withDefaults checks o and returns it with the defaults filled in.
func (o Options) withDefaults() (Options, error) {
	if len(o.Addrs) == 0 {
		o.Addrs = []string{DefaultAddr}
	}
	o.Name = cmp.Or(o.Name, DefaultName)
	if !validName.MatchString(o.Name) {
		return o, fmt.Errorf("%w: Name %q: use letters, digits and \"._:-\" (at most 64), such as \"sessions\"", ErrOptions, o.Name)
	}
	cluster := o.MasterName == "" && (len(o.Addrs) > 1 || o.Cluster)
	for i, a := range o.Addrs {
		if err := checkAddr(a, len(o.Addrs) == 1 && !cluster && o.MasterName == ""); err != nil {
			return o, fmt.Errorf("%w: Addrs[%d] %q: %v", ErrOptions, i, a, err)
		}
	}
	switch {
	case o.Cluster && o.MasterName != "":
		return o, fmt.Errorf("%w: both Cluster and MasterName are set; set Cluster for a Redis Cluster, MasterName for Sentinels", ErrOptions)
	case o.SentinelPassword != "" && o.MasterName == "":
		return o, fmt.Errorf("%w: SentinelPassword is set but MasterName is empty; name the master the Sentinels watch, or drop SentinelPassword", ErrOptions)
	case o.DB < 0:
		return o, fmt.Errorf("%w: DB is %d; databases count from 0", ErrOptions, o.DB)
	case o.DB != 0 && cluster:
		return o, fmt.Errorf("%w: DB is %d, but a Redis Cluster has database 0 only; drop DB or use a single server", ErrOptions, o.DB)
	case o.PoolSize < 0:
		return o, fmt.Errorf("%w: PoolSize is %d; give a positive size, or 0 for go-redis's default", ErrOptions, o.PoolSize)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"DialTimeout", &o.DialTimeout, DefaultDialTimeout},
		{"ReadTimeout", &o.ReadTimeout, DefaultReadTimeout},
		{"WriteTimeout", &o.WriteTimeout, DefaultReadTimeout},
		{"SlowThreshold", &o.SlowThreshold, DefaultSlowThreshold},
	} {
		if *d.v < 0 {
			return o, fmt.Errorf("%w: %s is %v; give a positive duration, or 0 for the default %v", ErrOptions, d.name, *d.v, d.def)
		}
		*d.v = cmp.Or(*d.v, d.def)
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.DefaultRegisterer
	}
	return o, nil
}

// checkAddr checks one of Options.Addrs; unix says whether a socket path
// may stand for it.
func checkAddr(a string, unix bool) error {
	if strings.Contains(a, "://") {
		return fmt.Errorf("a URL, not an address; write host:port, such as 10.0.0.1:6379, and set Username, Password and DB on their own")
	}
	if strings.HasPrefix(a, "/") {
		if !unix {
			return fmt.Errorf("a Unix socket serves a single server only; give host:port addresses for a cluster or Sentinels")
		}
		return nil
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("not host:port (%v); write it such as 10.0.0.1:6379", err)
	}
	if host == "" {
		return fmt.Errorf("no host; write host:port, such as 10.0.0.1:6379")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("port %q is not a number from 1 to 65535; write host:port, such as 10.0.0.1:6379", port)
	}
	return nil
}

// universal returns go-redis's options for o, which has its defaults.
func (o *Options) universal() *redis.UniversalOptions {
	return &redis.UniversalOptions{
		Addrs:                 o.Addrs,
		IsClusterMode:         o.Cluster,
		MasterName:            o.MasterName,
		SentinelPassword:      o.SentinelPassword,
		Username:              o.Username,
		Password:              o.Password,
		DB:                    o.DB,
		PoolSize:              o.PoolSize,
		DialTimeout:           o.DialTimeout,
		ReadTimeout:           o.ReadTimeout,
		WriteTimeout:          o.WriteTimeout,
		ContextTimeoutEnabled: true,
		TLSConfig:             o.TLS,
	}
}

// mode describes the deployment o reaches, for logs and errors.
func (o *Options) mode() string {
	switch {
	case o.MasterName != "":
		return fmt.Sprintf("master %q via Sentinels %s", o.MasterName, strings.Join(o.Addrs, ","))
	case len(o.Addrs) > 1 || o.Cluster:
		return "cluster " + strings.Join(o.Addrs, ",")
	default:
		return o.Addrs[0]
	}
}

// String describes the options as %+v would, with the passwords
// replaced by "***", so that options can be logged.
func (o Options) String() string {
	type plain Options // without the String method
	p := plain(o)
	if p.Password != "" {
		p.Password = "***"
	}
	if p.SentinelPassword != "" {
		p.SentinelPassword = "***"
	}
	return fmt.Sprintf("%+v", p)
}

package redis

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/shed"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Client is a go-redis client with kiev's logging, metrics and deadlines.
// Its commands are go-redis's own, as is every value they return: call
// c.Get(ctx, key), c.Pipelined, c.Subscribe, and pass c.UniversalClient
// to code that takes a redis.UniversalClient. Make one with New; it is
// safe for concurrent use.
//
// Close the Client with its own Close, which also removes its metrics,
// not with UniversalClient's.
type Client struct {
	redis.UniversalClient

	name    string
	desc    string // the deployment, for Health's errors
	log     *slog.Logger
	slow    time.Duration
	reg     prometheus.Registerer
	metrics *commandMetrics
	pool    *poolCollector
	conns   *connEvents
	res     *shed.Resource // the pool's connections; nil for a cluster

	commands  atomic.Uint64
	errors    atomic.Uint64
	slowCount atomic.Uint64
	closed    atomic.Bool
}

// Stats are a Client's counters and its pool's statistics, for a monitor
// to read.
type Stats struct {
	Commands   uint64 // commands run, each command of a pipeline counted
	Errors     uint64 // commands that failed; a missing key (redis.Nil) is no failure
	Slow       uint64 // commands and pipelines that took Options.SlowThreshold or longer
	DialErrors uint64 // failed attempts to connect
	Pool       redis.PoolStats
}

// New returns a Client for the deployment opts describes: one server,
// a Redis Cluster, or a master watched by Sentinels. It checks opts and
// fails with an error wrapping ErrOptions, naming the field, if they
// cannot work. New does not connect: the first command does, and
// Client.Health tells whether the servers answer.
func New(opts Options) (*Client, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	v, err := registerVectors(o.Registerer)
	if err != nil {
		return nil, fmt.Errorf("%w: Registerer refused the metrics: %v", ErrOptions, err)
	}
	uo := o.universal()
	if o.Configure != nil {
		o.Configure(uo)
	}
	c := &Client{
		name:    o.Name,
		desc:    fmt.Sprintf("redis client %q (%s)", o.Name, o.mode()),
		log:     log,
		slow:    o.SlowThreshold,
		reg:     o.Registerer,
		metrics: newCommandMetrics(o.Name, v),
		conns:   newConnEvents(o.Name, log),
	}
	c.pool = newPoolCollector(c)
	if err := c.reg.Register(c.pool); err != nil {
		return nil, fmt.Errorf("%w: Name %q: a Client of that name is open on this Registerer; give each Client its own Name (%v)", ErrOptions, o.Name, err)
	}
	c.UniversalClient = redis.NewUniversalClient(uo)
	if _, cluster := c.UniversalClient.(*redis.ClusterClient); !cluster {
		// go-redis's default pool: 10 connections per CPU.
		c.res = shed.NewResource("redis "+o.Name, cmp.Or(uo.PoolSize, 10*runtime.GOMAXPROCS(0)))
	}
	c.UniversalClient.AddHook(hook{c})
	if cc, ok := c.UniversalClient.(*redis.ClusterClient); ok {
		// The cluster's hook sees the commands; its nodes' hooks, the
		// connections.
		cc.OnNewNode(func(node *redis.Client) { node.AddHook(dialHook{hook{c}}) })
	}
	log.Info("redis: client made", "client", o.Name, "servers", o.mode())
	return c, nil
}

// Health sends PING, to every node of a cluster, and returns nil if each
// answers within ctx. Otherwise it returns an error wrapping
// ErrUnavailable that names the Client and its servers and says why;
// after Close, ErrClosed. Give it to kiev's Server.RegisterHealth.
func (c *Client) Health(ctx context.Context) error {
	if c.closed.Load() {
		return ErrClosed
	}
	var err error
	if cc, ok := c.UniversalClient.(*redis.ClusterClient); ok {
		err = cc.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
			if err := node.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("node %s: %w", node.Options().Addr, err)
			}
			return nil
		})
	} else {
		err = c.Ping(ctx).Err()
	}
	if err != nil {
		return fmt.Errorf("%w: %s: PING: %w", ErrUnavailable, c.desc, err)
	}
	return nil
}

// Resource returns the Client's pool as a shed.Resource, which every
// command and pipeline acquires a slot of before it takes a connection:
// in a kiev handler, the most important calls get a connection first, a
// call that could not finish by its deadline gets none (the command
// fails with shed.ErrResourceBusy), and the handler's method is bounded
// by the pool's size. A cluster's commands go to many nodes, each with a
// pool of its own: a cluster Client has none, and Resource returns nil.
func (c *Client) Resource() *shed.Resource { return c.res }

// Stats returns the Client's counters and its pool's statistics.
func (c *Client) Stats() Stats {
	return Stats{
		Commands:   c.commands.Load(),
		Errors:     c.errors.Load(),
		Slow:       c.slowCount.Load(),
		DialErrors: c.conns.errors.Load(),
		Pool:       *c.UniversalClient.PoolStats(),
	}
}

// Close closes the connections, at once: commands in flight fail, as do
// later ones. It removes the Client's metrics from the Registerer. Close
// is for the end of a service, after the calls that use the Client have
// ended: register it with kiev's Server.OnShutdown. Later calls do
// nothing and return nil.
func (c *Client) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	if c.res != nil {
		c.res.Close() // the commands waiting for a connection fail
	}
	err := c.UniversalClient.Close()
	c.reg.Unregister(c.pool)
	c.metrics.forget()
	c.log.Info("redis: client closed", "client", c.name)
	return err
}

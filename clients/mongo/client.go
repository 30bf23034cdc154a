package mongo

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Client is a MongoDB client: the driver's own *mongo.Client, whose
// every method works as documented by the driver, with the hooks that
// count, time and log its commands and connections, a health check and a
// Close. Make one with New; it is safe for concurrent use.
//
// Close it with Close, not the embedded Disconnect, so that its metrics
// are unregistered.
type Client struct {
	*mongo.Client

	db      *mongo.Database
	name    string
	hosts   string // the URI's hosts, without credentials, for messages
	log     *slog.Logger
	slow    time.Duration
	timeout time.Duration // bounds Health when its ctx has none

	metrics      *metrics
	commandNames *labelSet
	collections  *labelSet

	mu       sync.Mutex
	inflight map[int64]inflight // commands sent, by request id
	servers  map[string]bool    // the servers the driver watches: whether each is available

	stats struct {
		commands, failures, slow      atomic.Uint64
		checkoutFailures, poolCleared atomic.Uint64
		open, inUse                   atomic.Int64
	}

	closeOnce sync.Once
	closed    atomic.Bool
}

// Stats are a Client's counters, for a status page; the same counts go to
// the metrics.
type Stats struct {
	Name             string // Options.Name
	Hosts            string // the URI's hosts, comma-separated
	Servers          int    // servers the driver can send commands to now
	Commands         uint64 // commands answered or failed since New
	Failures         uint64 // of those, the ones that failed
	Slow             uint64 // commands that succeeded in Options.SlowThreshold or more
	OpenConns        int64  // connections open, in use or idle
	InUseConns       int64  // connections checked out by operations
	CheckoutFailures uint64 // failures to get a connection from a pool
	PoolCleared      uint64 // pools cleared because their server failed
}

// New checks opts, connects to the deployment and pings it, within ctx
// and, if ctx has no deadline, Options.ConnectTimeout. It fails, wrapping
// ErrOptions, if opts cannot be used, and, wrapping ErrUnavailable, if no
// server answers: the address, the network or the credentials are wrong,
// or the deployment is down. A service learns so as it starts; a service
// that must start while the database is down calls New again later.
//
// Once New succeeds, the Client lives through outages: while no server
// answers, operations fail with the driver's errors (and Health with
// ErrUnavailable), and once one answers again they succeed, with the same
// Client.
func New(ctx context.Context, opts Options) (*Client, error) {
	s, err := opts.check()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(s.Registerer, s.Name)
	if err != nil {
		return nil, err
	}
	c := &Client{
		name:         s.Name,
		hosts:        strings.Join(s.cs.Hosts, ","),
		log:          s.Logger,
		slow:         s.SlowThreshold,
		timeout:      s.ConnectTimeout,
		metrics:      m,
		commandNames: newLabelSet(MaxCommandLabels),
		collections:  newLabelSet(MaxCollectionLabels),
		inflight:     make(map[int64]inflight),
		servers:      make(map[string]bool),
	}
	co := options.Client().ApplyURI(s.URI).
		SetConnectTimeout(s.ConnectTimeout).
		SetMonitor(c.commandMonitor()).
		SetPoolMonitor(c.poolMonitor()).
		SetServerMonitor(c.serverMonitor())
	if s.MaxPoolSize > 0 {
		co.SetMaxPoolSize(uint64(s.MaxPoolSize))
	}
	if err := co.Validate(); err != nil {
		m.unregister()
		return nil, fmt.Errorf("%w: URI: %s; want one like %s", ErrOptions, redactURI(s.URI, err.Error()), exampleURI)
	}
	mc, err := mongo.Connect(co)
	if err != nil {
		m.unregister()
		return nil, fmt.Errorf("%w: connecting to %s: %s", ErrUnavailable, c.hosts, redactURI(s.URI, err.Error()))
	}
	c.Client = mc
	c.db = mc.Database(s.Database)

	pctx, cancel := c.withTimeout(ctx)
	defer cancel()
	if err := mc.Ping(pctx, nil); err != nil {
		dctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = mc.Disconnect(dctx) // nothing is in use yet, so it cannot wait
		m.unregister()
		return nil, fmt.Errorf("%w: no server of %s answered a ping: %s", ErrUnavailable, c.hosts, redactURI(s.URI, err.Error()))
	}
	attrs := []slog.Attr{slog.String("client", c.name), slog.String("hosts", c.hosts), slog.String("database", s.Database)}
	if s.cs.ReplicaSet != "" {
		attrs = append(attrs, slog.String("replica_set", s.cs.ReplicaSet))
	}
	c.log.LogAttrs(ctx, slog.LevelInfo, "kiev/clients/mongo: connected", attrs...)
	return c, nil
}

// withTimeout bounds ctx by Options.ConnectTimeout if it has no deadline.
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
}

// DB returns the database of Options.Database.
func (c *Client) DB() *mongo.Database { return c.db }

// Health pings the deployment, with the client's read preference, within
// ctx and, if ctx has no deadline, Options.ConnectTimeout. It returns nil
// if a server answered, an error wrapping ErrUnavailable with the
// driver's reason if none did, and ErrClosed after Close. Register it with
// kiev's Server.RegisterHealth for the status page.
func (c *Client) Health(ctx context.Context) error {
	if c.closed.Load() {
		return ErrClosed
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	if err := c.Ping(ctx, nil); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, c.hosts, err)
	}
	return nil
}

// Stats returns the Client's counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	servers := 0
	for _, up := range c.servers {
		if up {
			servers++
		}
	}
	c.mu.Unlock()
	return Stats{
		Name:             c.name,
		Hosts:            c.hosts,
		Servers:          servers,
		Commands:         c.stats.commands.Load(),
		Failures:         c.stats.failures.Load(),
		Slow:             c.stats.slow.Load(),
		OpenConns:        c.stats.open.Load(),
		InUseConns:       c.stats.inUse.Load(),
		CheckoutFailures: c.stats.checkoutFailures.Load(),
		PoolCleared:      c.stats.poolCleared.Load(),
	}
}

// Close disconnects from the deployment: it waits, within ctx, for the
// operations in flight to return their connections, closes every
// connection, and unregisters the Client's metrics. Operations after Close
// fail with the driver's mongo.ErrClientDisconnected. Register Close with
// kiev's Server.OnShutdown, so that it runs once the calls have drained.
// Close returns ErrClosed if called again.
func (c *Client) Close(ctx context.Context) error {
	err := ErrClosed
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		err = c.Disconnect(ctx)
		c.metrics.unregister()
		if err != nil {
			err = fmt.Errorf("kiev/clients/mongo: closing the client %q: %w", c.name, err)
		}
		c.log.LogAttrs(ctx, slog.LevelInfo, "kiev/clients/mongo: closed", slog.String("client", c.name), slog.String("hosts", c.hosts))
	})
	return err
}

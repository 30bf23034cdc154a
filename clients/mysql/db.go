package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/kievrpc/kiev/shed"
	"github.com/prometheus/client_golang/prometheus"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"
)

// DB is a gorm database on MySQL (or MariaDB) with kiev's logging,
// metrics and health check. Its methods are gorm's own, as is every value
// they return: call db.WithContext(ctx).First(&user, id), and pass db.DB
// to code that takes a *gorm.DB. Make one with Open; it is safe for
// concurrent use, as gorm is.
//
// Pass each call's ctx with WithContext: it bounds the statement, and a
// statement whose ctx ends fails with the ctx's error.
type DB struct {
	*gorm.DB

	name    string
	log     *slog.Logger
	slow    time.Duration
	reg     prometheus.Registerer
	metrics *queryMetrics
	pool    *poolCollector
	conns   *connEvents
	servers []server
	pools   []*sql.DB      // of servers, the primary first
	res     *shed.Resource // the pools' connections

	queries   atomic.Uint64
	errors    atomic.Uint64
	slowCount atomic.Uint64
	closed    atomic.Bool
}

// Stats are a DB's counters and its pools' statistics, for a monitor to
// read.
type Stats struct {
	Queries    uint64 // gorm operations run
	Errors     uint64 // operations that failed; gorm.ErrRecordNotFound is no failure
	Slow       uint64 // operations that took Options.SlowThreshold or longer
	DialErrors uint64 // failed attempts to connect, to any server
	Primary    sql.DBStats
	Replicas   []sql.DBStats // in the order of Options.Replicas
}

// Open checks opts, connects to the primary and to each replica within
// Options.ConnectTimeout, and returns a DB. Options that cannot work,
// a DSN that does not parse among them, make it fail with an error
// wrapping ErrOptions that names the field; a server that does not
// answer, with one wrapping ErrUnavailable that names the server. Open
// connects at once because gorm asks the server its version to choose
// its SQL.
func Open(opts Options) (*DB, error) {
	o, servers, err := opts.withDefaults()
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
	db := &DB{
		name:    o.Name,
		log:     log,
		slow:    o.SlowThreshold,
		reg:     o.Registerer,
		metrics: newQueryMetrics(o.Name, v),
		conns:   newConnEvents(o.Name, log),
		servers: servers,
	}
	db.res = shed.NewResource("mysql "+o.Name, o.MaxOpen*len(servers))
	db.pool = newPoolCollector(db)
	if err := db.reg.Register(db.pool); err != nil {
		return nil, fmt.Errorf("%w: Name %q: a DB of that name is open on this Registerer; give each DB its own Name (%v)", ErrOptions, o.Name, err)
	}
	if err := db.open(o); err != nil {
		db.reg.Unregister(db.pool)
		db.metrics.forget()
		for _, p := range db.pools {
			p.Close()
		}
		return nil, err
	}
	log.Info("mysql: opened", "client", o.Name, "primary", servers[0].String(), "replicas", len(servers)-1)
	return db, nil
}

// open opens the pools, checks that every server answers, and opens
// gorm over them.
func (db *DB) open(o Options) error {
	for _, s := range db.servers {
		s.cfg.Logger = driverLogger{db.log, db.name}
		c, err := mysql.NewConnector(s.cfg)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrOptions, s, err)
		}
		p := sql.OpenDB(&connector{Connector: c, server: s.String(), events: db.conns})
		p.SetMaxOpenConns(o.MaxOpen)
		p.SetMaxIdleConns(o.MaxIdle)
		p.SetConnMaxLifetime(o.ConnMaxLifetime)
		p.SetConnMaxIdleTime(o.ConnMaxIdleTime)
		db.pools = append(db.pools, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.ConnectTimeout)
	defer cancel()
	for i, p := range db.pools {
		if err := p.PingContext(ctx); err != nil {
			return fmt.Errorf("%w: mysql client %q: %s: %w", ErrUnavailable, db.name, db.servers[i], err)
		}
	}
	gcfg := &gorm.Config{
		Logger:                gormLogger{db.log, db.name},
		DefaultContextTimeout: o.QueryTimeout,
		DisableAutomaticPing:  true, // done above
	}
	if o.Configure != nil {
		o.Configure(gcfg)
	}
	g, err := gorm.Open(db.dialector(0), gcfg)
	if err != nil {
		return fmt.Errorf("%w: mysql client %q: %s: %w", ErrUnavailable, db.name, db.servers[0], err)
	}
	db.DB = g
	if err := g.Use(plugin{db}); err != nil {
		return fmt.Errorf("kiev/clients/mysql: registering gorm callbacks: %w", err)
	}
	if len(db.pools) > 1 {
		var replicas []gorm.Dialector
		for i := 1; i < len(db.pools); i++ {
			replicas = append(replicas, db.dialector(i))
		}
		if err := g.Use(dbresolver.Register(dbresolver.Config{Replicas: replicas})); err != nil {
			return fmt.Errorf("%w: mysql client %q: replicas: %w", ErrUnavailable, db.name, err)
		}
	}
	return nil
}

// dialector returns gorm's dialector of the i-th server, over its pool.
func (db *DB) dialector(i int) gorm.Dialector {
	return gormmysql.New(gormmysql.Config{Conn: db.pools[i], DSNConfig: db.servers[i].cfg})
}

// Resource returns the DB's pools as a shed.Resource of MaxOpen
// connections per server, which every statement acquires a slot of
// before it takes a connection: in a kiev handler, the most important
// calls get a connection first, a call that could not finish by its
// deadline gets none (the statement fails with shed.ErrResourceBusy), and
// the handler's method is bounded by the pools' size. A transaction
// acquires a slot per statement.
func (db *DB) Resource() *shed.Resource { return db.res }

// Health pings the primary and each replica, and returns nil if each
// answers within ctx. Otherwise it returns an error wrapping
// ErrUnavailable that names the DB and the servers that failed, and says
// why; after Close, ErrClosed. Give it to kiev's Server.RegisterHealth.
func (db *DB) Health(ctx context.Context) error {
	if db.closed.Load() {
		return ErrClosed
	}
	var errs []error
	for i, p := range db.pools {
		if err := p.PingContext(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", db.servers[i], err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: mysql client %q: %w", ErrUnavailable, db.name, errors.Join(errs...))
	}
	return nil
}

// poolStats returns the statistics of each pool, the primary's first.
func (db *DB) poolStats() []sql.DBStats {
	s := make([]sql.DBStats, len(db.pools))
	for i, p := range db.pools {
		s[i] = p.Stats()
	}
	return s
}

// Stats returns the DB's counters and its pools' statistics.
func (db *DB) Stats() Stats {
	pools := db.poolStats()
	return Stats{
		Queries:    db.queries.Load(),
		Errors:     db.errors.Load(),
		Slow:       db.slowCount.Load(),
		DialErrors: db.conns.errors.Load(),
		Primary:    pools[0],
		Replicas:   pools[1:],
	}
}

// Close closes the connection pools: later statements fail, and Close
// waits for those in flight to end, as database/sql's Close does. It
// removes the DB's metrics from the Registerer.
// Close is for the end of a service, after the calls that use the DB have
// ended: register it with kiev's Server.OnShutdown. Later calls do
// nothing and return nil.
func (db *DB) Close() error {
	if !db.closed.CompareAndSwap(false, true) {
		return nil
	}
	db.res.Close() // the statements waiting for a connection fail
	db.reg.Unregister(db.pool)
	db.metrics.forget()
	var errs []error
	for _, p := range db.pools {
		errs = append(errs, p.Close())
	}
	db.log.Info("mysql: closed", "client", db.name)
	return errors.Join(errs...)
}

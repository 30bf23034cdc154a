// Package etcd is a registry.Registry on an etcd cluster (its v3 API), for
// servers and clients in many processes. It is a module of its own,
// github.com/kievrpc/kiev/registry/etcd, so that kiev's go.mod does not
// carry etcd's client and the grpc-go it brings.
//
// A server registers each service it serves, and a client watches it:
//
//	reg, err := etcd.New(etcd.Config{Endpoints: []string{"etcd1:2379", "etcd2:2379", "etcd3:2379"}})
//	if err != nil { ... }
//	defer reg.Close()
//	srv := kiev.NewServer(kiev.WithRegistry(reg)) // registers what it serves
//	...
//	w, err := reg.Watch(ctx, "Arith")
//	providers, err := w.Next(ctx) // the current set at once, then each change
//
// # Targets
//
// Importing the package also teaches kiev.Dial the etcd:// scheme (its
// init function calls kiev.RegisterScheme, as database/sql drivers
// register themselves), so that a client needs no code beyond the import:
//
//	import _ "github.com/kievrpc/kiev/registry/etcd"
//
//	c, err := kiev.Dial("etcd://etcd1:2379,etcd2:2379/Arith")
//	c, err := kiev.Dial("etcd://etcd1:2379/team-a/kiev/Arith?ttl=5s")
//
// The host part lists the endpoints; the path is [Config.Root] (/kiev if
// it has only the service) followed by the service; "ttl" sets
// [Config.TTL]. The client opens the registry, logs through its own
// logger, and closes the registry when it is closed.
//
// # Layout
//
// Every key lies under [Config.Root], "/kiev" by default, in the layout
// that package registry describes, the one registry/zookeeper uses:
//
//	<Root>/<service>/providers/<network>-<address>
//
// so 127.0.0.1:7000 over tcp, serving Arith, is the key
// "/kiev/Arith/providers/tcp-127.0.0.1:7000". Its value is the same JSON
// as a ZooKeeper provider node's, with the same format version "v" and the
// same rules for readers (registry.EncodeNode, registry.DecodeNode):
//
//	{"v":1,"service":"Arith","network":"tcp","address":"10.0.0.7:7000","codecs":["msgpack"],"weight":2}
//
// A key whose value does not parse, lacks "v", fails
// registry.Instance.Validate or does not match its key's name is skipped
// and logged once; the rest of the set is delivered.
//
// # Leases
//
// The registry holds one lease, granted at its first registration with
// [Config.TTL] (10 s by default), and every key it writes is attached to
// it; the client renews it every third of its TTL. So the providers of a
// process that dies, or that is cut off from etcd, drop out within the TTL
// of its last renewal. Should the lease be lost (the registry was cut off
// for longer than the TTL, or etcd lost its data, which the registry
// checks each time its client reconnects), the registry logs a
// warning, grants a new lease once etcd answers, writes every registration
// again under it, and logs a second warning saying how long the providers
// were missing from its point of view. Writing a key replaces one a
// previous incarnation of the process left under another lease; Deregister
// deletes a key only if it is attached to the registry's own lease. Close
// revokes the lease, which deletes every key of the registry at once.
//
// # Watches
//
// A Watcher reads the providers of its service (one range read of the
// prefix), then follows an etcd watch from the revision after that read,
// applying each event to the set it holds. If etcd has compacted the
// revisions the watch needs, the watcher reads the set again; if the watch
// ends otherwise, it watches again from the revision it had reached. After
// the client reconnects to etcd (a restart, a lost connection) or the
// registry's lease was lost, every watcher reads the set again, so that a
// cluster that lost its data or was restored from a snapshot is read anew
// rather than watched from revisions it does not have.
//
// Watchers deliver nothing while etcd is unreachable: the last set stays
// the best knowledge, and no connection problem of theirs ever shows as an
// empty set. A provider whose lease expired is another matter: etcd
// deleted its key, so every watcher sees it gone until it is written
// again.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/kievrpc/kiev/registry"
)

// ErrConfig is wrapped by the errors of New for a Config it cannot use;
// they say which field is wrong.
var ErrConfig = errors.New("kiev/registry/etcd: invalid Config")

// DefaultTTL is the lease TTL used when Config.TTL is zero.
const DefaultTTL = 10 * time.Second

const (
	// closeTimeout bounds how long Close waits for etcd to revoke the
	// lease.
	closeTimeout = 2 * time.Second
	// requestTimeout bounds each request to etcd; a request that times
	// out is tried again.
	requestTimeout = 5 * time.Second
	// maxReconnectDelay bounds the pause between the client's attempts
	// to reconnect to etcd (grpc-go's default grows to 2 minutes).
	maxReconnectDelay = time.Second
)

// Config configures a Registry. Only Endpoints is required; the zero value
// of every other field is a working default.
type Config struct {
	// Endpoints lists the cluster's client addresses, "host:port" (an
	// "http://" prefix is allowed). The client balances its requests over
	// them and moves away from those that fail.
	Endpoints []string

	// Root is the key prefix all of the registry's keys lie under: "/kiev"
	// if empty. Registries and clients that should see each other must
	// use the same Root; tenants sharing a cluster can keep apart with
	// roots such as "/team-a/kiev". It starts with '/' and has no empty,
	// "." or ".." components.
	Root string

	// TTL is the TTL of the registry's lease: how long etcd keeps its
	// registrations after losing touch with it. After that, its providers
	// drop out of every watcher's set. Zero means DefaultTTL (10 s). etcd
	// counts leases in whole seconds, so TTL must be a whole number of
	// seconds; etcd raises a TTL below its minimum (2 s with its default
	// election timeout) to that minimum.
	TTL time.Duration

	// Logger receives the registry's warnings (skipped malformed keys,
	// failed writes, a lost lease and how long registering again took)
	// and, at Debug level, its connection changes and the etcd client
	// library's own messages. A clean Close logs nothing above Debug. Nil
	// discards them.
	Logger *slog.Logger
}

// Registry is a registry.Registry on etcd. Make one with New; it is safe
// for concurrent use.
type Registry struct {
	root   string // without a trailing '/'; "" for Root "/"
	ttl    int64  // seconds
	log    *slog.Logger
	client *clientv3.Client

	ctx    context.Context // of every request; canceled by Close
	cancel context.CancelFunc

	keys       *registry.Ledger // the provider keys to write or withdraw
	done       chan struct{}    // closed by Close
	keeperDone chan struct{}    // closed when the keeper returns
	monitor    sync.WaitGroup
	watchers   sync.WaitGroup
	closeOnce  sync.Once

	mu     sync.Mutex    // guards the fields below
	closed bool          // set by Close; Watch starts no watcher after it
	resync chan struct{} // closed and replaced when watchers must read again
	// reconnected is set when the client connected to etcd again, for
	// the keeper to check that etcd still holds the lease.
	reconnected bool
}

var _ registry.Registry = (*Registry)(nil)

// New returns a Registry for the cluster cfg names. It does not wait for a
// connection: Register and Watch do, within their ctx, and the client
// keeps trying the endpoints until Close.
func New(cfg Config) (*Registry, error) {
	endpoints, err := checkEndpoints(cfg.Endpoints)
	if err != nil {
		return nil, err
	}
	root := cfg.Root
	if root == "" {
		root = "/kiev"
	}
	if err := registry.CheckRoot(root); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	ttl := cfg.TTL
	switch {
	case ttl < 0:
		return nil, fmt.Errorf("%w: negative TTL %v", ErrConfig, ttl)
	case ttl == 0:
		ttl = DefaultTTL
	case ttl%time.Second != 0:
		return nil, fmt.Errorf("%w: TTL %v is not a whole number of seconds, which etcd's leases count", ErrConfig, ttl)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: requestTimeout,
		// Probe a silent connection, so that one cut off without a reset
		// is given up and dialed again (grpc-go sends pings at most every
		// 10 s).
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: maxReconnectDelay},
			MinConnectTimeout: requestTimeout,
		})},
		Logger: zapLogger(logger),
	})
	if err != nil {
		return nil, fmt.Errorf("kiev/registry/etcd: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Registry{
		root:       strings.TrimSuffix(root, "/"),
		ttl:        int64(ttl / time.Second),
		log:        logger,
		client:     client,
		ctx:        ctx,
		cancel:     cancel,
		keys:       registry.NewLedger("kiev/registry/etcd"),
		done:       make(chan struct{}),
		keeperDone: make(chan struct{}),
		resync:     make(chan struct{}),
	}
	r.monitor.Add(1)
	go r.watchConnection()
	go r.keep()
	return r, nil
}

// checkEndpoints returns the endpoints as the client takes them, or what
// is wrong with them.
func checkEndpoints(endpoints []string) ([]string, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("%w: no Endpoints; list the cluster's host:port client addresses", ErrConfig)
	}
	out := make([]string, len(endpoints))
	for i, e := range endpoints {
		e = strings.TrimPrefix(e, "http://")
		switch {
		case strings.TrimSpace(e) == "":
			return nil, fmt.Errorf("%w: an empty address in Endpoints", ErrConfig)
		case strings.Contains(e, "://"):
			return nil, fmt.Errorf("%w: endpoint %q: only host:port (or http://host:port) is supported; TLS is not", ErrConfig, endpoints[i])
		case strings.Contains(e, "/"):
			return nil, fmt.Errorf("%w: endpoint %q holds a '/'; set a key prefix with Config.Root instead", ErrConfig, endpoints[i])
		}
		out[i] = e
	}
	return out, nil
}

// Register writes in under the registry's lease and waits until etcd
// holds it; see registry.Registry. If ctx ends first, the error wraps
// ctx's and says what last went wrong, if anything did.
func (r *Registry) Register(ctx context.Context, in registry.Instance) error {
	if err := in.Validate(); err != nil {
		return err
	}
	data, err := registry.EncodeNode(in)
	if err != nil {
		return fmt.Errorf("kiev/registry/etcd: encoding %s: %w", in.ID(), err)
	}
	return r.keys.Set(ctx, r.keyOf(in), in.ID(), data, true)
}

// Deregister withdraws the instance with in's Service and ID and waits
// until etcd has deleted its key. It deletes the key only if it is
// attached to the registry's own lease.
func (r *Registry) Deregister(ctx context.Context, in registry.Instance) error {
	if err := registry.CheckService(in.Service); err != nil {
		return err
	}
	return r.keys.Set(ctx, r.keyOf(in), in.ID(), nil, false)
}

// Watch starts watching the providers of service. It waits for the first
// read of the set, within ctx.
func (r *Registry) Watch(ctx context.Context, service string) (registry.Watcher, error) {
	if err := registry.CheckService(service); err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, registry.ErrClosed
	}
	w := newWatcher(r, service)
	r.watchers.Add(1)
	r.mu.Unlock()
	go w.run()
	select {
	case <-w.Ready():
		return w, nil
	case <-r.done:
		w.Stop()
		return nil, registry.ErrClosed
	case <-ctx.Done():
		w.Stop()
		return nil, ctx.Err()
	}
}

// Close revokes the registry's lease, which deletes its keys (waiting at
// most 2 s for etcd), ends its Watchers, closes its connections and waits
// for its goroutines to return. Should the revocation not be confirmed in
// time, the keys go when the lease expires. Close always returns nil.
func (r *Registry) Close() error {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closed = true
		r.keys.Close()
		close(r.done)
		r.mu.Unlock()
		r.cancel()     // ends the requests in flight and the watches
		<-r.keeperDone // revokes the lease
		r.watchers.Wait()
		r.monitor.Wait()
		r.client.Close()
	})
	return nil
}

// resyncChan returns a channel closed when watchers must next read their
// sets again.
func (r *Registry) resyncChan() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resync
}

// resyncAll makes every watcher read its set again.
func (r *Registry) resyncAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	close(r.resync)
	r.resync = make(chan struct{})
}

// providersPrefix returns the prefix of the keys of service's providers,
// with its trailing '/'.
func (r *Registry) providersPrefix(service string) string {
	return registry.ProvidersPath(r.root, service) + "/"
}

// keyOf returns in's key.
func (r *Registry) keyOf(in registry.Instance) string {
	return r.providersPrefix(in.Service) + registry.NodeName(in)
}

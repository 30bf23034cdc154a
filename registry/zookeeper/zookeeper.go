// Package zookeeper is a registry.Registry on a ZooKeeper ensemble, for
// servers and clients in many processes.
//
// A server registers each service it serves, and a client watches it:
//
//	reg, err := zookeeper.New(zookeeper.Config{Servers: []string{"zk1:2181", "zk2:2181", "zk3:2181"}})
//	if err != nil { ... }
//	defer reg.Close()
//	err = reg.Register(ctx, registry.Instance{Service: "Arith", Network: "tcp", Address: "10.0.0.7:7000"})
//	...
//	w, err := reg.Watch(ctx, "Arith")
//	providers, err := w.Next(ctx) // the current set at once, then each change
//
// # Layout
//
// Every node lies under [Config.Root], "/kiev" by default, in the layout
// that package registry describes and registry/etcd shares:
//
//	<Root>/<service>/providers/<network>-<address>
//
// The service name and the address are escaped as URL path segments
// (url.PathEscape), so "unix" sockets and IPv6 addresses make one path
// component: 127.0.0.1:7000 over tcp is "tcp-127.0.0.1:7000", and
// /run/a.sock over unix is "unix-%2Frun%2Fa.sock". A provider node is
// EPHEMERAL: ZooKeeper deletes it when the session of the registry that
// made it ends, so a crashed server drops out once its session times out.
// The nodes above the providers are persistent, created as needed, and
// left in place.
//
// A provider node's data is JSON: a format version "v" beside the fields
// of registry.Instance, with their JSON names:
//
//	{"v":1,"service":"Arith","network":"tcp","address":"10.0.0.7:7000","codecs":["msgpack"],"weight":2}
//
// Readers ignore fields they do not know and accept any "v" of 1 or more,
// reading the fields of version 1; so a later kiev may add fields (and
// bump "v") while older clients keep reading its providers during a
// rollout. A change that older readers must not misread needs a new
// layout, not a new "v". A node whose data does not parse, lacks "v",
// fails registry.Instance.Validate or does not match its node's name is
// skipped and logged; the rest of the set is delivered.
//
// # Sessions
//
// The registry holds one ZooKeeper session, which the client library
// carries across connection losses and servers of the ensemble. Should the
// ensemble expire it (the registry was cut off for longer than
// [Config.SessionTimeout]), the library opens a new session and the
// registry publishes every registration again. At every new session it
// also checks each of its nodes: a node at its path left by an older
// session (a restarted process whose old session has not timed out yet) is
// replaced, atomically, by one of its own; a node of its own whose data
// differs is rewritten.
//
// Watchers deliver nothing while the registry is cut off from ZooKeeper:
// the last set stays the best knowledge, and no connection problem of
// theirs ever shows as an empty set. They read again once the session is
// back. A provider whose own session expired is another matter: ZooKeeper
// deleted its node, so every watcher sees it gone until it is published
// again, which takes a few milliseconds once it reaches the ensemble.
//
// # Access control
//
// With [Config.Digest] set, the registry authenticates as that digest user
// and creates its nodes with two ACL entries: every permission for the
// user, and READ for anyone. So any client can watch the providers, but
// only registries holding the same credentials can add, change or remove
// them. Without Digest, nodes are open to all (world:anyone, every
// permission), ZooKeeper's default.
package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/kievrpc/kiev/internal/zkconn"
	"github.com/kievrpc/kiev/registry"
)

// ErrConfig is wrapped by the errors of New for a Config it cannot use;
// they say which field is wrong.
var ErrConfig = errors.New("kiev/registry/zookeeper: invalid Config")

// DefaultSessionTimeout is the session timeout used when
// Config.SessionTimeout is zero.
const DefaultSessionTimeout = 10 * time.Second

// closeTimeout bounds how long Close waits to withdraw registrations.
const closeTimeout = 2 * time.Second

// Config configures a Registry. Only Servers is required; the zero value
// of every other field is a working default.
type Config struct {
	// Servers lists the ensemble's addresses, "host:port" or "host" (port
	// 2181). The client connects to one at a time and moves to another
	// when it fails.
	Servers []string

	// Root is the path all of the registry's nodes lie under, its chroot
	// within the ensemble: "/kiev" if empty. Registries and clients that
	// should see each other must use the same Root; tenants sharing an
	// ensemble can keep apart with roots such as "/team-a/kiev". Missing
	// nodes of Root are created, persistent.
	Root string

	// SessionTimeout is how long ZooKeeper keeps the registry's session,
	// and so its registrations, after losing touch with it: after that,
	// its providers drop out of every watcher's set. Zero means
	// DefaultSessionTimeout (10 s). The ensemble bounds it to between 2 and
	// 20 of its ticks (4 s to 40 s with the default tickTime of 2 s).
	SessionTimeout time.Duration

	// Digest, as "user:password", makes the registry authenticate with
	// ZooKeeper's digest scheme and protect the nodes it creates: that
	// user may do anything with them, anyone else may only read them. See
	// the package doc. Empty means no authentication and open nodes.
	Digest string

	// Logger receives the registry's warnings (skipped malformed nodes,
	// failed attempts to publish, an expired session) and, at Debug
	// level, its session changes and the ZooKeeper client library's own
	// messages. A clean Close logs nothing above Debug. Nil discards them.
	Logger *slog.Logger
}

// Registry is a registry.Registry on ZooKeeper. Make one with New; it is
// safe for concurrent use.
type Registry struct {
	root   string
	log    *slog.Logger
	acl    []zk.ACL
	digest []byte // credentials for AddAuth; nil without Config.Digest

	conn   *zk.Conn
	events <-chan zk.Event
	hosts  *hostProvider
	dialer *zkconn.Dialer

	nodes      *registry.Ledger // by path: the provider nodes to publish or withdraw
	done       chan struct{}    // closed by Close
	withdrawn  chan struct{}    // closed by the keeper once Close's withdrawals end
	keeperDone chan struct{}    // closed when the keeper returns
	watchers   sync.WaitGroup
	closeOnce  sync.Once

	mu       sync.Mutex    // guards the fields below
	closed   bool          // set by Close; Watch starts no watcher after it
	fullPass bool          // a new session began: check every node
	up       chan struct{} // closed and replaced when a session is (re)established
}

var _ registry.Registry = (*Registry)(nil)

// New returns a Registry connected to the ensemble cfg names. It does not
// wait for the connection: Register and Watch do, within their ctx, and
// the client keeps trying the servers until Close.
func New(cfg Config) (*Registry, error) {
	if len(cfg.Servers) == 0 {
		return nil, fmt.Errorf("%w: no Servers; list the ensemble's host:port addresses", ErrConfig)
	}
	for _, s := range cfg.Servers {
		switch {
		case strings.TrimSpace(s) == "":
			return nil, fmt.Errorf("%w: an empty address in Servers", ErrConfig)
		case strings.Contains(s, "/"):
			return nil, fmt.Errorf("%w: server address %q holds a '/'; set a chroot with Config.Root instead", ErrConfig, s)
		}
	}
	root := cfg.Root
	if root == "" {
		root = "/kiev"
	}
	if err := registry.CheckRoot(root); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	timeout := cfg.SessionTimeout
	switch {
	case timeout < 0:
		return nil, fmt.Errorf("%w: negative SessionTimeout %v", ErrConfig, timeout)
	case timeout == 0:
		timeout = DefaultSessionTimeout
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Registry{
		root:       strings.TrimSuffix(root, "/"),
		log:        logger,
		acl:        zk.WorldACL(zk.PermAll),
		nodes:      registry.NewLedger("kiev/registry/zookeeper"),
		done:       make(chan struct{}),
		withdrawn:  make(chan struct{}),
		keeperDone: make(chan struct{}),
		up:         make(chan struct{}),
		hosts:      &hostProvider{DNSHostProvider: zk.NewDNSHostProvider()},
		dialer:     &zkconn.Dialer{ReadLimit: timeout},
	}
	if cfg.Digest != "" {
		user, password, ok := strings.Cut(cfg.Digest, ":")
		if !ok || user == "" {
			return nil, fmt.Errorf(`%w: Digest is not "user:password"`, ErrConfig)
		}
		r.digest = []byte(cfg.Digest)
		r.acl = append(zk.DigestACL(zk.PermAll, user, password), zk.WorldACL(zk.PermRead)...)
	}
	conn, events, err := zk.Connect(cfg.Servers, timeout,
		zk.WithLogger(zkconn.Logger{Logger: logger}),
		zk.WithHostProvider(r.hosts),
		zk.WithDialer(r.dialer.Dial),
		zk.WithEventCallback(r.onEvent))
	if err != nil {
		return nil, fmt.Errorf("kiev/registry/zookeeper: %w", err)
	}
	r.conn, r.events = conn, events
	go r.keep()
	return r, nil
}

// Register publishes in and waits until ZooKeeper holds it; see
// registry.Registry. If ctx ends first, the error wraps ctx's and says
// what last went wrong, if anything did.
func (r *Registry) Register(ctx context.Context, in registry.Instance) error {
	if err := in.Validate(); err != nil {
		return err
	}
	data, err := registry.EncodeNode(in)
	if err != nil {
		return fmt.Errorf("kiev/registry/zookeeper: encoding %s: %w", in.ID(), err)
	}
	return r.nodes.Set(ctx, r.nodePath(in), in.ID(), data, true)
}

// Deregister withdraws the instance with in's Service and ID and waits
// until ZooKeeper has deleted its node. It deletes only the node the
// registry's own session made.
func (r *Registry) Deregister(ctx context.Context, in registry.Instance) error {
	if err := registry.CheckService(in.Service); err != nil {
		return err
	}
	return r.nodes.Set(ctx, r.nodePath(in), in.ID(), nil, false)
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

// Close deletes the registry's provider nodes (waiting at most 2 s for
// ZooKeeper), ends its session (waiting at most 1 s more) and its
// Watchers, and waits for its goroutines to return. Should the deletions not be confirmed in time, the
// nodes go when the ensemble ends the session. Close always returns nil.
func (r *Registry) Close() error {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closed = true
		r.nodes.Close()
		close(r.done)
		r.mu.Unlock()
		t := time.NewTimer(closeTimeout)
		select {
		case <-r.withdrawn:
		case <-t.C:
			r.log.Warn("kiev/registry/zookeeper: Close gave up waiting for ZooKeeper to delete the providers; they go when the session ends")
		}
		t.Stop()
		// The client sends ZooKeeper a close request and waits up to a
		// second for the answer; then its connection is closed under it,
		// lest it wait for its read timeout.
		r.conn.Close()
		r.dialer.Close()
		<-r.keeperDone
		r.watchers.Wait()
	})
	return nil
}

// sessionUp returns a channel closed when the next session is established.
func (r *Registry) sessionUp() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.up
}

// onEvent is called by the ZooKeeper client for every event, from its own
// goroutines; it must not block. It is the registry's sole view of session
// changes: the event channel drops events when full, the callback does not.
func (r *Registry) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	switch ev.State {
	case zk.StateHasSession:
		r.log.Debug("kiev/registry/zookeeper: session established", "server", ev.Server)
		r.mu.Lock()
		r.fullPass = true
		close(r.up)
		r.up = make(chan struct{})
		r.mu.Unlock()
		r.nodes.Wake()
	case zk.StateExpired:
		r.hosts.reconnectNow()
		r.log.Warn("kiev/registry/zookeeper: session expired; publishing the registrations again in a new one", "server", ev.Server)
	case zk.StateAuthFailed:
		r.log.Error("kiev/registry/zookeeper: ZooKeeper rejected the Digest credentials", "server", ev.Server)
	case zk.StateDisconnected:
		select {
		case <-r.done: // Close ends the connection
			r.log.Debug("kiev/registry/zookeeper: disconnected", "server", ev.Server)
		default:
			r.log.Warn("kiev/registry/zookeeper: lost the connection to ZooKeeper; reconnecting, and keeping the providers last read", "server", ev.Server)
		}
	}
}

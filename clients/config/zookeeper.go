package config

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/kievrpc/kiev/internal/zkconn"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"
)

// DefaultZooKeeperSessionTimeout is the session timeout used when
// ZooKeeperOptions.SessionTimeout is zero.
const DefaultZooKeeperSessionTimeout = 10 * time.Second

// Delays between attempts to read the node after a failure.
const (
	zkMinBackoff = 100 * time.Millisecond
	zkMaxBackoff = 5 * time.Second
)

// ZooKeeperOptions configures a ZooKeeper source. Servers and Path are
// required; the zero value of every other field is a working default.
type ZooKeeperOptions struct {
	// Servers lists the ensemble's addresses, "host:port" or "host" (port
	// 2181).
	Servers []string

	// Path is the absolute path of the node whose data is the
	// configuration, as "/config/shop". See the package doc for the
	// format.
	Path string

	// SessionTimeout is the ZooKeeper session's timeout, which also sets
	// how soon a silent connection is noticed (two thirds of it). Zero
	// means DefaultZooKeeperSessionTimeout (10 s).
	SessionTimeout time.Duration

	// Digest, as "user:password", authenticates the session with
	// ZooKeeper's digest scheme, to read a node whose ACL demands it. It
	// is never logged. Empty means no authentication.
	Digest string

	// Logger receives the source's connection events and, at debug level,
	// the ZooKeeper client library's messages. Nil discards them.
	Logger *slog.Logger
}

// ZooKeeper is a Source reading one node's data from a ZooKeeper ensemble
// and watching it. It keeps one session and one goroutine, which reads
// the node with a watch and reads it again, re-arming the watch, after
// every event, and in every new session; while the ensemble is unreachable
// the last value read stays current. Make one with NewZooKeeper.
type ZooKeeper struct {
	path    string
	servers string
	log     *slog.Logger
	digest  []byte

	conn      *zk.Conn
	events    <-chan zk.Event
	dialer    *zkconn.Dialer
	dialFails atomic.Int64 // dial attempts failed in a row

	stop      chan struct{} // closed by Close
	runDone   chan struct{}
	closeOnce sync.Once

	mu      sync.Mutex
	closed  bool
	cur     Snapshot
	have    bool          // cur holds a read of the node
	connErr error         // the connection is down; cleared with a new session
	readErr error         // the last read failed; cleared by a good read
	changed chan struct{} // closed and replaced when any of the above change
	up      chan struct{} // closed and replaced when a session is established

	// Owned by the goroutine calling Load and Next.
	lastVersion string
	returned    bool // Load or Next returned a snapshot
	failed      bool // Load or Next returned an error since
}

var _ Source = (*ZooKeeper)(nil)

// NewZooKeeper returns a ZooKeeper source and starts connecting to the
// ensemble; Load waits for the first read. It fails with an error
// wrapping ErrOptions for a bad server list or path.
func NewZooKeeper(opts ZooKeeperOptions) (*ZooKeeper, error) {
	if len(opts.Servers) == 0 {
		return nil, fmt.Errorf("%w: ZooKeeperOptions.Servers is empty; list the ensemble's host:port addresses", ErrOptions)
	}
	for _, s := range opts.Servers {
		switch {
		case strings.TrimSpace(s) == "":
			return nil, fmt.Errorf("%w: an empty address in ZooKeeperOptions.Servers", ErrOptions)
		case strings.Contains(s, "/"):
			return nil, fmt.Errorf("%w: ZooKeeperOptions.Servers holds %q; give host:port addresses, and the node in Path", ErrOptions, s)
		}
	}
	if err := checkZKPath(opts.Path); err != nil {
		return nil, fmt.Errorf("%w: ZooKeeperOptions.Path: %v", ErrOptions, err)
	}
	if opts.SessionTimeout < 0 {
		return nil, fmt.Errorf("%w: negative ZooKeeperOptions.SessionTimeout %v", ErrOptions, opts.SessionTimeout)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &ZooKeeper{
		path:    opts.Path,
		servers: strings.Join(opts.Servers, ","),
		log:     logger,
		stop:    make(chan struct{}),
		runDone: make(chan struct{}),
		changed: make(chan struct{}),
		up:      make(chan struct{}),
	}
	if opts.Digest != "" {
		if user, _, ok := strings.Cut(opts.Digest, ":"); !ok || user == "" {
			return nil, fmt.Errorf(`%w: ZooKeeperOptions.Digest is not "user:password"`, ErrOptions)
		}
		s.digest = []byte(opts.Digest)
	}
	hosts := zk.NewDNSHostProvider()
	session := cmp.Or(opts.SessionTimeout, DefaultZooKeeperSessionTimeout)
	s.dialer = &zkconn.Dialer{ReadLimit: session, Dialed: func(err error) {
		// A round of failed attempts, one per server, means the
		// ensemble is down.
		if err == nil {
			s.dialFails.Store(0)
		} else if s.dialFails.Add(1)%int64(max(hosts.Len(), 1)) == 0 {
			s.dialFailed(err)
		}
	}}
	conn, events, err := zk.Connect(opts.Servers, session,
		zk.WithHostProvider(hosts), // resolves the names before the first dial
		zk.WithLogger(zkconn.Logger{Logger: logger}),
		zk.WithDialer(s.dialer.Dial),
		zk.WithEventCallback(s.onEvent))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrOptions, err)
	}
	s.conn, s.events = conn, events
	go s.run()
	return s, nil
}

// checkZKPath reports what makes p unusable as a node path.
func checkZKPath(p string) error {
	switch {
	case p == "":
		return errors.New(`empty; give the node's absolute path, as "/config/shop"`)
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf(`%q is relative; give an absolute path, as "/config/shop"`, p)
	case p == "/":
		return errors.New(`"/" is the root; give the configuration a node of its own`)
	case strings.HasSuffix(p, "/"):
		return fmt.Errorf("%q ends with a '/'", p)
	}
	for _, c := range strings.Split(p[1:], "/") {
		if c == "" || c == "." || c == ".." || strings.ContainsRune(c, 0) {
			return fmt.Errorf("%q holds an empty, '.' or '..' component or a NUL", p)
		}
	}
	return nil
}

// String describes the source.
func (s *ZooKeeper) String() string { return "zookeeper " + s.servers + " " + s.path }

// Load returns the node's data as last read, waiting within ctx for the
// first read; or the error that keeps it from being read now.
func (s *ZooKeeper) Load(ctx context.Context) (Snapshot, error) {
	for {
		s.mu.Lock()
		closed, cur, have, err, changed := s.closed, s.cur, s.have, s.err(), s.changed
		s.mu.Unlock()
		switch {
		case closed:
			return Snapshot{}, ErrClosed
		case err != nil:
			s.failed = true // Next waits for it to go
			return Snapshot{}, err
		case have:
			s.lastVersion, s.returned, s.failed = cur.Version(), true, false
			return cur, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Snapshot{}, fmt.Errorf("%w: no answer from %s: %v", ErrUnavailable, s, ctx.Err())
		}
	}
}

// Next waits for the node's next version; see Source. It reports an
// outage once, then waits for the ensemble to be back.
func (s *ZooKeeper) Next(ctx context.Context) (Snapshot, error) {
	for {
		s.mu.Lock()
		closed, cur, have, err, changed := s.closed, s.cur, s.have, s.err(), s.changed
		s.mu.Unlock()
		switch {
		case closed:
			return Snapshot{}, ErrClosed
		case err != nil && !s.failed:
			s.failed = true
			return Snapshot{}, err
		case err == nil && have && (s.failed || !s.returned || cur.Version() != s.lastVersion):
			s.lastVersion, s.returned, s.failed = cur.Version(), true, false
			return cur, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Snapshot{}, ctx.Err()
		}
	}
}

// Close ends the session and waits for the source's goroutines.
func (s *ZooKeeper) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.stop)
		s.wake()
		s.mu.Unlock()
		// The client library sends ZooKeeper a close request and waits
		// up to a second for the answer; closing the connection under it
		// then ends its loops at once, even on a connection that hangs.
		s.conn.Close()
		s.dialer.Close()
		for range s.events {
		}
		<-s.runDone
	})
	return nil
}

// err returns what keeps the source from being current. s.mu is held.
func (s *ZooKeeper) err() error {
	if s.connErr != nil {
		return s.connErr
	}
	return s.readErr
}

// wake wakes Load and Next. s.mu is held.
func (s *ZooKeeper) wake() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// run reads the node and waits for its watch to fire, over and over,
// until Close. A read that fails for the connection is tried again when
// the next session is established, or after a backoff.
func (s *ZooKeeper) run() {
	defer close(s.runDone)
	zkconn.Settle(s.conn) // before the first watch
	backoff := zkMinBackoff
	authed := s.digest == nil
	for !s.stopped() {
		up := s.sessionUp()
		var snap Snapshot
		var event <-chan zk.Event
		var err error
		if !authed {
			if err = s.conn.AddAuth("digest", s.digest); err == nil {
				authed = true
				continue
			}
			err = fmt.Errorf("%w: authenticating with ZooKeeperOptions.Digest: %v", ErrUnavailable, err)
		} else {
			snap, event, err = s.read()
		}
		if event == nil { // no watch set: try again
			s.setRead(Snapshot{}, err)
			t := time.NewTimer(backoff)
			backoff = min(2*backoff, zkMaxBackoff)
			select {
			case <-up:
			case <-t.C:
			case <-s.stop:
			}
			t.Stop()
			continue
		}
		backoff = zkMinBackoff
		s.setRead(snap, err)
		// Any event means reading again: the data changed, the node was
		// created or deleted, or the watch was lost with the session
		// (EventNotWatching). While the connection is down the client
		// library keeps the watch and sets it again on reconnection, with
		// the last zxid it saw, so a change made meanwhile fires it.
		select {
		case <-event:
		case <-s.stop:
		}
	}
}

// read reads the node with a watch. It returns the watch's channel, or nil
// if no watch is set; the error says why the data is not usable.
func (s *ZooKeeper) read() (Snapshot, <-chan zk.Event, error) {
	for {
		data, stat, event, err := s.conn.GetW(s.path)
		if errors.Is(err, zk.ErrNoNode) {
			exists, _, event, err := s.conn.ExistsW(s.path)
			if err != nil {
				return Snapshot{}, nil, s.zkError(err)
			}
			if exists {
				continue // created since GetW
			}
			return Snapshot{}, event, fmt.Errorf("%w: ZooKeeper has no node %s; create it, with the configuration as a JSON object", ErrNotFound, s.path)
		}
		if err != nil {
			return Snapshot{}, nil, s.zkError(err)
		}
		values, err := decodeZKNode(data)
		if err != nil {
			return Snapshot{}, event, fmt.Errorf("node %s: %w", s.path, err)
		}
		return Snapshot{values: values, version: strconv.FormatInt(stat.Mzxid, 10)}, event, nil
	}
}

// zkError wraps an error of the client library.
func (s *ZooKeeper) zkError(err error) error {
	if errors.Is(err, zk.ErrNoAuth) {
		return fmt.Errorf("%w: ZooKeeper refused to read %s (%v); set ZooKeeperOptions.Digest to credentials its ACL allows", ErrUnauthorized, s.path, err)
	}
	return fmt.Errorf("%w: reading %s from ZooKeeper: %v", ErrUnavailable, s.path, err)
}

// setRead records the outcome of a read.
func (s *ZooKeeper) setRead(snap Snapshot, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.readErr = err
	} else {
		s.cur, s.have, s.readErr = snap, true, nil
	}
	s.wake()
}

func (s *ZooKeeper) stopped() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// sessionUp returns a channel closed when the next session is established.
func (s *ZooKeeper) sessionUp() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.up
}

// dialFailed is called by the dialer when connection attempts to every
// server have failed, so that Load need not wait for its timeout while the
// ensemble is down.
func (s *ZooKeeper) dialFailed(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if s.connErr == nil {
		s.log.Warn("kiev/clients/config: cannot connect to ZooKeeper", "servers", s.servers, "path", s.path, "err", err)
	}
	s.connErr = fmt.Errorf("%w: cannot connect to ZooKeeper at %s (last error: %v)", ErrUnavailable, s.servers, err)
	s.wake()
}

// onEvent is called by the client library for every event, from its own
// goroutines; it must not block.
func (s *ZooKeeper) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	switch ev.State {
	case zk.StateHasSession:
		if s.connErr != nil {
			s.log.Info("kiev/clients/config: connected to ZooKeeper", "server", ev.Server, "path", s.path)
		} else {
			s.log.Debug("kiev/clients/config: ZooKeeper session established", "server", ev.Server, "path", s.path)
		}
		s.connErr = nil
		close(s.up)
		s.up = make(chan struct{})
		s.wake()
	case zk.StateDisconnected:
		if s.connErr == nil {
			s.log.Warn("kiev/clients/config: lost the connection to ZooKeeper; keeping the last value read", "server", ev.Server, "path", s.path)
			s.connErr = fmt.Errorf("%w: lost the connection to ZooKeeper at %s", ErrUnavailable, ev.Server)
			s.wake()
		}
	case zk.StateExpired:
		s.log.Warn("kiev/clients/config: ZooKeeper expired the session; reading the node again in a new one", "server", ev.Server, "path", s.path)
	case zk.StateAuthFailed:
		s.log.Error("kiev/clients/config: ZooKeeper rejected the ZooKeeperOptions.Digest credentials", "server", ev.Server, "path", s.path)
	}
}

// decodeZKNode parses a node's data: a JSON object whose string members
// are values as they are, other members values as their JSON text, and
// null members absent. Empty data is an empty configuration.
func decodeZKNode(data []byte) (map[string]string, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return map[string]string{}, nil
	}
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%w: the data is not UTF-8, as JSON must be", ErrMalformed)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf(`%w: the data is not a JSON object, as {"port":8080,"name":"shop"}: %v`, ErrMalformed, err)
	}
	if raw == nil {
		return nil, fmt.Errorf(`%w: the data is JSON null, not an object`, ErrMalformed)
	}
	values := make(map[string]string, len(raw))
	for k, v := range raw {
		switch v[0] {
		case 'n': // null
			continue
		case '"':
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, fmt.Errorf("%w: member %q: %v", ErrMalformed, k, err)
			}
			values[k] = s
		default:
			var b bytes.Buffer
			if err := json.Compact(&b, v); err != nil {
				return nil, fmt.Errorf("%w: member %q: %v", ErrMalformed, k, err)
			}
			values[k] = b.String()
		}
	}
	return values, nil
}

package config

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options.
const (
	DefaultLoadTimeout   = 10 * time.Second
	DefaultMaxRetryDelay = 10 * time.Second
)

// minRetryDelay is the first wait after a failed read; it doubles up to
// Options.MaxRetryDelay.
const minRetryDelay = 100 * time.Millisecond

// Options configures a Client. The zero value works: no snapshot file,
// the default timeouts, no logging.
type Options struct {
	// Snapshot is the absolute path of the snapshot file: the Client
	// writes the configuration there after every read that brought a new
	// version, and New starts from it when the source cannot be reached.
	// Missing directories are created. The file is written before the
	// OnChange callbacks of its version run. It holds the values in clear,
	// readable by its owner only. Empty means no snapshot file, so New
	// fails while the source is down.
	Snapshot string

	// LoadTimeout bounds New's first read of the source; after it, New
	// starts from the snapshot file and the Client keeps trying the
	// source. Zero means DefaultLoadTimeout (10 s).
	LoadTimeout time.Duration

	// MaxRetryDelay caps the wait between attempts to read a source that
	// failed; the wait starts at 100 ms and doubles. Zero means
	// DefaultMaxRetryDelay (10 s).
	MaxRetryDelay time.Duration

	// Logger receives the Client's log: the first load and its origin,
	// every change (its version and how many keys changed, never the
	// values), the source going down and coming back, failed snapshot
	// writes and recovered panics of callbacks. Nil discards it.
	Logger *slog.Logger

	// Name labels the Client's Prometheus metrics (kiev_config_*, with
	// label client); "default" if empty. Give each Client of a process
	// its own.
	Name string

	// Registerer receives the Client's metrics; nil means
	// prometheus.DefaultRegisterer, which kiev's admin pages serve.
	Registerer prometheus.Registerer
}

// Client holds a configuration read from a Source and keeps it current:
// it follows the source's changes, calls the OnChange callbacks once per
// change, and saves each version to a snapshot file. Make one with New;
// its methods are safe for concurrent use.
type Client struct {
	unregister   func() // removes the metrics collector; nil if none
	src          Source
	srcName      string
	log          *slog.Logger
	snapshotPath string
	maxDelay     time.Duration

	cur atomic.Pointer[Snapshot]

	ctx        context.Context // ends at Close
	cancel     context.CancelFunc
	kick       chan struct{} // wakes the notifier; capacity 1
	watchDone  chan struct{}
	notifyDone chan struct{}
	closeOnce  sync.Once

	mu      sync.Mutex
	closed  bool
	subs    []*subscriber
	queue   []change // for the notifier, oldest first
	stats   Stats
	lastErr error // of the last failed read, while down

	// Owned by the watch goroutine (and New before it starts): the
	// snapshot last written to the snapshot file.
	written   Snapshot
	wroteOnce bool
}

// Stats are a Client's counters, for a monitor to read.
type Stats struct {
	Source       string    // the source, as Source.String describes it
	Up           bool      // the last read of the source succeeded
	FromSnapshot bool      // the configuration is the snapshot file's: the source has not answered since New
	Version      string    // of the current configuration
	Loads        uint64    // successful reads of the source (first load, changes, and checks after an outage)
	Changes      uint64    // changes delivered: versions whose values differed from the current ones
	Errors       uint64    // failed reads of the source
	SnapshotErrs uint64    // failed writes of the snapshot file
	LastFetch    time.Time // of the last successful read; zero if none
	DownSince    time.Time // when the source stopped answering; zero while Up
}

type subscriber struct {
	f       func(old, new Snapshot)
	removed atomic.Bool
}

// change is one change for the notifier to deliver, with the callbacks
// registered when it happened.
type change struct {
	old, new Snapshot
	subs     []*subscriber
}

// New reads the configuration from src and returns a Client that follows
// it. New takes src over: the Client's Close closes it, and so does New if
// it fails.
//
// If src cannot be read within ctx and Options.LoadTimeout, New starts
// from the snapshot file, logs a warning saying so, and the Client keeps
// trying src in the background; a change is delivered when src answers
// with other values. If there is no usable snapshot file either, New
// fails with an error wrapping ErrUnavailable and src's error. If ctx
// ends, New fails with ctx's error.
func New(ctx context.Context, src Source, opts Options) (*Client, error) {
	if src == nil {
		return nil, fmt.Errorf("%w: nil Source; pass one made by NewApollo, NewZooKeeper, NewDir or NewMemory", ErrOptions)
	}
	c, err := newClient(src, opts)
	if err != nil {
		src.Close()
		return nil, err
	}
	loadTimeout := cmp.Or(opts.LoadTimeout, DefaultLoadTimeout)
	lctx, cancel := context.WithTimeout(ctx, loadTimeout)
	snap, err := src.Load(lctx)
	cancel()
	now := time.Now()
	switch {
	case err == nil:
		c.cur.Store(&snap)
		c.stats.Up, c.stats.Loads, c.stats.LastFetch, c.stats.Version = true, 1, now, snap.Version()
		c.log.Info("kiev/clients/config: configuration loaded", "source", c.srcName, "version", snap.Version(), "keys", snap.Len())
		c.save(snap, now)
	case ctx.Err() != nil:
		src.Close()
		return nil, fmt.Errorf("kiev/clients/config: loading from %s: %w", c.srcName, ctx.Err())
	default:
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w: %s did not answer within Options.LoadTimeout (%v)", ErrUnavailable, c.srcName, loadTimeout)
		}
		f, ferr := c.fallback()
		if ferr != nil {
			src.Close()
			return nil, fmt.Errorf("kiev/clients/config: cannot start: %w; %v", err, ferr)
		}
		snap = NewSnapshot(f.Values, f.Version)
		c.cur.Store(&snap)
		c.written, c.wroteOnce = snap, true
		c.lastErr = err
		c.stats.FromSnapshot, c.stats.Errors, c.stats.DownSince, c.stats.Version = true, 1, now, snap.Version()
		c.log.Warn("kiev/clients/config: the config source is unreachable; starting from the snapshot file, which may be out of date; the source is retried in the background",
			"source", c.srcName, "err", err, "snapshot", c.snapshotPath, "saved", f.Saved, "saved_from", f.Source, "version", f.Version, "keys", len(f.Values))
	}
	c.registerMetrics(opts.Registerer, cmp.Or(opts.Name, "default"))
	go c.watch(err == nil)
	go c.notify()
	return c, nil
}

// newClient validates opts and makes a Client with no configuration yet.
func newClient(src Source, opts Options) (*Client, error) {
	switch {
	case opts.LoadTimeout < 0:
		return nil, fmt.Errorf("%w: negative Options.LoadTimeout %v", ErrOptions, opts.LoadTimeout)
	case opts.MaxRetryDelay < 0:
		return nil, fmt.Errorf("%w: negative Options.MaxRetryDelay %v", ErrOptions, opts.MaxRetryDelay)
	}
	if opts.Snapshot != "" {
		if err := checkSnapshotPath(opts.Snapshot); err != nil {
			return nil, err
		}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		src:          src,
		srcName:      src.String(),
		log:          logger,
		snapshotPath: opts.Snapshot,
		maxDelay:     max(cmp.Or(opts.MaxRetryDelay, DefaultMaxRetryDelay), minRetryDelay),
		ctx:          ctx,
		cancel:       cancel,
		kick:         make(chan struct{}, 1),
		watchDone:    make(chan struct{}),
		notifyDone:   make(chan struct{}),
	}
	c.stats.Source = c.srcName
	return c, nil
}

// fallback reads the snapshot file for New when the source failed.
func (c *Client) fallback() (snapshotFile, error) {
	if c.snapshotPath == "" {
		return snapshotFile{}, errors.New("no snapshot file to start from (Options.Snapshot is empty)")
	}
	f, err := readSnapshotFile(c.snapshotPath)
	if err != nil {
		return snapshotFile{}, fmt.Errorf("no snapshot to start from: %w", err)
	}
	return f, nil
}

// Current returns the current configuration.
func (c *Client) Current() Snapshot { return *c.cur.Load() }

// Get returns the current value of key and whether the configuration
// holds it.
func (c *Client) Get(key string) (string, bool) { return c.cur.Load().Get(key) }

// Decode decodes the current configuration into the struct v points to;
// see Snapshot.Decode. To decode each new version, call new.Decode in an
// OnChange callback.
func (c *Client) Decode(v any) error { return c.cur.Load().Decode(v) }

// OnChange registers f to be called with the old and the new
// configuration at every change after the one Current returns when
// OnChange returns. A change is a new version whose values differ from
// the current ones; a version with the same values calls nothing.
//
// Callbacks run on one goroutine of the Client, one at a time, in the
// order of the changes and, for one change, in the order they were
// registered. They run after Current has moved on, and never hold up
// reading the source: changes that come while a callback runs wait in a
// queue. A callback that panics is recovered and logged. Calling Close
// from a callback deadlocks: Close waits for the callback to return.
//
// remove unregisters f: once it returns, f is not called again, though a
// call already running may still be under way.
func (c *Client) OnChange(f func(old, new Snapshot)) (remove func()) {
	s := &subscriber{f: f}
	c.mu.Lock()
	c.subs = append(c.subs, s)
	c.mu.Unlock()
	return func() {
		s.removed.Store(true)
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, x := range c.subs {
			if x == s {
				// A new slice: queued changes keep the one they hold.
				c.subs = append(c.subs[:i:i], c.subs[i+1:]...)
				break
			}
		}
	}
}

// Health returns nil while the Client follows its source. Otherwise it
// returns an error for a status page: ErrClosed after Close, or an error
// wrapping ErrUnavailable that says since when the source has failed, its
// last error, and which version the Client serves meanwhile. It reports
// what the Client's reads last found and does no I/O, so it returns at
// once; ctx is there for kiev's clients to share one signature.
func (c *Client) Health(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return ErrClosed
	case c.stats.Up:
		return nil
	}
	from := ""
	if c.stats.FromSnapshot {
		from = " from the snapshot file " + c.snapshotPath
	}
	return fmt.Errorf("%w: %s failing since %s: %v; serving version %q%s",
		ErrUnavailable, c.srcName, c.stats.DownSince.Format(time.RFC3339), c.lastErr, c.stats.Version, from)
}

// Stats returns the Client's counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Close stops following the source, closes it, and waits for the
// Client's goroutines, and a callback in progress, to return. Changes not
// yet delivered are dropped. Close returns the source's Close error;
// calling it again returns nil.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.queue = nil
		c.mu.Unlock()
		c.cancel()
		err = c.src.Close()
		<-c.watchDone
		<-c.notifyDone
		if c.unregister != nil {
			c.unregister()
		}
	})
	return err
}

// watch reads the source until Close: Next after each success, Load
// until the first one, with a growing delay after failures.
func (c *Client) watch(loaded bool) {
	defer close(c.watchDone)
	delay := minRetryDelay
	for {
		var snap Snapshot
		var err error
		if loaded {
			snap, err = c.src.Next(c.ctx)
		} else {
			snap, err = c.src.Load(c.ctx)
		}
		if c.ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrClosed) {
			// Closed under the Client: nothing more will come.
			c.failed(fmt.Errorf("%w: the source was closed, not by Client.Close; the configuration no longer follows it", err))
			return
		}
		if err == nil {
			loaded = true
			delay = minRetryDelay
			c.succeeded(snap)
			continue
		}
		c.failed(err)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-c.ctx.Done():
			t.Stop()
			return
		}
		delay = min(2*delay, c.maxDelay)
	}
}

// succeeded takes a configuration read from the source. It saves it
// first, so that callbacks find the snapshot file current.
func (c *Client) succeeded(snap Snapshot) {
	now := time.Now()
	c.save(snap, now)
	c.mu.Lock()
	old := *c.cur.Load()
	wasUp, fromSnapshot, downSince := c.stats.Up, c.stats.FromSnapshot, c.stats.DownSince
	c.stats.Up, c.stats.FromSnapshot, c.stats.DownSince = true, false, time.Time{}
	c.stats.Loads++
	c.stats.LastFetch = now
	c.lastErr = nil
	changed := !old.Equal(snap)
	if changed || old.Version() != snap.Version() {
		c.cur.Store(&snap)
		c.stats.Version = snap.Version()
	}
	if changed {
		c.stats.Changes++
		c.queue = append(c.queue, change{old: old, new: snap, subs: c.subs})
	}
	c.mu.Unlock()

	switch {
	case fromSnapshot:
		c.log.Info("kiev/clients/config: the config source answered; following it from now on",
			"source", c.srcName, "version", snap.Version(), "down_for", now.Sub(downSince).Round(time.Millisecond))
	case !wasUp:
		c.log.Info("kiev/clients/config: the config source is back",
			"source", c.srcName, "version", snap.Version(), "down_for", now.Sub(downSince).Round(time.Millisecond))
	}
	if changed {
		c.log.Info("kiev/clients/config: configuration changed", "source", c.srcName,
			"old_version", old.Version(), "version", snap.Version(), "keys_changed", changedKeys(old, snap), "keys", snap.Len())
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

// failed records a failed read. The first failure after a success is
// logged as a warning, later ones at debug level, lest an outage flood
// the log.
func (c *Client) failed(err error) {
	now := time.Now()
	c.mu.Lock()
	wasUp := c.stats.Up
	c.stats.Errors++
	if wasUp {
		c.stats.Up, c.stats.DownSince = false, now
	}
	c.lastErr = err
	version := c.stats.Version
	c.mu.Unlock()
	if wasUp {
		c.log.Warn("kiev/clients/config: cannot read the config source; keeping the current configuration and retrying",
			"source", c.srcName, "err", err, "version", version)
	} else {
		c.log.Debug("kiev/clients/config: the config source still fails", "source", c.srcName, "err", err)
	}
}

// save writes snap to the snapshot file unless it holds snap already.
func (c *Client) save(snap Snapshot, now time.Time) {
	if c.snapshotPath == "" || (c.wroteOnce && c.written.Version() == snap.Version() && c.written.Equal(snap)) {
		return
	}
	if err := writeSnapshotFile(c.snapshotPath, c.srcName, snap, now); err != nil {
		c.mu.Lock()
		c.stats.SnapshotErrs++
		c.mu.Unlock()
		c.log.Warn("kiev/clients/config: cannot write the snapshot file; a restart while the source is down would not find this version",
			"snapshot", c.snapshotPath, "err", err, "version", snap.Version())
		return
	}
	c.written, c.wroteOnce = snap, true
}

// notify delivers the queued changes to the callbacks until Close.
func (c *Client) notify() {
	defer close(c.notifyDone)
	for {
		select {
		case <-c.kick:
		case <-c.ctx.Done():
			return
		}
		for {
			c.mu.Lock()
			if len(c.queue) == 0 || c.closed {
				c.mu.Unlock()
				break
			}
			ch := c.queue[0]
			c.queue[0] = change{}
			c.queue = c.queue[1:]
			c.mu.Unlock()
			for _, s := range ch.subs {
				if !s.removed.Load() && c.ctx.Err() == nil {
					c.call(s.f, ch.old, ch.new)
				}
			}
		}
	}
}

// call runs one callback, recovering a panic.
func (c *Client) call(f func(old, new Snapshot), old, new Snapshot) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("kiev/clients/config: an OnChange callback panicked", "panic", r, "version", new.Version(), "stack", string(debug.Stack()))
		}
	}()
	f(old, new)
}

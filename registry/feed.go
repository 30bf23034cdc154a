package registry

import (
	"context"
	"maps"
	"slices"
	"sync"
)

// Feed is the half of a Watcher that every registry shares: the goroutine
// that reads the registry Publishes each set it reads, and Next hands the
// caller a set when it differs from the one Next last returned. A
// registry's watcher embeds a Feed, so its Next and Stop are the Feed's.
//
// Publish is safe to call concurrently with Next and Stop; Next is called
// by one goroutine at a time, as the Watcher contract says.
type Feed struct {
	closed   <-chan struct{} // the registry's: closed by its Close
	stop     chan struct{}
	stopOnce sync.Once
	ready    chan struct{} // closed at the first Publish

	mu      sync.Mutex    // guards the fields below
	cur     []Instance    // the latest set published, sorted; never modified
	changed chan struct{} // closed and replaced when cur changes

	// Owned by the goroutine calling Next.
	last    []Instance
	started bool
}

// NewFeed returns the Feed of a watcher of a registry whose Close closes
// closed.
func NewFeed(closed <-chan struct{}) *Feed {
	return &Feed{closed: closed, stop: make(chan struct{}), ready: make(chan struct{}), changed: make(chan struct{})}
}

// Next returns the provider set when it differs from the one it last
// returned; see Watcher.
func (f *Feed) Next(ctx context.Context) ([]Instance, error) {
	for {
		select {
		case <-f.stop:
			return nil, ErrStopped
		case <-f.closed:
			return nil, ErrClosed
		default:
		}
		f.mu.Lock()
		cur, changed := f.cur, f.changed
		f.mu.Unlock()
		if cur != nil && (!f.started || !SameSet(cur, f.last)) {
			f.started = true
			f.last = cur
			return CloneSet(cur), nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-f.stop:
			return nil, ErrStopped
		case <-f.closed:
			return nil, ErrClosed
		}
	}
}

// Stop ends the watch: Next returns ErrStopped, and the reading goroutine
// returns at its next look at Stopped or Ended.
func (f *Feed) Stop() { f.stopOnce.Do(func() { close(f.stop) }) }

// Stopped is closed by Stop.
func (f *Feed) Stopped() <-chan struct{} { return f.stop }

// Ended reports whether the watch is stopped or its registry closed.
func (f *Feed) Ended() bool {
	select {
	case <-f.stop:
		return true
	case <-f.closed:
		return true
	default:
		return false
	}
}

// Ready is closed at the first Publish: the registry's Watch waits for it.
func (f *Feed) Ready() <-chan struct{} { return f.ready }

// Publish makes set, sorted (see Sort) and not nil, the latest the watch
// read; the Feed keeps it, so the caller must not change it afterwards.
// A set equal to the last published is dropped.
func (f *Feed) Publish(set []Instance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur != nil && SameSet(f.cur, set) {
		return
	}
	if f.cur == nil {
		close(f.ready)
	}
	f.cur = set
	close(f.changed)
	f.changed = make(chan struct{})
}

// CloneSet copies set deeply, so that callers may change what they get.
func CloneSet(set []Instance) []Instance {
	out := make([]Instance, len(set))
	for i, in := range set {
		in.Codecs = slices.Clone(in.Codecs)
		in.Metadata = maps.Clone(in.Metadata)
		out[i] = in
	}
	return out
}

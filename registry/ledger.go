package registry

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Ledger is the bookkeeping that every registry on a shared store needs
// between its Register and Deregister calls and its keeper, the one
// goroutine that writes to the store. A call records what an entry (a
// node, a key) should be and waits in Set until the keeper confirms it;
// the keeper takes what needs doing from Entries, does it, and reports
// each outcome with Confirm. A registry holds a Ledger and keeps its own
// lock for its own state (a session, a lease).
//
// Every method is safe to call concurrently. Set blocks until its entry
// is confirmed, ctx ends or the Ledger is closed; no other method blocks.
type Ledger struct {
	prefix string        // of Set's errors, such as "kiev/registry/zookeeper"
	wake   chan struct{} // wakes the keeper; capacity 1

	mu       sync.Mutex        // guards the fields below
	closed   bool              // set by Close
	entries  map[string]*entry // by key: what to write or withdraw
	gen      uint64            // counts Set calls
	progress chan struct{}     // closed and replaced when an entry is confirmed or fails
}

// entry is what one key should be, and how far the keeper has got.
type entry struct {
	data []byte
	want bool   // write data; false: withdraw the key
	gen  uint64 // of the last Set
	done uint64 // the latest gen the keeper confirmed
	err  error  // of the last failed attempt, for Set's ctx error
}

// Entry is an entry of a Ledger as the keeper sees it: make Key hold Data
// (Want) or withdraw it (not Want), then Confirm Gen.
type Entry struct {
	Key  string
	Data []byte
	Want bool
	Gen  uint64
}

// NewLedger returns an empty Ledger whose errors begin with prefix, the
// registry's package path such as "kiev/registry/etcd".
func NewLedger(prefix string) *Ledger {
	return &Ledger{
		prefix:   prefix,
		wake:     make(chan struct{}, 1),
		entries:  make(map[string]*entry),
		progress: make(chan struct{}),
	}
}

// Set records that key should hold data (want) or be withdrawn (not
// want), wakes the keeper and waits until the keeper confirms it. Setting
// a key again supersedes what was pending: an earlier Set still waiting
// returns when the later one is confirmed. Withdrawing a key never set
// returns nil at once. After Close, Set returns ErrClosed. If ctx ends
// first, Set returns ctx's error; if an attempt failed meanwhile, wrapped
// in an error naming the registration or withdrawal of id and the last
// error.
func (l *Ledger) Set(ctx context.Context, key, id string, data []byte, want bool) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	e := l.entries[key]
	if e == nil {
		if !want {
			l.mu.Unlock()
			return nil // never written through this Ledger
		}
		e = &entry{}
		l.entries[key] = e
	}
	l.gen++
	gen := l.gen
	e.data, e.want, e.gen, e.err = data, want, gen, nil
	l.mu.Unlock()
	l.Wake()

	for {
		// ctx's state before the entry's: an attempt that failed before
		// ctx ended is then seen with it.
		ctxErr := ctx.Err()
		l.mu.Lock()
		e, ok := l.entries[key]
		if !ok || e.done >= gen {
			l.mu.Unlock()
			return nil
		}
		closed, progress, lastErr := l.closed, l.progress, e.err
		l.mu.Unlock()
		switch {
		case closed:
			return ErrClosed
		case ctxErr != nil && lastErr != nil:
			what := "registration"
			if !want {
				what = "withdrawal"
			}
			return fmt.Errorf("%s: %s of %s not confirmed: %w (last error: %v)", l.prefix, what, id, ctxErr, lastErr)
		case ctxErr != nil:
			return ctxErr
		}
		select {
		case <-progress:
		case <-ctx.Done():
		}
	}
}

// Wake makes the keeper look at the entries: Set calls it, and so may
// whatever else has work for the keeper, such as a new session. It never
// blocks; wakes that come before the keeper looks make one.
func (l *Ledger) Wake() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Woken is the keeper's end of Wake: it receives once after one or more
// Wakes.
func (l *Ledger) Woken() <-chan struct{} { return l.wake }

// Entries returns, sorted by key, the entries whose latest Set the keeper
// has not confirmed, or every entry if all (say, when the store may have
// lost them).
func (l *Ledger) Entries(all bool) []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Entry
	for k, e := range l.entries {
		if all || e.done < e.gen {
			out = append(out, Entry{Key: k, Data: e.data, Want: e.want, Gen: e.gen})
		}
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// Wanted counts the entries to write, rather than withdraw.
func (l *Ledger) Wanted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.entries {
		if e.want {
			n++
		}
	}
	return n
}

// Confirm records the outcome of the keeper's attempt to make key match
// its Set of gen, and wakes the Set calls waiting. With err nil, the Sets
// up to gen return; a withdrawal not superseded since is forgotten. With
// an error, it becomes the last error that Set reports should its ctx
// end.
func (l *Ledger) Confirm(key string, gen uint64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entries[key]
	if e == nil {
		return
	}
	switch {
	case err != nil:
		e.err = err
	case e.gen == gen && !e.want:
		delete(l.entries, key)
	}
	if err == nil && gen > e.done {
		e.done = gen
	}
	l.progressed()
}

// Fail records err as the last error of every entry not yet confirmed,
// for a failure that stops the keeper before it tries any (say, it could
// not get a lease).
func (l *Ledger) Fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.entries {
		if e.done < e.gen {
			e.err = err
		}
	}
	l.progressed()
}

// Close makes the Set calls waiting, and those to come, return ErrClosed.
// The entries stay, for the keeper to withdraw what it wrote.
func (l *Ledger) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.progressed()
}

// progressed wakes the Set calls waiting. REQUIRES l.mu is held.
func (l *Ledger) progressed() {
	close(l.progress)
	l.progress = make(chan struct{})
}

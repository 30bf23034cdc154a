package config

import (
	"context"
	"iter"
	"maps"
	"slices"
)

// Source is where a Client reads its configuration: Apollo, ZooKeeper, a
// directory, or memory.
//
// A Client calls Load and Next from one goroutine, one call at a time;
// other users of a Source must do the same. Close may be called from any
// goroutine, at any time, more than once: it makes a Load or Next in
// progress, and every later one, return ErrClosed.
type Source interface {
	// Load reads the current configuration, within ctx.
	Load(ctx context.Context) (Snapshot, error)

	// Next blocks until the source holds a version of the configuration
	// other than the one Load or Next last returned, or ctx ends, and
	// returns it. The values of that version may equal the last ones (a
	// release that changed nothing); the Client delivers no change for
	// it.
	//
	// When the source cannot be reached, Next returns an error: at each
	// failed attempt, or once per outage for sources that learn by
	// themselves when they are back. After an error, the next successful
	// Next returns the current configuration at once, changed or not, so
	// the caller learns that the source is back. A Next called before any
	// successful Load behaves as after an error.
	Next(ctx context.Context) (Snapshot, error)

	// String describes the source for logs and errors, without secrets:
	// "apollo http://10.0.0.5:8080 app=shop cluster=default namespace=application".
	String() string

	// Close releases the source's connections and goroutines.
	Close() error
}

// Snapshot is one version of a configuration: keys with string values,
// and the version its source gave it (Apollo's releaseKey, a ZooKeeper
// node's modification zxid, a digest of a directory's files). Snapshots
// are immutable and safe to share between goroutines; the zero Snapshot
// is empty.
type Snapshot struct {
	values  map[string]string // never modified once built
	version string
}

// NewSnapshot returns a snapshot of a copy of values, with the given
// version. Sources call it; a nil map makes an empty snapshot.
func NewSnapshot(values map[string]string, version string) Snapshot {
	return Snapshot{values: maps.Clone(values), version: version}
}

// Get returns the value of key and whether the snapshot holds it.
func (s Snapshot) Get(key string) (string, bool) {
	v, ok := s.values[key]
	return v, ok
}

// Len returns the number of keys.
func (s Snapshot) Len() int { return len(s.values) }

// All returns the keys and their values, in key order.
func (s Snapshot) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for _, k := range slices.Sorted(maps.Keys(s.values)) {
			if !yield(k, s.values[k]) {
				return
			}
		}
	}
}

// Map returns a copy of the values, which the caller may change.
func (s Snapshot) Map() map[string]string {
	m := maps.Clone(s.values)
	if m == nil {
		m = map[string]string{}
	}
	return m
}

// Version returns the version the source gave the snapshot; empty for
// sources that have none.
func (s Snapshot) Version() string { return s.version }

// Equal reports whether s and o hold the same keys and values, whatever
// their versions.
func (s Snapshot) Equal(o Snapshot) bool { return maps.Equal(s.values, o.values) }

// changedKeys returns how many keys differ between a and b: added,
// removed or with another value.
func changedKeys(a, b Snapshot) int {
	n := 0
	for k, v := range a.values {
		if w, ok := b.values[k]; !ok || w != v {
			n++
		}
	}
	for k := range b.values {
		if _, ok := a.values[k]; !ok {
			n++
		}
	}
	return n
}

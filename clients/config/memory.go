package config

import (
	"context"
	"strconv"
	"sync"
)

// Memory is a Source held in memory, for tests and for programs that make
// their configuration themselves. Set publishes a new version; Next
// returns the latest, so versions set in quick succession may be seen
// only as the last. Make one with NewMemory; it is safe for concurrent
// use.
type Memory struct {
	mu      sync.Mutex
	cur     Snapshot
	gen     uint64
	changed chan struct{} // closed and replaced at each Set and at Close
	closed  bool

	// Owned by the goroutine calling Load and Next.
	seen uint64 // gen of the snapshot last returned; 0: none
}

var _ Source = (*Memory)(nil)

// NewMemory returns a Memory source holding a copy of values as its first
// version, "1".
func NewMemory(values map[string]string) *Memory {
	return &Memory{cur: NewSnapshot(values, "1"), gen: 1, changed: make(chan struct{})}
}

// Set makes a copy of values the next version, even if they equal the
// current ones, and wakes Next. Versions count up from "1".
func (m *Memory) Set(values map[string]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	m.gen++
	m.cur = NewSnapshot(values, strconv.FormatUint(m.gen, 10))
	close(m.changed)
	m.changed = make(chan struct{})
}

// Load returns the current version.
func (m *Memory) Load(ctx context.Context) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Snapshot{}, ErrClosed
	}
	m.seen = m.gen
	return m.cur, nil
}

// Next waits for a version other than the one last returned; see Source.
func (m *Memory) Next(ctx context.Context) (Snapshot, error) {
	for {
		m.mu.Lock()
		closed, gen, cur, changed := m.closed, m.gen, m.cur, m.changed
		m.mu.Unlock()
		switch {
		case closed:
			return Snapshot{}, ErrClosed
		case gen != m.seen:
			m.seen = gen
			return cur, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Snapshot{}, ctx.Err()
		}
	}
}

// String returns "memory".
func (m *Memory) String() string { return "memory" }

// Close makes Load and Next return ErrClosed.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.closed = true
		close(m.changed)
	}
	return nil
}

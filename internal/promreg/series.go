package promreg

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Series holds a client's metric series by key (a command, a table and
// operation). A lookup takes no lock and allocates nothing once the key is
// known: the map is replaced, never changed. The zero value is ready.
type Series[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V]
	mu sync.Mutex // held to add a key
}

// Get returns the series of k, made by newSeries the first time k is seen.
// overflow tells newSeries that max keys are held already, so that it
// labels k "other": keys a program makes up (tables per day, commands sent
// with Do) cannot grow the metrics without bound.
func (s *Series[K, V]) Get(k K, max int, newSeries func(overflow bool) V) V {
	if m := s.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var old map[K]V
	if m := s.m.Load(); m != nil {
		old = *m
	}
	if v, ok := old[k]; ok {
		return v
	}
	v := newSeries(len(old) >= max)
	next := make(map[K]V, len(old)+1)
	maps.Copy(next, old)
	next[k] = v
	s.m.Store(&next)
	return v
}

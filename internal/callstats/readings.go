package callstats

import (
	"sync"
	"time"
)

// ReadingsLen is how many readings Readings keeps: a minute's, at one
// every 5 seconds, and one more.
const ReadingsLen = windowLen/5 + 1

// Readings keep the last readings of a few counters (a stream method's
// messages and bytes each way), taken every few seconds by a sampler,
// for rates over the last minute that cost the counting nothing: a clock
// read for each message, as Stats makes for each call, would cost more
// than the counting itself. The zero value is ready; its methods may be
// called from many goroutines at once.
type Readings struct {
	mu      sync.Mutex // guards the fields below
	ring    [ReadingsLen]reading
	next, n int
}

type reading struct {
	at time.Time
	c  [4]int64
}

// Add records counters c, read at at.
func (r *Readings) Add(at time.Time, c [4]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ring[r.next] = reading{at, c}
	r.next = (r.next + 1) % ReadingsLen
	r.n = min(r.n+1, ReadingsLen)
}

// Rates returns the rates per second of counters c, read at now, since
// the oldest reading of the last minute; or, with none, since start, when
// every counter was 0. span is the time they cover, at least a second.
func (r *Readings) Rates(now, start time.Time, c [4]int64) (rates [4]float64, span time.Duration) {
	from, base := start, [4]int64{}
	r.mu.Lock()
	for i := range r.n {
		rd := &r.ring[(r.next-r.n+i+ReadingsLen)%ReadingsLen] // oldest first
		if age := now.Sub(rd.at); age <= windowLen*time.Second && age >= 0 {
			from, base = rd.at, rd.c
			break
		}
	}
	r.mu.Unlock()
	span = max(now.Sub(from), time.Second)
	for i := range rates {
		rates[i] = float64(c[i]-base[i]) / span.Seconds()
	}
	return rates, span
}

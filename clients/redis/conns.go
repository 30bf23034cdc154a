package redis

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// connEvents follows whether each server address can be reached, from
// the outcome of each attempt to connect to it, and logs the changes: a
// server lost once at WARN, however many attempts fail after, and back
// at INFO. Every new connection is logged at DEBUG.
type connEvents struct {
	client string
	log    *slog.Logger
	errors atomic.Uint64 // failed attempts

	mu   sync.Mutex
	down map[string]time.Time // address → first failure of the outage
}

func newConnEvents(client string, log *slog.Logger) *connEvents {
	return &connEvents{client: client, log: log, down: make(map[string]time.Time)}
}

// dialed records an attempt to connect to addr that took d and ended
// with err; where is the address to log, the server's own once
// connected.
func (e *connEvents) dialed(ctx context.Context, addr, where string, d time.Duration, err error) {
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// The caller gave up; that says nothing of the server.
		e.log.DebugContext(ctx, "redis: connecting cut short by the caller's ctx", "client", e.client, "addr", where, "err", err)
		return
	}
	e.mu.Lock()
	since, wasDown := e.down[addr]
	switch {
	case err != nil && !wasDown:
		e.down[addr] = time.Now()
	case err == nil && wasDown:
		delete(e.down, addr)
	}
	e.mu.Unlock()
	switch {
	case err != nil:
		e.errors.Add(1)
		if wasDown {
			e.log.DebugContext(ctx, "redis: still cannot connect", "client", e.client, "addr", where, "err", err)
		} else {
			e.log.WarnContext(ctx, "redis: cannot connect", "client", e.client, "addr", where, "err", err)
		}
	case wasDown:
		e.log.InfoContext(ctx, "redis: connected again", "client", e.client, "addr", where,
			"down", time.Since(since).Round(time.Millisecond))
	default:
		e.log.DebugContext(ctx, "redis: connected", "client", e.client, "addr", where, "took", d)
	}
}

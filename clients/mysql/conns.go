package mysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// connector is the driver's connector of one server, through which
// database/sql opens every connection: it tells the DB's connEvents how
// each attempt went.
type connector struct {
	driver.Connector
	server string // as server.String describes it
	events *connEvents
}

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	start := time.Now()
	conn, err := c.Connector.Connect(ctx)
	c.events.dialed(ctx, c.server, time.Since(start), err)
	return conn, err
}

// connEvents follows whether each server can be reached, from the
// outcome of each attempt to connect to it, and logs the changes: a
// server lost once at WARN, however many attempts fail after, and back
// at INFO. Every new connection is logged at DEBUG.
type connEvents struct {
	client string
	log    *slog.Logger
	errors atomic.Uint64 // failed attempts

	mu   sync.Mutex
	down map[string]time.Time // server → first failure of the outage
}

func newConnEvents(client string, log *slog.Logger) *connEvents {
	return &connEvents{client: client, log: log, down: make(map[string]time.Time)}
}

// dialed records an attempt to connect to server that took d and ended
// with err.
func (e *connEvents) dialed(ctx context.Context, server string, d time.Duration, err error) {
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// The caller gave up; that says nothing of the server.
		e.log.DebugContext(ctx, "mysql: connecting cut short by the caller's ctx", "client", e.client, "server", server, "err", err)
		return
	}
	e.mu.Lock()
	since, wasDown := e.down[server]
	switch {
	case err != nil && !wasDown:
		e.down[server] = time.Now()
	case err == nil && wasDown:
		delete(e.down, server)
	}
	e.mu.Unlock()
	switch {
	case err != nil:
		e.errors.Add(1)
		if wasDown {
			e.log.DebugContext(ctx, "mysql: still cannot connect", "client", e.client, "server", server, "err", err)
		} else {
			e.log.WarnContext(ctx, "mysql: cannot connect", "client", e.client, "server", server, "err", err)
		}
	case wasDown:
		e.log.InfoContext(ctx, "mysql: connected again", "client", e.client, "server", server,
			"down", time.Since(since).Round(time.Millisecond))
	default:
		e.log.DebugContext(ctx, "mysql: connected", "client", e.client, "server", server, "took", d)
	}
}

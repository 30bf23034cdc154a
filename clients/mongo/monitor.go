package mongo

import (
	"context"
	"errors"
	"log/slog"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"
)

// This file holds the driver's hooks: its CommandMonitor counts, times and
// logs the commands, its PoolMonitor counts the connections, and its
// ServerMonitor logs the servers coming and going. The driver calls them
// from the goroutines of the operations and of its own monitors, at once.

// inflight is a command sent and not yet answered. The driver publishes
// a Succeeded or Failed event for every Started one, so each is forgotten
// when its command ends.
type inflight struct {
	cmd        bson.Raw // the driver's copy, which it does not reuse
	collection string   // its label
	series     *series
	write      bool // an insert, update or delete, whose reply may hold write errors
}

func (c *Client) commandMonitor() *event.CommandMonitor {
	return &event.CommandMonitor{
		Started:   c.commandStarted,
		Succeeded: c.commandSucceeded,
		Failed:    c.commandFailed,
	}
}

func (c *Client) commandStarted(_ context.Context, e *event.CommandStartedEvent) {
	f := inflight{
		cmd:        e.Command,
		collection: c.collections.ofBytes(collectionOf(e.CommandName, e.Command)),
		write:      e.CommandName == "insert" || e.CommandName == "update" || e.CommandName == "delete",
	}
	f.series = c.metrics.seriesFor(c.commandNames.of(e.CommandName), f.collection)
	c.mu.Lock()
	c.inflight[e.RequestID] = f
	c.mu.Unlock()
}

// finished returns, and forgets, the command of e.
func (c *Client) finished(e *event.CommandFinishedEvent) inflight {
	c.mu.Lock()
	f, ok := c.inflight[e.RequestID]
	delete(c.inflight, e.RequestID)
	c.mu.Unlock()
	if !ok { // no Started event: count it under no collection
		f.series = c.metrics.seriesFor(c.commandNames.of(e.CommandName), "")
	}
	return f
}

func (c *Client) commandSucceeded(ctx context.Context, e *event.CommandSucceededEvent) {
	f := c.finished(&e.CommandFinishedEvent)
	f.series.duration.Observe(e.Duration.Seconds())
	c.stats.commands.Add(1)
	// A write that failed for some documents (a duplicate key) succeeds
	// as a command, with writeErrors in its reply; the caller gets a
	// mongo.WriteException. It counts as an error, and is logged at Debug
	// level only: the caller decides whether it matters.
	if f.write && hasWriteErrors(e.Reply) {
		f.series.count(outcomeError)
		c.stats.failures.Add(1)
		if c.log.Enabled(ctx, slog.LevelDebug) {
			c.log.LogAttrs(ctx, slog.LevelDebug, "kiev/clients/mongo: write errors",
				append(c.commandAttrs(&e.CommandFinishedEvent, f), slog.String("reply", summarize("", e.Reply, MaxLoggedCommand)))...)
		}
	} else {
		f.series.count(outcomeOK)
	}
	if e.Duration < c.slow {
		return
	}
	c.stats.slow.Add(1)
	c.log.LogAttrs(ctx, slog.LevelWarn, "kiev/clients/mongo: slow command",
		c.commandAttrs(&e.CommandFinishedEvent, f)...)
}

// hasWriteErrors reports whether a write command's reply holds write
// errors or a write concern error.
func hasWriteErrors(reply bson.Raw) bool {
	d := bsoncore.Document(reply)
	if _, err := d.LookupErr("writeErrors"); err == nil {
		return true
	}
	_, err := d.LookupErr("writeConcernError")
	return err == nil
}

func (c *Client) commandFailed(ctx context.Context, e *event.CommandFailedEvent) {
	f := c.finished(&e.CommandFinishedEvent)
	f.series.count(outcome(e.Failure))
	f.series.duration.Observe(e.Duration.Seconds())
	c.stats.commands.Add(1)
	c.stats.failures.Add(1)
	level := slog.LevelWarn
	if e.CommandName == "endSessions" {
		// Sent by Close; servers without sessions, FerretDB among them,
		// refuse it, and the driver ignores its errors.
		level = slog.LevelDebug
	}
	if !c.log.Enabled(ctx, level) {
		return
	}
	attrs := c.commandAttrs(&e.CommandFinishedEvent, f)
	if sensitive(e.CommandName, f.cmd) {
		// The server's message may quote the command; keep its code.
		var de driver.Error
		if errors.As(e.Failure, &de) {
			attrs = append(attrs, slog.Int("code", int(de.Code)), slog.String("code_name", de.Name))
		}
	} else {
		attrs = append(attrs, slog.String("err", e.Failure.Error()))
	}
	c.log.LogAttrs(ctx, level, "kiev/clients/mongo: command failed", attrs...)
}

// commandAttrs are the attributes of a finished command's log line.
func (c *Client) commandAttrs(e *event.CommandFinishedEvent, f inflight) []slog.Attr {
	attrs := []slog.Attr{
		slog.String("client", c.name),
		slog.String("command", e.CommandName),
		slog.String("database", e.DatabaseName),
	}
	if f.collection != "" {
		attrs = append(attrs, slog.String("collection", f.collection))
	}
	return append(attrs,
		slog.Duration("took", e.Duration),
		slog.String("server", e.ConnectionID),
		slog.Int64("request_id", e.RequestID),
		slog.String("cmd", summarize(e.CommandName, f.cmd, MaxLoggedCommand)),
	)
}

// outcome returns the outcome label of a command that failed with err.
func outcome(err error) string {
	switch {
	case errors.Is(err, context.Canceled):
		return outcomeCanceled
	case errors.Is(err, context.DeadlineExceeded) || mongo.IsTimeout(err):
		return outcomeTimeout
	}
	return outcomeError
}

func (c *Client) poolMonitor() *event.PoolMonitor {
	return &event.PoolMonitor{Event: c.poolEvent}
}

func (c *Client) poolEvent(e *event.PoolEvent) {
	ctx := context.Background()
	switch e.Type {
	case event.ConnectionCreated:
		c.metrics.open.Inc()
		c.stats.open.Add(1)
		c.log.LogAttrs(ctx, slog.LevelDebug, "kiev/clients/mongo: connection opened",
			slog.String("client", c.name), slog.String("server", e.Address), slog.Int64("connection", e.ConnectionID))
	case event.ConnectionClosed:
		c.metrics.open.Dec()
		c.stats.open.Add(-1)
		attrs := []slog.Attr{slog.String("client", c.name), slog.String("server", e.Address),
			slog.Int64("connection", e.ConnectionID), slog.String("reason", e.Reason)}
		if e.Error != nil {
			attrs = append(attrs, slog.String("err", e.Error.Error()))
		}
		c.log.LogAttrs(ctx, slog.LevelDebug, "kiev/clients/mongo: connection closed", attrs...)
	case event.ConnectionCheckedOut:
		c.metrics.inUse.Inc()
		c.stats.inUse.Add(1)
	case event.ConnectionCheckedIn:
		c.metrics.inUse.Dec()
		c.stats.inUse.Add(-1)
	case event.ConnectionCheckOutFailed:
		c.metrics.checkoutErr.WithLabelValues(e.Reason).Inc()
		c.stats.checkoutFailures.Add(1)
		level := slog.LevelDebug // the operation's deadline, or Close: the caller sees it
		attrs := []slog.Attr{slog.String("client", c.name), slog.String("server", e.Address), slog.String("reason", e.Reason)}
		if e.Error != nil {
			attrs = append(attrs, slog.String("err", e.Error.Error()))
		}
		if e.Reason == event.ReasonConnectionErrored {
			level = slog.LevelWarn
		}
		c.log.LogAttrs(ctx, level, "kiev/clients/mongo: cannot get a connection", attrs...)
	case event.ConnectionPoolCleared:
		c.metrics.poolCleared.Inc()
		c.stats.poolCleared.Add(1)
		c.log.LogAttrs(ctx, slog.LevelWarn, "kiev/clients/mongo: a server failed; its connections are closed and will be opened again when it answers",
			slog.String("client", c.name), slog.String("server", e.Address))
	}
}

func (c *Client) serverMonitor() *event.ServerMonitor {
	return &event.ServerMonitor{
		ServerDescriptionChanged: c.serverChanged,
		ServerClosed:             c.serverClosed,
	}
}

// available reports whether a server of that kind takes commands.
func available(kind string) bool { return kind != "" && kind != "Unknown" }

func (c *Client) serverChanged(e *event.ServerDescriptionChangedEvent) {
	addr := e.Address.String()
	up := available(e.NewDescription.Kind)
	c.mu.Lock()
	was, known := c.servers[addr]
	c.servers[addr] = up
	c.mu.Unlock()
	ctx := context.Background()
	switch {
	case up && !was:
		attrs := []slog.Attr{slog.String("client", c.name), slog.String("server", addr), slog.String("kind", e.NewDescription.Kind)}
		if e.NewDescription.SetName != "" {
			attrs = append(attrs, slog.String("replica_set", e.NewDescription.SetName))
		}
		c.log.LogAttrs(ctx, slog.LevelInfo, "kiev/clients/mongo: server available", attrs...)
	case !up && was:
		c.log.LogAttrs(ctx, slog.LevelWarn, "kiev/clients/mongo: server unreachable; commands to it fail until it answers again",
			slog.String("client", c.name), slog.String("server", addr))
	case !up && !known:
		c.log.LogAttrs(ctx, slog.LevelDebug, "kiev/clients/mongo: server not reached yet",
			slog.String("client", c.name), slog.String("server", addr))
	}
}

func (c *Client) serverClosed(e *event.ServerClosedEvent) {
	c.mu.Lock()
	delete(c.servers, e.Address.String())
	c.mu.Unlock()
}

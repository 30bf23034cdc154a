package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
)

// demoLog is where the demo's servers and clients log: a file, so that
// the story reads on its own, and a count of the lines by level, which
// the demo's last line reports.
type demoLog struct {
	slog.Handler
	file         *os.File
	lines, warns *atomic.Int64
	errs         *atomic.Int64
}

// newDemoLog logs to a new file in the temporary directory.
func newDemoLog() (*demoLog, error) {
	f, err := os.CreateTemp("", "kiev-quickstart-*.log")
	if err != nil {
		return nil, err
	}
	return &demoLog{
		Handler: slog.NewTextHandler(f, nil), file: f,
		lines: new(atomic.Int64), warns: new(atomic.Int64), errs: new(atomic.Int64),
	}, nil
}

// Handle counts the record and writes it to the file.
func (d *demoLog) Handle(ctx context.Context, r slog.Record) error {
	d.lines.Add(1)
	switch {
	case r.Level >= slog.LevelError:
		d.errs.Add(1)
	case r.Level >= slog.LevelWarn:
		d.warns.Add(1)
	}
	return d.Handler.Handle(ctx, r)
}

// WithAttrs and WithGroup keep the counts shared.
func (d *demoLog) WithAttrs(as []slog.Attr) slog.Handler {
	c := *d
	c.Handler = d.Handler.WithAttrs(as)
	return &c
}

func (d *demoLog) WithGroup(name string) slog.Handler {
	c := *d
	c.Handler = d.Handler.WithGroup(name)
	return &c
}

// summary says what was logged, and where.
func (d *demoLog) summary() string {
	d.file.Sync()
	return fmt.Sprintf("log: the servers and clients logged %d lines (%d warnings, %d errors), as a server's log shows them, to %s",
		d.lines.Load(), d.warns.Load(), d.errs.Load(), d.file.Name())
}

package main

// The client process (`streams -load`): it reads the servers' addresses and
// one cellSpec on stdin, measures that cell on a client of its own, prints
// one result line on stdout and exits. A process per cell, so that nothing
// a cell leaves behind (the 100,000 dropped streams above all) touches the
// next.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// The cells, in the order the report gives them.
const (
	cell1K        = "1KiB"
	cell16K       = "16KiB"
	cellOpenClose = "open-close"
	cellIdle      = "idle"
	cellSlow      = "slow"
	cellBulk      = "bulk"
	cellCancel    = "cancel"
	cellDrop      = "drop"
)

var allCells = []string{cell1K, cell16K, cellOpenClose, cellIdle, cellSlow, cellBulk, cellCancel, cellDrop}

// supports reports whether system takes part in cell. Raw TCP has one
// stream per connection and no unary calls: it is the limit of the
// throughput cells, and closing its connection is its cancel. kiev with
// a big budget is only for the idle cell.
func supports(system, cell string) bool {
	switch system {
	case sysRaw:
		return cell == cell1K || cell == cell16K || cell == cellCancel
	case sysKievBudget:
		return cell == cellIdle
	}
	return true
}

// cellSpec is one measurement of one system.
type cellSpec struct {
	Cell     string
	System   string
	Rep      int
	Warmup   time.Duration
	Duration time.Duration
	Callers  int // open-close: concurrent callers
	Idle     int // idle: streams held open
	Stalled  int // slow: streams that stop reading, in the second part
	Cancels  int // cancel: streams canceled, one after the other
	Drop     int // drop: streams opened and dropped
}

// result is what a cell measured: named figures (load.go's cells name
// them, report.go reads them).
type result struct {
	Spec   cellSpec
	Values map[string]float64
	Err    string `json:",omitempty"`
	// Note is the first error of the operations the cell counted as
	// failed (Values["errors"]) and went on after.
	Note string `json:",omitempty"`
}

// loadMain is the client process.
func loadMain(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	sc := bufio.NewScanner(stdin)
	var addrs serverAddrs
	var spec cellSpec
	for _, v := range []any{&addrs, &spec} {
		if !sc.Scan() {
			return fmt.Errorf("stdin ended early: %v", sc.Err())
		}
		if err := json.Unmarshal(sc.Bytes(), v); err != nil {
			return err
		}
	}
	res := result{Spec: spec, Values: map[string]float64{}}
	note, err := runCell(ctx, addrs, spec, res.Values)
	if err != nil {
		res.Err = err.Error()
	}
	res.Note = note
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		return err
	}
	// Exit when the coordinator closes stdin, once it has the line: a
	// process that exited at once could race its last line.
	_, err = io.Copy(io.Discard, stdin)
	return err
}

func runCell(ctx context.Context, addrs serverAddrs, spec cellSpec, v map[string]float64) (string, error) {
	c, err := dial(spec.System, addrs)
	if err != nil {
		return "", err
	}
	defer c.close()
	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	m := &meter{spec: spec, c: c, ctl: &control{addr: addrs.Control, hc: hc}, v: v,
		dial: func() (client, error) { return dial(spec.System, addrs) }}
	cells := map[string]func(context.Context) error{
		cell1K:        func(ctx context.Context) error { return m.throughput(ctx, 1<<10) },
		cell16K:       func(ctx context.Context) error { return m.throughput(ctx, 16<<10) },
		cellOpenClose: m.openClose,
		cellIdle:      m.idle,
		cellSlow:      m.slow,
		cellBulk:      m.bulk,
		cellCancel:    m.cancel,
		cellDrop:      m.drop,
	}
	run, ok := cells[spec.Cell]
	if !ok {
		return "", fmt.Errorf("unknown cell %q", spec.Cell)
	}
	err = run(ctx)
	return m.note, err
}

// meter measures one cell of one system.
type meter struct {
	spec cellSpec
	c    client
	ctl  *control
	dial func() (client, error) // another client, on a connection of its own

	mu   sync.Mutex         // guards the fields below while a cell's goroutines run
	v    map[string]float64 // the figures
	note string             // the first error the cell went on after
}

// smallSize is the message of the open-close, bulk-probe, idle and cancel
// cells: 16 bytes.
const smallSize = 16

// errTimeout is a wait that did not end within its bound.
var errTimeout = errors.New("timed out")

// waitFor polls cond every 10 ms until it holds, for at most limit.
func waitFor(ctx context.Context, limit time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return errTimeout
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

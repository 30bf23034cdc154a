// Command streams measures kiev's streams beside grpc-go's and a raw-TCP
// length-prefixed message stream, the cells of issue 32's benchmark, in one
// run with the systems alternated:
//
//   - one server stream of 1 KiB messages: messages/s and CPU per message,
//     client and server;
//   - one server stream of 16 KiB messages: bytes/s;
//   - open a stream, take its one message, close it, against a unary call,
//     at the same concurrency;
//   - 10,000 idle bidirectional streams on one connection: heap and
//     goroutines per stream on each side;
//   - a slow consumer: stream B's throughput beside a stream A that stopped
//     reading, against B alone; and what 1,000 stalled streams hold;
//   - unary p99 beside a bulk 16 KiB server stream on the same connection;
//   - cancel: from the client canceling to the handler seeing its ctx end;
//   - 100,000 streams dropped without Close: goroutines left.
//
// It prints a Markdown report on stdout.
//
//	cd bench && go run ./streams              # the full run, about 5 minutes
//	go run ./streams -systems grpc,raw-tcp    # some of the systems
//	go run ./streams -help                    # every knob
//
// Three kinds of process: this coordinator, one server process serving
// every system (`streams -serve`), and a client process per cell and
// system (`streams -load`), so that each side's CPU, heap and goroutines
// are its own and nothing one cell leaves behind touches the next.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kievrpc/kiev/bench/internal/proc"
)

func main() {
	os.Exit(streamsMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// config is the run's plan.
type config struct {
	systems []string
	cells   []string
	reps    int
	spec    cellSpec // the sizes and durations every cell gets
}

func streamsMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("streams", flag.ContinueOnError)
	fs.SetOutput(stderr)
	serve := fs.Bool("serve", false, "internal: run as the server process")
	load := fs.Bool("load", false, "internal: run as a client process")
	systems := fs.String("systems", strings.Join(availableSystems(), ","), "systems to run, comma-separated: "+strings.Join(allSystems, ", "))
	cells := fs.String("cells", strings.Join(allCells, ","), "cells to run, comma-separated")
	reps := fs.Int("reps", 3, "runs of every cell, systems alternated; the report gives median and min")
	warmup := fs.Duration("warmup", 300*time.Millisecond, "warm-up before each measured window")
	duration := fs.Duration("duration", 2*time.Second, "measured window of each timed cell")
	callers := fs.Int("callers", 64, "open-close: concurrent callers")
	idle := fs.Int("idle", 10000, "idle: bidirectional streams held open")
	stalled := fs.Int("stalled", 1000, "slow: streams that stop reading in its second part (0: skip it)")
	cancels := fs.Int("cancels", 1000, "cancel: streams canceled, after 50 not counted")
	drop := fs.Int("drop", 100000, "drop: streams opened and dropped without Close")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./streams [flags]\n\nMeasures kiev streams beside grpc-go streams and a raw-TCP message stream; prints Markdown.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch {
	case *serve:
		if err := serveMain(stdin, stdout); err != nil {
			fmt.Fprintln(stderr, "streams -serve:", err)
			return 1
		}
		return 0
	case *load:
		if err := loadMain(ctx, stdin, stdout); err != nil {
			fmt.Fprintln(stderr, "streams -load:", err)
			return 1
		}
		return 0
	}
	cfg := config{reps: *reps, spec: cellSpec{
		Warmup: *warmup, Duration: *duration, Callers: *callers,
		Idle: *idle, Stalled: *stalled, Cancels: *cancels, Drop: *drop,
	}}
	cfg, err := cfg.check(*systems, *cells)
	if err != nil {
		fmt.Fprintln(stderr, "streams:", err)
		return 2
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "streams:", err)
		return 1
	}
	rep, err := run(ctx, cfg, exe, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "streams:", err)
		return 1
	}
	var md strings.Builder
	rep.write(&md)
	io.WriteString(stdout, md.String())
	if rep.failed() {
		return 1
	}
	return 0
}

// check fills in the systems and cells, and checks every knob.
func (cfg config) check(systems, cells string) (config, error) {
	var err error
	if cfg.systems, err = list(systems, checkSystem); err != nil {
		return cfg, err
	}
	if cfg.cells, err = list(cells, checkCell); err != nil {
		return cfg, err
	}
	c := cfg.spec
	switch {
	case cfg.reps < 1:
		return cfg, errors.New("-reps must be at least 1")
	case c.Callers < 1 || c.Idle < 1 || c.Cancels < 1 || c.Drop < 1 || c.Stalled < 0:
		return cfg, errors.New("-callers, -idle, -cancels and -drop must be at least 1, -stalled at least 0")
	case c.Duration <= 0 || c.Warmup < 0:
		return cfg, errors.New("-duration must be positive and -warmup not negative")
	}
	return cfg, nil
}

// availableSystems are the systems this build can run.
func availableSystems() []string {
	var out []string
	for _, s := range allSystems {
		if s == sysKievBudget {
			continue // on request only: kiev's defaults open every stream of the idle cell
		}
		if checkSystem(s) == nil {
			out = append(out, s)
		}
	}
	return out
}

func checkCell(c string) error {
	if !slices.Contains(allCells, c) {
		return fmt.Errorf("unknown cell %q; the cells are %s", c, strings.Join(allCells, ", "))
	}
	return nil
}

func list(s string, check func(string) error) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if err := check(f); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty list %q", s)
	}
	return out, nil
}

func rotate(s []string, r int) []string {
	r %= len(s)
	return append(slices.Clone(s[r:]), s[:r]...)
}

// childTimeout bounds starting a process and a cell beyond its own
// windows.
const childTimeout = 60 * time.Second

// run measures every cell of every system, reps times, and returns the
// report. Each rep runs the cells in order and, within a cell, the systems
// starting from a different one.
func run(ctx context.Context, cfg config, exe string, stderr io.Writer) (*report, error) {
	rep := &report{cfg: cfg, started: time.Now()}
	srv, err := proc.Start(exec.Command(exe, "-serve"), stderr)
	if err != nil {
		return nil, err
	}
	defer srv.Stop(childTimeout)
	addrs, err := srv.ReadLine(childTimeout)
	if err != nil {
		return nil, fmt.Errorf("server process: %w", err)
	}
	for r := range cfg.reps {
		for _, cell := range cfg.cells {
			for _, sys := range rotate(cfg.systems, r) {
				if !supports(sys, cell) {
					continue
				}
				spec := cfg.spec
				spec.Cell, spec.System, spec.Rep = cell, sys, r
				t0 := time.Now()
				res, err := runOne(exe, addrs, spec, stderr)
				if err != nil { // the client process hung or died: the cell failed
					res = result{Spec: spec, Err: err.Error()}
				}
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				status := "ok"
				if res.Err != "" {
					status = "failed: " + res.Err
				}
				fmt.Fprintf(stderr, "rep %d/%d %-10s %-7s %5.1fs %s\n", r+1, cfg.reps, cell, sys, time.Since(t0).Seconds(), status)
				rep.results = append(rep.results, res)
			}
		}
	}
	rep.took = time.Since(rep.started)
	return rep, nil
}

// runOne runs one cell of one system in a client process of its own.
func runOne(exe, addrs string, spec cellSpec, stderr io.Writer) (result, error) {
	var res result
	cli, err := proc.Start(exec.Command(exe, "-load"), stderr)
	if err != nil {
		return res, err
	}
	defer cli.Stop(childTimeout)
	b, err := json.Marshal(spec)
	if err != nil {
		return res, err
	}
	if _, err := io.WriteString(cli.Stdin, addrs+"\n"+string(b)+"\n"); err != nil {
		return res, fmt.Errorf("client process: %w", err)
	}
	line, err := cli.ReadLine(2*(spec.Warmup+spec.Duration) + childTimeout)
	if err != nil {
		return res, fmt.Errorf("%s %s: client process: %w", spec.Cell, spec.System, err)
	}
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		return res, fmt.Errorf("client process printed %q: %w", line, err)
	}
	return res, nil
}

// Command idle measures what an idle connection costs a server: kiev's
// beside grpc-go's and net/rpc's, in one run with the systems alternated
// (issue 36, item 2).
//
// For each system, it starts a server process of its own and opens N
// connections to it as that system's own client does (kiev.Dial,
// grpc.NewClient then Connect until Ready, rpc.Dial: one connection
// each), makes one call on each so that every connection is fully set up,
// leaves them idle for a few heartbeat intervals, and asks the server for
// its live heap and goroutines after two runtime.GC, against the same
// before the connections. It prints a Markdown report on stdout: heap,
// goroutine stacks and goroutines per connection, min and median over the
// reps, and kiev's ratio to each peer.
//
//	cd bench && go run ./idle              # 5,000 connections per system, 3 reps, about 2 minutes
//	go run ./idle -conns 1000 -reps 5      # other counts
//	go run ./idle -help                    # every knob
//
// Two kinds of process: this one, which is the client of every system, and
// a server process per system and rep (`idle -serve <system>`), so that
// the heap measured is the server's alone and nothing one run leaves
// behind touches the next. The server answers over its stdin and stdout,
// outside the systems under test.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(idleMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// The systems, in the order the tables list them.
const (
	sysKiev   = "kiev"
	sysGRPC   = "grpc"
	sysNetRPC = "net/rpc"
)

var allSystems = []string{sysKiev, sysGRPC, sysNetRPC}

// config is the run's plan.
type config struct {
	systems []string
	conns   int           // connections per system
	idle    time.Duration // how long they stay idle before the measurement
	reps    int
	note    string // why conns is lower than asked, if it is
}

func idleMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("idle", flag.ContinueOnError)
	fs.SetOutput(stderr)
	serve := fs.String("serve", "", "internal: run as the server process of this system")
	systems := fs.String("systems", strings.Join(allSystems, ","), "systems to run, comma-separated: "+strings.Join(allSystems, ", "))
	conns := fs.Int("conns", 5000, "idle connections per system; lowered to what the open-file limit allows")
	idle := fs.Duration("idle", 3*time.Second, "how long the connections stay idle before the measurement (kiev pings every 1s)")
	reps := fs.Int("reps", 3, "runs of every system, alternated; the report gives median and min")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./idle [flags]\n\nMeasures a server's heap and goroutines per idle connection: kiev, grpc-go and net/rpc; prints Markdown.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *serve != "" {
		if err := serveMain(*serve, stdin, stdout); err != nil {
			fmt.Fprintln(stderr, "idle -serve:", err)
			return 1
		}
		return 0
	}
	cfg, err := check(*systems, *conns, *idle, *reps)
	if err != nil {
		fmt.Fprintln(stderr, "idle:", err)
		return 2
	}
	if cfg.note != "" {
		fmt.Fprintln(stderr, "idle:", cfg.note)
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "idle:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, cfg, exe, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "idle:", err)
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

// check makes the plan out of the flags, with conns bounded by the
// open-file limit.
func check(systems string, conns int, idle time.Duration, reps int) (config, error) {
	cfg := config{conns: conns, idle: idle, reps: reps}
	for _, s := range strings.Split(systems, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !slices.Contains(allSystems, s) {
			return cfg, fmt.Errorf("unknown system %q; the systems are %s", s, strings.Join(allSystems, ", "))
		}
		cfg.systems = append(cfg.systems, s)
	}
	switch {
	case len(cfg.systems) == 0:
		return cfg, fmt.Errorf("-systems names no system; the systems are %s", strings.Join(allSystems, ", "))
	case conns < 1 || reps < 1:
		return cfg, errors.New("-conns and -reps must be at least 1")
	case idle < 0:
		return cfg, errors.New("-idle must not be negative")
	}
	if most := maxConns(); cfg.conns > most {
		cfg.note = fmt.Sprintf("-conns %d lowered to %d: this process may open %d files (ulimit -n), and keeps %d for itself; raise the limit to measure more",
			cfg.conns, most, most+fdSpare, fdSpare)
		cfg.conns = most
	}
	if cfg.conns < 1 {
		return cfg, fmt.Errorf("the open-file limit (ulimit -n) leaves no room for a connection beyond the %d files this process keeps; raise it", fdSpare)
	}
	return cfg, nil
}

// fdSpare is the files a process keeps beyond its connections: its
// executable, pipes, the listener, the runtime's.
const fdSpare = 128

// maxConns is the most connections one process can hold under its
// open-file limit. Go raises the soft limit to the hard one when a program
// starts, and the server process is this program, so the same bound holds
// for it.
func maxConns() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 1 << 30
	}
	return int(rl.Cur) - fdSpare
}

// rotate is s starting from its r-th system.
func rotate(s []string, r int) []string {
	r %= len(s)
	return append(slices.Clone(s[r:]), s[:r]...)
}

// run measures every system reps times, each rep starting from a
// different system.
func run(ctx context.Context, cfg config, exe string, stderr io.Writer) (*report, error) {
	rep := &report{cfg: cfg, started: time.Now(), version: kievVersion()}
	for r := range cfg.reps {
		for _, sys := range rotate(cfg.systems, r) {
			t0 := time.Now()
			s, err := measure(ctx, exe, sys, cfg.conns, cfg.idle, stderr)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			s.system, s.rep = sys, r
			if err != nil {
				s.err = err.Error()
				fmt.Fprintf(stderr, "rep %d/%d %-8s %5.1fs failed: %v\n", r+1, cfg.reps, sys, time.Since(t0).Seconds(), err)
			} else {
				fmt.Fprintf(stderr, "rep %d/%d %-8s %5.1fs heap %s per connection, %.2f goroutines\n",
					r+1, cfg.reps, sys, time.Since(t0).Seconds(), kib(s.heapPerConn()), s.goroutinesPerConn())
			}
			rep.samples = append(rep.samples, s)
		}
	}
	rep.took = time.Since(rep.started)
	return rep, nil
}

// Command compare measures kiev beside net/rpc, grpc-go, a raw-TCP
// pipelined echo of the same bytes, and mux-floor (that echo plus only what
// every multiplexed RPC on goroutines must do: floor.go), on the same Echo
// method, in one run:
// closed-loop throughput and latency at several concurrencies and payloads,
// open-loop latency at fixed fractions of each system's own maximum, and a
// run pinned to one core per side. It prints a Markdown report on stdout
// and draws PNG charts.
//
//	cd bench && go run ./compare            # the full run, about 8 minutes
//	go run ./compare -quick                 # a smoke test, about 30 seconds
//	go run ./compare -help                  # every knob
//
// kiev with compression, kiev-zstd and kiev-s2, runs when -systems names
// it, beside kiev-msgpack for the comparison; the report then gives bytes
// on the wire and calls/s against kiev-msgpack, cell by cell:
//
//	go run ./compare -systems kiev-msgpack,kiev-zstd,kiev-s2 -payloads small,16KiB,16KiB-json -pinned=false
//
// rpcx, arpc, kitex and kitex-mux run when -systems names them: they live
// in bench/peers, a module of their own, whose program compare builds and
// runs as a second pair of server and client processes (peers.go); where
// it does not build, they are skipped with a message:
//
//	go run ./compare -systems kiev-msgpack,rpcx,arpc,kitex,kitex-mux,net/rpc,grpc,mux-floor -payloads small,581B,16KiB
//
// Three processes: this coordinator, a server process serving every system
// (`compare -serve`) and a client process generating the load (`compare
// -load`), so that each side's allocations and CPU time are measured alone.
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
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kievrpc/kiev/bench/internal/loadgen"
	"github.com/kievrpc/kiev/bench/internal/proc"
)

func main() {
	os.Exit(compareMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// config is the whole run's plan.
type config struct {
	systems      []string
	payloads     []string
	callers      []int
	loads        []int // open loop, % of each system's maximum
	openPayloads []string
	warmup       time.Duration
	duration     time.Duration
	openDuration time.Duration
	repeats      int
	pinned       bool
	pinCallers   int
	out          string
	quick        bool
	peersDir     string // bench/peers, if not found from the working directory
	tmp          string // a directory for the peers' program
}

func compareMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	serve := fs.Bool("serve", false, "internal: run as the server process")
	load := fs.Bool("load", false, "internal: run as the client process")
	systems := fs.String("systems", strings.Join(allSystems, ","), "systems to run, comma-separated; besides the default: "+strings.Join(append(slices.Clone(optionalSystems), peerSystems...), ", "))
	payloads := fs.String("payloads", strings.Join(allPayloads, ","), "payloads to run, comma-separated")
	callers := fs.String("callers", "1,16,128,1024", "closed loop: concurrent callers, comma-separated")
	loads := fs.String("loads", "25,50,75,90", "open loop: offered load as % of each system's own maximum")
	openPayloads := fs.String("open-payloads", paySmall, "payloads of the open-loop runs")
	warmup := fs.Duration("warmup", 200*time.Millisecond, "warm-up before each measured window")
	duration := fs.Duration("duration", 700*time.Millisecond, "closed loop: measured window of each cell")
	openDuration := fs.Duration("open-duration", time.Second, "open loop: measured window of each cell")
	repeats := fs.Int("repeats", 3, "repeats of every cell, systems interleaved; medians are reported")
	pinned := fs.Bool("pinned", true, "also run with server and client pinned to one core each (GOMAXPROCS=1, taskset)")
	pinCallers := fs.Int("pinned-callers", 128, "callers of the pinned run (small payload)")
	out := fs.String("out", "out", "directory for the charts and results.md")
	quick := fs.Bool("quick", false, "a smoke test: 1 repeat, short windows, fewer cells")
	peersDir := fs.String("peers-dir", "", "the peers' module (rpcx, arpc, kitex, kitex-mux), built when -systems names one; default bench/peers")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./compare [flags]\n\nMeasures kiev beside net/rpc, grpc-go and a raw-TCP echo, and rpcx, arpc and kitex (bench/peers)\nwhen -systems names them; prints Markdown, writes charts.\n\n")
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
			fmt.Fprintln(stderr, "compare -serve:", err)
			return 1
		}
		return 0
	case *load:
		if err := loadgen.Main(ctx, stdin, stdout, newDialer); err != nil {
			fmt.Fprintln(stderr, "compare -load:", err)
			return 1
		}
		return 0
	}

	cfg := config{
		warmup: *warmup, duration: *duration, openDuration: *openDuration,
		repeats: *repeats, pinned: *pinned, pinCallers: *pinCallers, out: *out, quick: *quick,
		peersDir: *peersDir,
	}
	var err error
	if cfg.systems, err = list(*systems, checkSystem); err == nil {
		if cfg.payloads, err = list(*payloads, checkPayload); err == nil {
			if cfg.openPayloads, err = list(*openPayloads, checkPayload); err == nil {
				if cfg.callers, err = ints(*callers, 1, 100000); err == nil {
					cfg.loads, err = ints(*loads, 1, 100)
				}
			}
		}
	}
	if err == nil && cfg.repeats < 1 {
		err = errors.New("-repeats must be at least 1")
	}
	if err != nil {
		fmt.Fprintln(stderr, "compare:", err)
		return 2
	}
	if cfg.quick {
		cfg.repeats = 1
		cfg.warmup, cfg.duration, cfg.openDuration = 100*time.Millisecond, 200*time.Millisecond, 300*time.Millisecond
		cfg.callers = []int{1, 16, 128}
		cfg.payloads = intersect(cfg.payloads, []string{paySmall, pay16K})
		cfg.loads = []int{50}
	}
	cfg.openPayloads = intersect(cfg.openPayloads, cfg.payloads)
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "compare:", err)
		return 1
	}
	if cfg.tmp, err = os.MkdirTemp("", "compare-"); err != nil {
		fmt.Fprintln(stderr, "compare:", err)
		return 1
	}
	defer os.RemoveAll(cfg.tmp)
	peersExe, err := preparePeers(&cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "compare:", err)
		return 1
	}
	rep, err := run(ctx, cfg, procs{compare: exe, peers: peersExe}, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "compare:", err)
		return 1
	}
	files, err := rep.charts(cfg.out)
	if err != nil {
		fmt.Fprintln(stderr, "compare: charts:", err)
		return 1
	}
	var md strings.Builder
	rep.write(&md, files)
	io.WriteString(stdout, md.String())
	if err := os.WriteFile(filepath.Join(cfg.out, "results.md"), []byte(md.String()), 0o644); err != nil {
		fmt.Fprintln(stderr, "compare:", err)
		return 1
	}
	return 0
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

func ints(s string, lo, hi int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("%q: want integers from %d to %d, comma-separated", s, lo, hi)
		}
		out = append(out, n)
	}
	return out, nil
}

func intersect(a, keep []string) []string {
	var out []string
	for _, s := range a {
		if slices.Contains(keep, s) {
			out = append(out, s)
		}
	}
	return out
}

// Kinds of cell.
const (
	kindClosed = "closed"
	kindOpen   = "open"
	kindPinned = "pinned"
)

// cell is one planned measurement.
type cell struct {
	kind string
	load int // open loop: % of the system's maximum
	spec loadgen.Spec
}

func (c cell) cost() time.Duration { return c.spec.Warmup + c.spec.Duration }

// procs are the programs of the server and client processes: compare
// itself, and the peers' program if a peer runs.
type procs struct {
	compare string
	peers   string // "" if no peer runs
}

// run measures every cell and returns the report.
func run(ctx context.Context, cfg config, exe procs, stderr io.Writer) (*report, error) {
	rep := &report{cfg: cfg, started: time.Now(), results: make(map[cellKey][]loadgen.Result)}
	closed := closedCells(cfg)
	open := 0
	for range cfg.repeats {
		open += len(cfg.openPayloads) * len(cfg.loads) * len(cfg.systems)
	}
	pin, whyNot := canPin()
	pinCells := 0
	if cfg.pinned && slices.Contains(cfg.payloads, paySmall) {
		if pin {
			pinCells = cfg.repeats * len(cfg.systems)
		} else {
			rep.pinNote = whyNot
		}
	}
	total := time.Duration(len(closed))*(cfg.warmup+cfg.duration) +
		time.Duration(open)*(cfg.warmup+cfg.openDuration) +
		time.Duration(pinCells)*(cfg.warmup+cfg.duration)
	bar := newProgress(stderr, total)
	defer bar.finish()

	// Closed loop, then open loop at fractions of each system's maximum,
	// on one pair of processes.
	sess, err := startSession(exe, false, stderr)
	if err != nil {
		return nil, err
	}
	defer sess.stop()
	for _, c := range closed {
		if err := sess.measure(ctx, c, rep, bar); err != nil {
			return nil, err
		}
	}
	for r := range cfg.repeats {
		for _, p := range cfg.openPayloads {
			for _, load := range cfg.loads {
				for _, sys := range rotate(cfg.systems, r) {
					max := rep.maxQPS(sys, p)
					if max <= 0 {
						return nil, fmt.Errorf("%s %s: no closed-loop maximum to take %d%% of", sys, p, load)
					}
					c := cell{kind: kindOpen, load: load, spec: loadgen.Spec{
						System: sys, Payload: p, Rate: max * float64(load) / 100,
						Warmup: cfg.warmup, Duration: cfg.openDuration,
					}}
					if err := sess.measure(ctx, c, rep, bar); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	sess.stop()

	// Pinned: one core each, GOMAXPROCS=1, as kitex-benchmark runs.
	if pinCells > 0 {
		ps, err := startSession(exe, true, stderr)
		if err != nil {
			return nil, err
		}
		defer ps.stop()
		for r := range cfg.repeats {
			for _, sys := range rotate(cfg.systems, r) {
				c := cell{kind: kindPinned, spec: loadgen.Spec{System: sys, Payload: paySmall, Callers: cfg.pinCallers, Warmup: cfg.warmup, Duration: cfg.duration}}
				if err := ps.measure(ctx, c, rep, bar); err != nil {
					return nil, err
				}
			}
		}
		ps.stop()
	}
	rep.took = time.Since(rep.started)
	return rep, nil
}

// closedCells plans the closed-loop cells: every repeat runs every cell
// once, and each repeat starts the systems in a different order, so that
// drift on a shared machine spreads over all of them.
func closedCells(cfg config) []cell {
	var out []cell
	for r := range cfg.repeats {
		for _, p := range cfg.payloads {
			for _, n := range cfg.callers {
				for _, sys := range rotate(cfg.systems, r) {
					out = append(out, cell{kind: kindClosed, spec: loadgen.Spec{
						System: sys, Payload: p, Callers: n, Warmup: cfg.warmup, Duration: cfg.duration,
					}})
				}
			}
		}
	}
	return out
}

func rotate(s []string, r int) []string {
	r %= len(s)
	return append(slices.Clone(s[r:]), s[:r]...)
}

// canPin reports whether the pinned run can run here.
func canPin() (bool, string) {
	if runtime.NumCPU() < 2 {
		return false, "skipped: needs 2 CPUs"
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return false, "skipped: taskset not found (Debian package util-linux)"
	}
	return true, ""
}

// session is a server process and a client process, and another pair
// for the peers if they run.
type session struct {
	server, client *proc.Process
	peers          *session // nil if no peer runs
}

func startSession(exe procs, pinned bool, stderr io.Writer) (*session, error) {
	s, err := startPair(exe.compare, pinned, stderr)
	if err != nil || exe.peers == "" {
		return s, err
	}
	if s.peers, err = startPair(exe.peers, pinned, stderr); err != nil {
		s.stop()
		return nil, fmt.Errorf("the peers' processes: %w", err)
	}
	return s, nil
}

// startPair starts exe's server process, then its client process, and
// hands the client the server's addresses.
func startPair(exe string, pinned bool, stderr io.Writer) (*session, error) {
	last := strconv.Itoa(runtime.NumCPU() - 1)
	srv, err := startChild(exe, []string{"-serve"}, pinned, last, stderr)
	if err != nil {
		return nil, err
	}
	line, err := srv.ReadLine(childTimeout)
	if err != nil {
		srv.Stop(childTimeout)
		return nil, fmt.Errorf("server process: %w", err)
	}
	cli, err := startChild(exe, []string{"-load"}, pinned, "0", stderr)
	if err != nil {
		srv.Stop(childTimeout)
		return nil, err
	}
	s := &session{server: srv, client: cli}
	if _, err := io.WriteString(cli.Stdin, line+"\n"); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *session) measure(ctx context.Context, c cell, rep *report, bar *progress) error {
	bar.show(c)
	client := s.client
	if isPeer(c.spec.System) {
		client = s.peers.client
	}
	b, err := json.Marshal(c.spec)
	if err != nil {
		return err
	}
	if _, err := client.Stdin.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("client process: %w", err)
	}
	// A cell takes its warm-up and window, plus the drain of an open loop.
	line, err := client.ReadLine(c.cost() + childTimeout)
	if err != nil {
		return fmt.Errorf("%s %s: client process: %w", c.spec.System, c.spec.Payload, err)
	}
	var res loadgen.Result
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		return fmt.Errorf("client process printed %q: %w", line, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	rep.add(c, res)
	bar.done(c)
	return nil
}

func (s *session) stop() {
	if s.peers != nil {
		s.peers.stop()
	}
	s.client.Stop(childTimeout)
	s.server.Stop(childTimeout)
}

// childTimeout bounds starting a process and any answer beyond a cell's
// own duration.
const childTimeout = 20 * time.Second

// startChild starts exe with args, pinned to cpu with GOMAXPROCS=1 if pin.
func startChild(exe string, args []string, pin bool, cpu string, stderr io.Writer) (*proc.Process, error) {
	cmd := exec.Command(exe, args...)
	if pin {
		cmd = exec.Command("taskset", append([]string{"-c", cpu, exe}, args...)...)
		cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	}
	return proc.Start(cmd, stderr)
}

// Command overload measures goodput under overload: kiev as a user gets
// it (no shed options), kiev with a fixed worker pool, kiev with its
// overload scheduler disabled, net/rpc and grpc-go, serving the same
// handlers, under open-loop Poisson load with deadlines and retries.
//
// Four workloads, each run for every system, the systems taking turns
// cell by cell:
//
//   - cpu: a handler of known capacity X (8 slots held 2 ms each) at 0.5 to
//     5 × X, and a spike;
//   - io: handlers waiting on a dependency of 64 connections with a 20 ms
//     service time, at 0.5 to 5 × its capacity, and 2,000 callers in a
//     closed loop on an unbounded dependency;
//   - mixed: a method that burns CPU beside one that waits on the
//     dependency, which slows tenfold mid-run;
//   - neighbour: eleven connections, one of them flooding.
//
// Run it from the bench directory:
//
//	go run ./overload -pin       # the full run, about 10 minutes
//	go run ./overload -quick     # a smoke test, about 3 minutes
//
// It prints a Markdown report on stdout, progress on stderr, and draws
// charts into out/.
//
// The program is its own server: for every cell it starts itself again
// as `overload -serve=<system>`, a separate process listening on
// 127.0.0.1:0, offers the load from this process, reads the server's
// counters through the child's stdin and stdout, and stops it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kievrpc/kiev/shed"
)

// The workloads, in the order they run.
const (
	wlCPU       = "cpu"
	wlIO        = "io"
	wlMixed     = "mixed"
	wlNeighbour = "neighbour"
)

var allWorkloads = []string{wlCPU, wlIO, wlMixed, wlNeighbour}

// config is the benchmark's settings, from the flags.
type config struct {
	workloads []string
	systems   []string
	warmup    time.Duration // unmeasured start of each cell
	phase     time.Duration // measured length of each steady cell
	deadline  time.Duration // per attempt
	attempts  int           // in all, per user request
	shed      shed.Options  // kiev-fixed's
	bareKiev  bool          // kiev clients without their retries and throttling
	out       string
	seed      uint64
	timeout   time.Duration // the whole run
	pin       bool          // servers on the last CPU, generator on the others
	bucket    time.Duration // timeline resolution
	window    time.Duration // recovery window

	cpu       cpuConfig
	io        ioConfig
	mixed     mixedConfig
	neighbour neighbourConfig
	cold      coldConfig
}

// cpuConfig is the cpu workload's: a handler of known capacity X.
type cpuConfig struct {
	loads       []float64 // steady phases, ×X
	slots       int
	slotTime    time.Duration
	spikeLow    float64
	spikeHigh   float64
	spikeBefore time.Duration
	spikeDur    time.Duration
	spikeAfter  time.Duration
}

// capacity is X, in calls per second.
func (c cpuConfig) capacity() float64 { return float64(c.slots) / c.slotTime.Seconds() }

// ioConfig is the io workload's: a dependency of slots connections.
type ioConfig struct {
	loads   []float64 // ×C, the dependency's capacity
	slots   int
	service time.Duration
	callers int           // the closed-loop cell's
	sleep   time.Duration // the closed-loop cell's unbounded dependency
}

func (c ioConfig) capacity() float64 { return float64(c.slots) / c.service.Seconds() }

// mixedConfig is the mixed workload's: Burn beside Work on the io
// workload's dependency, which slows down mid-run.
type mixedConfig struct {
	before   time.Duration // measured, the dependency fast
	slow     time.Duration // measured, the dependency slow
	settle   float64       // the share of the slow phase before the settled window
	slowdown float64       // the dependency's service time is multiplied by it
	cpuWork  time.Duration // CPU time of one Burn call, calibrated
	cpuLoad  float64       // Burn's offered load, as a share of one CPU
	ioLoad   float64       // Work's offered load, ×C (the fast dependency's capacity)
}

// neighbourConfig is the neighbour workload's: on the cpu workload's
// handler, honest clients within their share and one flooder.
type neighbourConfig struct {
	clients int     // honest clients; the flooder is one more
	load    float64 // each honest client's offer, × its share (X / (clients+1))
	flood   float64 // the flooder's, × its share
}

func main() {
	os.Exit(overloadMain(os.Args[1:], os.Stdout, os.Stderr))
}

// overloadMain runs the program with args and returns its exit code.
func overloadMain(args []string, stdout, stderr io.Writer) int {
	cfg, role, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "overload: %v\n", err)
		return 2
	}
	switch {
	case role.noise > 0:
		burnNoise(role.noise)
		return 0
	case role.calibrate > 0:
		fmt.Fprintf(stdout, "iters %d\n", calibrate(role.calibrate))
		// Wait for the coordinator to stop it: a process that exits
		// at once may be seen gone before its line is read.
		io.Copy(io.Discard, os.Stdin)
		return 0
	case role.serve.system != "":
		if err := serve(role.serve, os.Stdin, stdout); err != nil {
			fmt.Fprintf(stderr, "overload -serve=%s: %v\n", role.serve.system, err)
			return 1
		}
		return 0
	}

	// The generator makes garbage at a high rate and scans many
	// goroutine stacks; collect less often, so that it leaves the CPU to
	// the server. Memory is not the constraint here.
	debug.SetGCPercent(400)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "overload: %v\n", err)
		return 1
	}
	if cfg.pin {
		if err := pinSelf(exe, args); err != nil {
			fmt.Fprintf(stderr, "overload: -pin: %v\n", err)
			return 1
		}
	}
	start := time.Now()
	rep, err := run(ctx, cfg, exe, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "overload: %v\n", err)
		return 1
	}
	rep.write(stdout)
	files, err := rep.charts(cfg.out)
	if err != nil {
		fmt.Fprintf(stderr, "overload: charts: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "\nCharts: %s\n", strings.Join(files, ", "))
	fmt.Fprintf(stderr, "done in %v\n", time.Since(start).Round(time.Second))
	return 0
}

// role is what a process started by the coordinator does instead of
// running the benchmark.
type role struct {
	serve     serverConfig  // serve.system set: a server process
	calibrate time.Duration // positive: print the rounds of burn that take this long, and exit
	noise     time.Duration // positive: burn a CPU this long, rest as long, until killed
}

func parseFlags(args []string, stderr io.Writer) (config, role, error) {
	fs := flag.NewFlagSet("overload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var r role
	workloads := fs.String("workloads", strings.Join(allWorkloads, ","), "workloads to run, in order: some of "+strings.Join(allWorkloads, ", "))
	systems := fs.String("systems", strings.Join(allSystems, ","), "systems to measure, in order")
	quick := fs.Bool("quick", false, "very short phases, for a smoke test (flags given explicitly win)")
	fs.DurationVar(&cfg.warmup, "warmup", 500*time.Millisecond, "unmeasured start of each cell")
	fs.DurationVar(&cfg.phase, "phase", 4*time.Second, "measured length of each steady cell (cpu, io, neighbour)")
	fs.DurationVar(&cfg.deadline, "deadline", time.Second, "deadline of each attempt")
	fs.IntVar(&cfg.attempts, "attempts", 3, "attempts per user request, in all; only timeouts are retried")
	fs.IntVar(&cfg.shed.Workers, "shed-workers", 8, "kiev-fixed's scheduler: Workers")
	fs.IntVar(&cfg.shed.QueueSize, "shed-queue", 256, "kiev-fixed's scheduler: QueueSize")
	fs.DurationVar(&cfg.shed.MaxWait, "shed-maxwait", 100*time.Millisecond, "kiev-fixed's scheduler: MaxWait")
	kievClient := fs.String("kiev-client", "default", "kiev client: default (its retry budget and adaptive throttling on, as shipped) or bare (both off: only the server's scheduler acts)")
	fs.StringVar(&cfg.out, "out", "out", "directory for the PNG charts")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the arrival process; every system gets the same arrivals")
	fs.DurationVar(&cfg.timeout, "timeout", 30*time.Minute, "bound on the whole run")
	fs.BoolVar(&cfg.pin, "pin", false, "pin each server process to the last CPU and the load generator to the others (Linux, needs taskset), so they do not preempt each other")

	loads := fs.String("loads", "0.5,1,2,3,5", "cpu: steady phases, user load as multiples of X")
	fs.IntVar(&cfg.cpu.slots, "slots", 8, "cpu: handler slots (concurrent work units); in a server process, the dependency's")
	fs.DurationVar(&cfg.cpu.slotTime, "slot", 2*time.Millisecond, "cpu: time each call holds a slot; in a server process, the dependency's service time")
	fs.Float64Var(&cfg.cpu.spikeLow, "spike-low", 0.8, "cpu: load before and after the spike, ×X")
	fs.Float64Var(&cfg.cpu.spikeHigh, "spike-high", 3, "cpu: load of the spike, ×X")
	fs.DurationVar(&cfg.cpu.spikeBefore, "spike-before", 2*time.Second, "cpu: length of the low load before the spike")
	fs.DurationVar(&cfg.cpu.spikeDur, "spike", 2*time.Second, "cpu: length of the spike")
	fs.DurationVar(&cfg.cpu.spikeAfter, "spike-after", 3*time.Second, "cpu: length of the low load after the spike")

	ioLoads := fs.String("io-loads", "0.5,0.9,2,3,5", "io: steady phases, user load as multiples of the dependency's capacity C")
	fs.IntVar(&cfg.io.slots, "io-slots", 64, "io: the dependency's connections")
	fs.DurationVar(&cfg.io.service, "io-service", 20*time.Millisecond, "io: the dependency's service time")
	fs.IntVar(&cfg.io.callers, "io-callers", 2000, "io: callers of the closed-loop cell (0: no such cell)")
	fs.DurationVar(&cfg.io.sleep, "io-sleep", 50*time.Millisecond, "io: each closed-loop call's wait on an unbounded dependency")

	fs.DurationVar(&cfg.mixed.before, "mixed-before", 4*time.Second, "mixed: measured length before the dependency slows")
	fs.DurationVar(&cfg.mixed.slow, "mixed-slow", 6*time.Second, "mixed: measured length with the dependency slow")
	fs.Float64Var(&cfg.mixed.settle, "mixed-settle", 0.4, "mixed: share of the slow phase left out of its settled window")
	fs.Float64Var(&cfg.mixed.slowdown, "mixed-slowdown", 10, "mixed: the dependency's service time is multiplied by this")
	fs.DurationVar(&cfg.mixed.cpuWork, "mixed-cpu-work", 200*time.Microsecond, "mixed: CPU time of one Burn call (calibrated on the server's CPU)")
	fs.Float64Var(&cfg.mixed.cpuLoad, "mixed-cpu-load", 0.5, "mixed: Burn's offered load, as a share of one CPU")
	fs.Float64Var(&cfg.mixed.ioLoad, "mixed-io-load", 1, "mixed: Work's offered load, × the fast dependency's capacity")

	fs.IntVar(&cfg.neighbour.clients, "neighbours", 10, "neighbour: honest clients, each on a connection of its own, beside one flooder")
	fs.Float64Var(&cfg.neighbour.load, "neighbour-load", 0.8, "neighbour: each honest client's load, × its share of X")
	fs.Float64Var(&cfg.neighbour.flood, "flood", 10, "neighbour: the flooder's load, × its share of X")

	coldLoads := fs.String("cold-loads", "5", "iocold: the surge's load, as multiples of the io dependency's capacity C")
	fs.IntVar(&cfg.cold.reps, "reps", 10, "iocold: runs of every cell (minimum and median reported)")
	fs.StringVar(&cfg.cold.noise, "noise", "both", "iocold: quiet, noisy (a competing CPU-bound process and a front-loaded burst) or both")
	fs.BoolVar(&cfg.cold.warm, "cold-warm", true, "iocold: also run each surge after a -warmup at its load")
	fs.Float64Var(&cfg.cold.burst, "burst", 3, "iocold, noisy: the front-loaded burst, × the cell's rate")
	fs.DurationVar(&cfg.cold.burstDur, "burst-len", 50*time.Millisecond, "iocold, noisy: the front-loaded burst's length")
	fs.DurationVar(&cfg.cold.duty, "noise-duty", 100*time.Millisecond, "iocold, noisy: the competing process burns a CPU this long, then rests as long")

	serveSys := fs.String("serve", "", "server process only: serve this system (used by the coordinator)")
	catchUp := fs.Duration("catchup", -1, "server process only: see slot.hold (default: the service time)")
	fs.IntVar(&r.serve.burnIters, "burn-iters", 0, "server process only: rounds of burn per Burn call")
	fs.DurationVar(&r.calibrate, "calibrate", 0, "calibration process only: print the rounds of burn that take this long")
	fs.DurationVar(&r.noise, "noise-burn", 0, "noise process only: burn a CPU this long, rest as long, until killed")
	if err := fs.Parse(args); err != nil {
		return cfg, r, err
	}
	if fs.NArg() > 0 {
		return cfg, r, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.bucket, cfg.window = 100*time.Millisecond, 200*time.Millisecond
	if r.calibrate > 0 || r.noise > 0 {
		return cfg, r, nil
	}
	if *serveSys != "" {
		if !slices.Contains(knownSystems, *serveSys) {
			return cfg, r, fmt.Errorf("-serve=%s: unknown system; want one of %s", *serveSys, strings.Join(knownSystems, ", "))
		}
		r.serve.system, r.serve.slots, r.serve.service, r.serve.catchUp, r.serve.shed = *serveSys, cfg.cpu.slots, cfg.cpu.slotTime, *catchUp, cfg.shed
		if r.serve.catchUp < 0 {
			r.serve.catchUp = r.serve.service
		}
		return cfg, r, validateServer(r.serve)
	}
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, q := range []struct {
			flag string
			d    *time.Duration
			v    time.Duration
		}{
			{"warmup", &cfg.warmup, 200 * time.Millisecond},
			{"phase", &cfg.phase, 500 * time.Millisecond},
			{"spike-before", &cfg.cpu.spikeBefore, 500 * time.Millisecond},
			{"spike", &cfg.cpu.spikeDur, 500 * time.Millisecond},
			{"spike-after", &cfg.cpu.spikeAfter, time.Second},
			{"mixed-before", &cfg.mixed.before, 500 * time.Millisecond},
			{"mixed-slow", &cfg.mixed.slow, time.Second},
		} {
			if !set[q.flag] {
				*q.d = q.v
			}
		}
	}
	switch *kievClient {
	case "default":
	case "bare":
		cfg.bareKiev = true
	default:
		return cfg, r, fmt.Errorf("-kiev-client=%s: want default or bare", *kievClient)
	}
	var err error
	if cfg.workloads, err = names("-workloads", *workloads, append(slices.Clip(allWorkloads), wlCold)); err != nil {
		return cfg, r, err
	}
	if cfg.systems, err = names("-systems", *systems, knownSystems); err != nil {
		return cfg, r, err
	}
	if cfg.cpu.loads, err = parseLoads("-loads", *loads); err != nil {
		return cfg, r, err
	}
	if cfg.io.loads, err = parseLoads("-io-loads", *ioLoads); err != nil {
		return cfg, r, err
	}
	if cfg.cold.loads, err = parseLoads("-cold-loads", *coldLoads); err != nil {
		return cfg, r, err
	}
	if !slices.Contains([]string{"quiet", "noisy", "both"}, cfg.cold.noise) || cfg.cold.reps < 1 || cfg.cold.duty <= 0 {
		return cfg, r, errors.New("-noise must be quiet, noisy or both, -reps at least 1, and -noise-duty positive")
	}
	return cfg, r, validate(cfg)
}

// names parses a comma-separated list of some of known.
func names(flagName, list string, known []string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(known, s) {
			return nil, fmt.Errorf("%s: unknown name %q; want some of %s", flagName, s, strings.Join(known, ", "))
		}
		if slices.Contains(out, s) {
			return nil, fmt.Errorf("%s: %q given twice", flagName, s)
		}
		out = append(out, s)
	}
	return out, nil
}

// parseLoads parses a comma-separated list of loads.
func parseLoads(flagName, list string) ([]float64, error) {
	var out []float64
	for _, l := range strings.Split(list, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(l), 64)
		if err != nil || v <= 0 || v > 100 {
			return nil, fmt.Errorf("%s: %q is not a load between 0 and 100", flagName, l)
		}
		out = append(out, v)
	}
	return out, nil
}

func validateServer(c serverConfig) error {
	switch {
	case c.slots < 0 || c.slots > 10000:
		return errors.New("-slots must be between 0 (an unbounded dependency) and 10000")
	case c.service <= 0:
		return errors.New("-slot must be positive")
	case c.burnIters < 0:
		return errors.New("-burn-iters must not be negative")
	case c.shed.Workers < 1 || c.shed.QueueSize < 1 || c.shed.MaxWait <= 0:
		return errors.New("-shed-workers, -shed-queue and -shed-maxwait must be positive")
	}
	return nil
}

func validate(c config) error {
	cpu, iw, mx, nb := c.cpu, c.io, c.mixed, c.neighbour
	switch {
	case cpu.slots < 1 || cpu.slots > 10000 || cpu.slotTime <= 0:
		return errors.New("-slots must be between 1 and 10000, and -slot positive")
	case c.shed.Workers < 1 || c.shed.QueueSize < 1 || c.shed.MaxWait <= 0:
		return errors.New("-shed-workers, -shed-queue and -shed-maxwait must be positive")
	case c.warmup < 0 || c.phase <= 0:
		return errors.New("-warmup must not be negative and -phase must be positive")
	case cpu.spikeLow <= 0 || cpu.spikeHigh <= 0:
		return errors.New("-spike-low and -spike-high must be positive")
	case cpu.spikeBefore%c.bucket != 0 || cpu.spikeDur%c.bucket != 0 || cpu.spikeAfter%c.bucket != 0 ||
		cpu.spikeBefore <= 0 || cpu.spikeDur <= 0 || cpu.spikeAfter < c.window:
		return fmt.Errorf("-spike-before, -spike and -spike-after must be positive multiples of %v, and -spike-after at least %v", c.bucket, c.window)
	case c.deadline <= 0 || c.attempts < 1 || c.attempts > 10:
		return errors.New("-deadline must be positive and -attempts between 1 and 10")
	case c.timeout <= 0:
		return errors.New("-timeout must be positive")
	case iw.slots < 1 || iw.slots > 10000 || iw.service <= 0:
		return errors.New("-io-slots must be between 1 and 10000, and -io-service positive")
	case iw.callers < 0 || iw.callers > 20000 || iw.sleep <= 0:
		return errors.New("-io-callers must be between 0 and 20000, and -io-sleep positive")
	case mx.before <= 0 || mx.slow <= 0 || mx.settle < 0 || mx.settle >= 1:
		return errors.New("-mixed-before and -mixed-slow must be positive, and -mixed-settle in [0, 1)")
	case mx.slowdown < 1 || mx.slowdown > 100:
		return errors.New("-mixed-slowdown must be between 1 and 100")
	case mx.cpuWork < 10*time.Microsecond || mx.cpuWork > 100*time.Millisecond:
		return errors.New("-mixed-cpu-work must be between 10µs and 100ms")
	case mx.cpuLoad <= 0 || mx.cpuLoad > 4 || mx.ioLoad <= 0 || mx.ioLoad > 100:
		return errors.New("-mixed-cpu-load must be in (0, 4] and -mixed-io-load in (0, 100]")
	case nb.clients < 1 || nb.clients > 100 || nb.load <= 0 || nb.flood <= 0 || nb.flood > 1000:
		return errors.New("-neighbours must be between 1 and 100, -neighbour-load positive and -flood in (0, 1000]")
	}
	return nil
}

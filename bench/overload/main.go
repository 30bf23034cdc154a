// Command overload measures goodput under overload: kiev with its
// overload scheduler, kiev with the scheduler disabled, net/rpc and
// grpc-go, all serving the same handler of exactly known capacity X, under
// open-loop Poisson load with deadlines and retries.
//
// Run it from the bench directory:
//
//	go run ./overload            # the full run, about 3 minutes
//	go run ./overload -quick     # a smoke test, well under a minute
//
// It prints a Markdown table on stdout, progress on stderr, and draws
// out/goodput.png (goodput against offered load) and out/spike.png (the
// spike at 100 ms resolution).
//
// The program is its own server: for every phase it starts itself again
// as `overload -serve=<system>`, a separate process listening on
// 127.0.0.1:0, offers the load from this process, reads the server's
// counters through the child's stdin and stdout, and stops it.
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
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kievrpc/kiev/bench/internal/proc"
	"github.com/kievrpc/kiev/shed"
)

// config is the benchmark's settings, from the flags.
type config struct {
	systems     []string
	loads       []float64 // steady phases, ×X
	warmup      time.Duration
	phase       time.Duration
	spikeLow    float64
	spikeHigh   float64
	spikeBefore time.Duration
	spikeDur    time.Duration
	spikeAfter  time.Duration
	deadline    time.Duration // per attempt
	attempts    int           // in all, per user request
	slots       int
	slotTime    time.Duration
	shed        shed.Options
	bareKiev    bool // kiev clients without their retries and throttling
	out         string
	seed        uint64
	timeout     time.Duration // the whole run
	pin         bool          // server on the last CPU, generator on the others
	bucket      time.Duration // spike timeline resolution
	window      time.Duration // recovery window
}

// capacity is X, in calls per second.
func (c config) capacity() float64 { return float64(c.slots) / c.slotTime.Seconds() }

// childArgs are the arguments of the server process for system.
func (c config) childArgs(system string) []string {
	return []string{
		"-serve=" + system,
		"-slots=" + strconv.Itoa(c.slots),
		"-slot=" + c.slotTime.String(),
		"-shed-workers=" + strconv.Itoa(c.shed.Workers),
		"-shed-queue=" + strconv.Itoa(c.shed.QueueSize),
		"-shed-maxwait=" + c.shed.MaxWait.String(),
	}
}

func main() {
	os.Exit(overloadMain(os.Args[1:], os.Stdout, os.Stderr))
}

// overloadMain runs the program with args and returns its exit code.
func overloadMain(args []string, stdout, stderr io.Writer) int {
	cfg, serveSys, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "overload: %v\n", err)
		return 2
	}
	if serveSys != "" {
		sc := serverConfig{system: serveSys, slots: cfg.slots, slotTime: cfg.slotTime, shed: cfg.shed}
		if err := serve(sc, os.Stdin, stdout); err != nil {
			fmt.Fprintf(stderr, "overload -serve=%s: %v\n", serveSys, err)
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

func parseFlags(args []string, stderr io.Writer) (config, string, error) {
	fs := flag.NewFlagSet("overload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	serveSys := fs.String("serve", "", "run as the server of this system (used by the coordinator)")
	systems := fs.String("systems", strings.Join(allSystems, ","), "systems to measure, in order")
	loads := fs.String("loads", "0.5,1,2,3,5", "steady phases: user load as multiples of X")
	quick := fs.Bool("quick", false, "very short phases, for a smoke test (flags given explicitly win)")
	fs.DurationVar(&cfg.warmup, "warmup", 500*time.Millisecond, "unmeasured start of each steady phase")
	fs.DurationVar(&cfg.phase, "phase", 4*time.Second, "measured length of each steady phase")
	fs.Float64Var(&cfg.spikeLow, "spike-low", 0.8, "load before and after the spike, ×X")
	fs.Float64Var(&cfg.spikeHigh, "spike-high", 3, "load of the spike, ×X")
	fs.DurationVar(&cfg.spikeBefore, "spike-before", 2*time.Second, "length of the low load before the spike")
	fs.DurationVar(&cfg.spikeDur, "spike", 2*time.Second, "length of the spike")
	fs.DurationVar(&cfg.spikeAfter, "spike-after", 3*time.Second, "length of the low load after the spike")
	fs.DurationVar(&cfg.deadline, "deadline", time.Second, "deadline of each attempt")
	fs.IntVar(&cfg.attempts, "attempts", 3, "attempts per user request, in all; only timeouts are retried")
	fs.IntVar(&cfg.slots, "slots", 8, "handler slots (concurrent work units)")
	fs.DurationVar(&cfg.slotTime, "slot", 2*time.Millisecond, "time each call holds a slot")
	fs.IntVar(&cfg.shed.Workers, "shed-workers", 8, "kiev scheduler: Workers")
	fs.IntVar(&cfg.shed.QueueSize, "shed-queue", 256, "kiev scheduler: QueueSize")
	fs.DurationVar(&cfg.shed.MaxWait, "shed-maxwait", 100*time.Millisecond, "kiev scheduler: MaxWait")
	kievClient := fs.String("kiev-client", "default", "kiev client: default (its retry budget and adaptive throttling on, as shipped) or bare (both off: only the server's scheduler acts)")
	fs.StringVar(&cfg.out, "out", "out", "directory for the PNG charts")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the arrival process; every system gets the same arrivals")
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Minute, "bound on the whole run")
	fs.BoolVar(&cfg.pin, "pin", false, "pin each server process to the last CPU and the load generator to the others (Linux, needs taskset), so they do not preempt each other")
	if err := fs.Parse(args); err != nil {
		return cfg, "", err
	}
	if fs.NArg() > 0 {
		return cfg, "", fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.bucket, cfg.window = 100*time.Millisecond, 200*time.Millisecond
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
			{"spike-before", &cfg.spikeBefore, 500 * time.Millisecond},
			{"spike", &cfg.spikeDur, 500 * time.Millisecond},
			{"spike-after", &cfg.spikeAfter, time.Second},
		} {
			if !set[q.flag] {
				*q.d = q.v
			}
		}
	}
	if *serveSys != "" {
		if !slices.Contains(allSystems, *serveSys) {
			return cfg, "", fmt.Errorf("-serve=%s: unknown system; want one of %s", *serveSys, strings.Join(allSystems, ", "))
		}
		return cfg, *serveSys, validateServer(cfg)
	}
	switch *kievClient {
	case "default":
	case "bare":
		cfg.bareKiev = true
	default:
		return cfg, "", fmt.Errorf("-kiev-client=%s: want default or bare", *kievClient)
	}
	for _, s := range strings.Split(*systems, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(allSystems, s) {
			return cfg, "", fmt.Errorf("-systems: unknown system %q; want some of %s", s, strings.Join(allSystems, ", "))
		}
		cfg.systems = append(cfg.systems, s)
	}
	for _, l := range strings.Split(*loads, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(l), 64)
		if err != nil || v <= 0 || v > 100 {
			return cfg, "", fmt.Errorf("-loads: %q is not a load between 0 and 100", l)
		}
		cfg.loads = append(cfg.loads, v)
	}
	return cfg, "", validate(cfg)
}

func validateServer(c config) error {
	switch {
	case c.slots < 1 || c.slots > 10000:
		return errors.New("-slots must be between 1 and 10000")
	case c.slotTime <= 0:
		return errors.New("-slot must be positive")
	case c.shed.Workers < 1 || c.shed.QueueSize < 1 || c.shed.MaxWait <= 0:
		return errors.New("-shed-workers, -shed-queue and -shed-maxwait must be positive")
	}
	return nil
}

func validate(c config) error {
	if err := validateServer(c); err != nil {
		return err
	}
	switch {
	case c.warmup < 0 || c.phase <= 0:
		return errors.New("-warmup must not be negative and -phase must be positive")
	case c.spikeLow <= 0 || c.spikeHigh <= 0:
		return errors.New("-spike-low and -spike-high must be positive")
	case c.spikeBefore%c.bucket != 0 || c.spikeDur%c.bucket != 0 || c.spikeAfter%c.bucket != 0 ||
		c.spikeBefore <= 0 || c.spikeDur <= 0 || c.spikeAfter < c.window:
		return fmt.Errorf("-spike-before, -spike and -spike-after must be positive multiples of %v, and -spike-after at least %v", c.bucket, c.window)
	case c.deadline <= 0 || c.attempts < 1 || c.attempts > 10:
		return errors.New("-deadline must be positive and -attempts between 1 and 10")
	case c.timeout <= 0:
		return errors.New("-timeout must be positive")
	}
	return nil
}

// run measures every system: one fresh server process per steady phase,
// and one for the spike.
func run(ctx context.Context, cfg config, exe string, progress io.Writer) (*report, error) {
	rep := &report{cfg: cfg}
	lc := loadConfig{capacity: cfg.capacity(), deadline: cfg.deadline, attempts: cfg.attempts}
	for _, sys := range cfg.systems {
		for i, load := range cfg.loads {
			segs := []segment{
				{name: "warmup", load: load, dur: cfg.warmup},
				{name: fmt.Sprintf("%gX", load), load: load, dur: cfg.phase, measured: true},
			}
			lc.seed = cfg.seed*1000 + uint64(i)
			t0 := time.Now()
			res, err := runPhase(ctx, cfg, exe, sys, segs, lc, progress)
			if err != nil {
				return nil, fmt.Errorf("%s, %gX: %w", sys, load, err)
			}
			p := phaseMetrics(sys, res, segs, 1, lc.capacity, false)
			rep.phases = append(rep.phases, p)
			logPhase(progress, p, time.Since(t0))
		}
		segs := []segment{
			{name: fmt.Sprintf("spike: %gX before", cfg.spikeLow), load: cfg.spikeLow, dur: cfg.spikeBefore, measured: true},
			{name: fmt.Sprintf("spike: %gX", cfg.spikeHigh), load: cfg.spikeHigh, dur: cfg.spikeDur, measured: true},
			{name: fmt.Sprintf("spike: %gX after", cfg.spikeLow), load: cfg.spikeLow, dur: cfg.spikeAfter, measured: true},
		}
		lc.seed = cfg.seed*1000 + 999
		t0 := time.Now()
		res, err := runPhase(ctx, cfg, exe, sys, segs, lc, progress)
		if err != nil {
			return nil, fmt.Errorf("%s, spike: %w", sys, err)
		}
		for i := range segs {
			p := phaseMetrics(sys, res, segs, i, lc.capacity, true)
			rep.phases = append(rep.phases, p)
			logPhase(progress, p, time.Since(t0))
		}
		s := spikeMetrics(sys, res, segs, lc.capacity, cfg.bucket, cfg.window)
		rep.spikes = append(rep.spikes, s)
		fmt.Fprintf(progress, "[%s] recovery: %s\n", sys, recoveryText(s))
	}
	return rep, nil
}

func logPhase(w io.Writer, p phaseResult, took time.Duration) {
	fmt.Fprintf(w, "[%s] %-18s offered %5.2fX  goodput %.3fX  p9 %6s  p99 ok %9s  p99 rej %9s (raw TCP %9s)  wasted %6s  ampl %s  gen lag %v  (%v)\n",
		p.system, p.phase, p.offered, p.goodput, pct(p.p9Success), ms(p.p99OK), ms(p.p99Rej), ms(p.floor[1]), pct(p.wasted), num(p.ampl),
		p.lag.Round(100*time.Microsecond), took.Round(100*time.Millisecond))
}

// runPhase starts a server process for sys, offers segs to it over one
// client connection, and stops it.
func runPhase(ctx context.Context, cfg config, exe, sys string, segs []segment, lc loadConfig, stderr io.Writer) (*loadResult, error) {
	ch, err := startChild(exe, cfg.childArgs(sys), cfg.pin, stderr)
	if err != nil {
		return nil, err
	}
	defer ch.stop()
	c, err := dial(sys, ch.addr, cfg.bareKiev)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", ch.addr, err)
	}
	res, err := runLoad(ctx, c, segs, lc, ch.stats, ch.probe)
	c.close()
	return res, err
}

// child is a server process, with the addresses it listens on.
type child struct {
	*proc.Process
	addr  string     // the system's
	probe string     // the raw echo's, for the machine's floor
	mu    sync.Mutex // one stats exchange at a time
}

const childTimeout = 10 * time.Second // bound on starting, answering and stopping

// startChild starts exe with args and waits for the address it listens on.
func startChild(exe string, args []string, pin bool, stderr io.Writer) (*child, error) {
	cmd := exec.Command(exe, args...)
	if pin {
		cmd = exec.Command("taskset", append([]string{"-c", serverCPU(), exe}, args...)...)
	}
	p, err := proc.Start(cmd, stderr)
	if err != nil {
		return nil, err
	}
	c := &child{Process: p}
	line, err := c.readLine()
	if err != nil {
		c.stop()
		return nil, fmt.Errorf("server %s: %w", strings.Join(args, " "), err)
	}
	if _, err := fmt.Sscanf(line, "addr %s probe %s", &c.addr, &c.probe); err != nil {
		c.stop()
		return nil, fmt.Errorf("server %s printed %q, want its addresses (addr A probe P)", strings.Join(args, " "), line)
	}
	return c, nil
}

func (c *child) readLine() (string, error) { return c.ReadLine(childTimeout) }

// stats asks the server for its counters.
func (c *child) stats() (serverStats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var st serverStats
	if _, err := io.WriteString(c.Stdin, "stats\n"); err != nil {
		return st, err
	}
	line, err := c.readLine()
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal([]byte(line), &st)
}

func (c *child) stop() { c.Stop(childTimeout) }

// serverCPU is the CPU the servers are pinned to: the machine's last,
// which pinSelf passes on, since the pinned coordinator sees fewer CPUs.
func serverCPU() string { return os.Getenv(envPinned) }

// envPinned holds, in a coordinator already running under taskset, the
// CPU kept for the servers.
const envPinned = "KIEV_OVERLOAD_PINNED"

// pinSelf runs the coordinator again under taskset, on every CPU but the
// servers', unless it already does. It returns only on failure.
func pinSelf(exe string, args []string) error {
	if os.Getenv(envPinned) != "" {
		return nil
	}
	if runtime.NumCPU() < 2 {
		return errors.New("needs at least 2 CPUs")
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return fmt.Errorf("taskset not found (Debian package util-linux): %w", err)
	}
	cpus := "0"
	if n := runtime.NumCPU(); n > 2 {
		cpus = "0-" + strconv.Itoa(n-2)
	}
	env := append(os.Environ(), envPinned+"="+strconv.Itoa(runtime.NumCPU()-1))
	return syscall.Exec(taskset, append([]string{"taskset", "-c", cpus, exe}, args...), env)
}

package main

// The run: each workload in turn, each cell of a workload for every
// system in turn, every cell on a fresh server process.

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"
)

// run measures every workload of cfg for every system.
func run(ctx context.Context, cfg config, exe string, progress io.Writer) (*report, error) {
	rep := &report{cfg: cfg, kiev: kievVersion()}
	for _, wl := range cfg.workloads {
		fmt.Fprintf(progress, "== workload %s\n", wl)
		var err error
		switch wl {
		case wlCPU:
			rep.cpu, err = runCPU(ctx, cfg, exe, progress)
		case wlIO:
			rep.io, err = runIO(ctx, cfg, exe, progress)
		case wlMixed:
			rep.mixed, err = runMixed(ctx, cfg, exe, progress)
		case wlNeighbour:
			rep.neighbour, err = runNeighbour(ctx, cfg, exe, progress)
		case wlCold:
			rep.cold, err = runCold(ctx, cfg, exe, progress)
		}
		if err != nil {
			return nil, fmt.Errorf("workload %s: %w", wl, err)
		}
	}
	return rep, nil
}

// offerFunc offers a cell's load over a server's connections; snap reads
// its counters, probe is its raw-TCP echo's address.
type offerFunc func(callers []caller, snap snapFunc, probe string) (*loadResult, error)

// runServer starts a server process of sc, opens conns connections to it,
// lets offer run the cell's segs over them, and stops it. At the start of
// each segment with a service time, the server's dependency takes it.
func runServer(cfg config, exe string, sc serverConfig, conns int, segs []segment, stderr io.Writer, offer offerFunc) (*loadResult, error) {
	ch, err := startChild(exe, sc.args(), cfg.pin, stderr)
	if err != nil {
		return nil, err
	}
	defer ch.stop()
	cs, err := dialN(sc.system, ch.addr, cfg.bareKiev, conns)
	if err != nil {
		return nil, err
	}
	defer closeAll(cs)
	snap := func(i int) (serverStats, error) {
		if i < len(segs) && segs[i].service > 0 {
			if err := ch.setService(segs[i].service); err != nil {
				return serverStats{}, err
			}
		}
		return ch.stats(i == len(segs))
	}
	return offer(cs, snap, ch.probe)
}

// openLoop is the offerFunc of runLoad.
func openLoop(ctx context.Context, segs []segment, lc loadConfig) offerFunc {
	return func(cs []caller, snap snapFunc, probe string) (*loadResult, error) {
		return runLoad(ctx, cs, segs, lc, snap, probe)
	}
}

// kievVersion says which kiev code the run measures: the repository's
// commit, and whether kiev had changes not yet committed (bench/ aside).
func kievVersion() string {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "unknown (not in a git checkout)"
	}
	dir := strings.TrimSpace(string(top))
	rev, err := exec.Command("git", "-C", dir, "log", "-1", "--format=%h").Output()
	if err != nil {
		return "unknown"
	}
	v := "commit " + strings.TrimSpace(string(rev))
	if st, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--", ".", ":(exclude)bench").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		v += ", with uncommitted changes outside bench/"
	}
	return v
}

// logRow prints one row's figures as progress.
func logRow(w io.Writer, p phaseResult, took time.Duration) {
	fmt.Fprintf(w, "[%s] %-20s offered %5.2fX  goodput %.3fX  ok %5s  p99 ok %9s  p99 rej %9s (raw TCP %9s)  rejected %6s  timed out %6s  goroutines %d  gen lag %v  (%v)\n",
		p.system, p.phase, p.x(p.offered), p.x(p.goodput), pct(p.success), ms(p.p99OK), ms(p.p99Rej), ms(p.floor[1]), pct(p.rejected), pct(p.timedOut),
		p.peakG, p.lag.Round(100*time.Microsecond), took.Round(100*time.Millisecond))
}

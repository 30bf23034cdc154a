package main

// The server side: one process per system under test and cell, started by
// the coordinator as `overload -serve=<system>`. It listens on
// 127.0.0.1:0, prints "addr <host:port> probe <host:port>" on stdout, then
// answers commands read from stdin, one per line:
//
//	stats [full]    prints one JSON line of serverStats (full: with the
//	                dependency's account)
//	service <d>     sets the dependency's service time to d (a Go duration), prints "ok"
//	quit            exits
//
// It also exits on SIGTERM or when stdin ends (the coordinator died).
// The commands travel outside the RPC system under test, so an
// overloaded server still reports its counters at once.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/rpc"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/bench/internal/workpb"
	"github.com/kievrpc/kiev/shed"
)

// The systems under test, in the order they run.
const (
	sysKiev       = "kiev"          // kiev as a user gets it: no shed options at all
	sysKievFixed  = "kiev-fixed"    // kiev with a fixed worker pool (shed.Options{Workers: N})
	sysKievNoShed = "kiev-noshed"   // kiev, scheduler disabled: a goroutine per call
	sysKievRes    = "kiev-resource" // kiev as a user gets it, its handler acquiring the dependency as a shed.Resource
	sysNetRPC     = "netrpc"        // the standard library's net/rpc
	sysGRPC       = "grpc"          // grpc-go
)

var allSystems = []string{sysKiev, sysKievFixed, sysKievNoShed, sysNetRPC, sysGRPC}

// knownSystems are the systems -systems accepts: allSystems, the default,
// and kiev-resource.
var knownSystems = append(slices.Clip(allSystems), sysKievRes)

// isKiev reports whether system is one of kiev's.
func isKiev(system string) bool {
	return system == sysKiev || system == sysKievFixed || system == sysKievNoShed || system == sysKievRes
}

// serverStats are a server's counters since it started.
type serverStats struct {
	Received uint64 // requests that reached the server (handler or scheduler)
	Runs     uint64 // handler runs: work done (a slot taken, or CPU burnt)
	Wasted   uint64 // runs that started after their caller's deadline
	Dropped  uint64 // requests the scheduler answered without running (kiev only)

	DropsBy map[string]uint64 `json:",omitempty"` // Dropped by shed.Reason
	// DropWait counts the dropped requests by how long they waited in the
	// scheduler's queue before their answer, in the buckets of
	// shed.DropWaitBounds (kiev only).
	DropWait []uint64 `json:",omitempty"`

	// BurnRuns and BurnNanos count Burn's runs and the time they spent
	// burning CPU.
	BurnRuns  uint64
	BurnNanos int64

	// Goroutines is runtime.NumGoroutine at this command; PeakGoroutines
	// the most seen since the previous stats command (sampled every
	// goroutineSample, and at each command).
	Goroutines, PeakGoroutines int

	// Limit is Work's adaptive limit as it stands, with its last
	// decisions, and Resource the kiev-resource system's Resource (kiev
	// only): what explains a run.
	Limit    *shed.LimitStats    `json:",omitempty"`
	Resource *shed.ResourceStats `json:",omitempty"`
	// Dependency is its slots' account, on the "stats full" command.
	Dependency *depAccount `json:",omitempty"`
}

// goroutineSample is how often a server samples its goroutine count.
const goroutineSample = 5 * time.Millisecond

// serverConfig is what a server process needs to know.
type serverConfig struct {
	system    string
	slots     int           // the dependency's connections; 0: unbounded (a plain sleep)
	service   time.Duration // the dependency's service time
	catchUp   time.Duration // see slot.hold
	burnIters int           // rounds of burn per Burn call
	shed      shed.Options  // for sysKievFixed
}

// args are the command-line arguments of a server process for c.
func (c serverConfig) args() []string {
	return []string{
		"-serve=" + c.system,
		"-slots=" + strconv.Itoa(c.slots),
		"-slot=" + c.service.String(),
		"-catchup=" + c.catchUp.String(),
		"-burn-iters=" + strconv.Itoa(c.burnIters),
		"-shed-workers=" + strconv.Itoa(c.shed.Workers),
		"-shed-queue=" + strconv.Itoa(c.shed.QueueSize),
		"-shed-maxwait=" + c.shed.MaxWait.String(),
	}
}

// peakGauge tracks the largest value it has seen since it was last read.
type peakGauge struct{ v atomic.Int64 }

func (p *peakGauge) see(n int) {
	for {
		old := p.v.Load()
		if int64(n) <= old || p.v.CompareAndSwap(old, int64(n)) {
			return
		}
	}
}

// take returns the peak and starts a new one from now, n.
func (p *peakGauge) take(now int) int {
	return max(int(p.v.Swap(int64(now))), now)
}

// serve runs one server until quit, SIGTERM or the end of stdin. It does
// not drain the server: the process exits right after, and a collapsed
// server may hold a backlog that would take many seconds to run.
func serve(cfg serverConfig, stdin io.Reader, stdout io.Writer) error {
	// The listener stays open until the process exits: net/rpc logs an
	// error when its listener closes under Accept.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	h := &handlers{dep: newDependency(cfg.slots, cfg.service, cfg.catchUp), burnIters: cfg.burnIters}
	drops := func() map[string]uint64 { return nil }
	dropWait := func() []uint64 { return nil }
	explain := func(*serverStats) {}

	switch cfg.system {
	case sysKiev, sysKievFixed, sysKievNoShed, sysKievRes:
		var opts []kiev.ServerOption // sysKiev: none, what a user gets
		switch cfg.system {
		case sysKievFixed:
			opts = append(opts, kiev.WithShed(cfg.shed))
		case sysKievNoShed:
			opts = append(opts, kiev.WithShed(shed.Options{Disabled: true}))
		}
		srv := kiev.NewServer(opts...)
		kw := &KievWork{h: h}
		if cfg.system == sysKievRes && cfg.slots > 0 {
			kw.res = shed.NewResource("dependency", cfg.slots)
		}
		if err := srv.RegisterName("Work", kw); err != nil {
			return err
		}
		go srv.Serve(l)
		explain = func(st *serverStats) {
			for _, svc := range srv.Status(context.Background()).Services {
				for _, m := range svc.Methods {
					if svc.Name == "Work" && m.Name == "Work" {
						st.Limit = &shed.LimitStats{Limit: m.Limit, InFlight: m.InFlight, Queued: m.Queued, Limited: m.Limited, Decisions: m.LimitDecisions}
					}
				}
			}
			if kw.res != nil {
				rs := kw.res.Stats()
				st.Resource = &rs
			}
		}
		dropWait = func() []uint64 {
			b := srv.Scheduler().Stats().DropWaitBuckets
			return b[:]
		}
		drops = func() map[string]uint64 {
			st := srv.Scheduler().Stats()
			m := map[string]uint64{}
			for _, r := range shed.Reasons() {
				m[r.String()] = st.DroppedFor(r)
			}
			return m
		}
	case sysNetRPC:
		srv := rpc.NewServer()
		if err := srv.RegisterName("Work", &RPCWork{h}); err != nil {
			return err
		}
		go srv.Accept(l) // returns when l is closed
	case sysGRPC:
		srv := grpc.NewServer()
		workpb.RegisterWorkServer(srv, &grpcWork{h: h})
		srv.RegisterService(&grpcBurnService, h)
		go srv.Serve(l)
	default:
		return fmt.Errorf("unknown system %q; want one of %v", cfg.system, allSystems)
	}

	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go serveProbe(probe)

	// The goroutine count is sampled on a clock of its own, so that the
	// peak between two stats commands is seen, within goroutineSample.
	var peak peakGauge
	peak.see(runtime.NumGoroutine())
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(goroutineSample)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				peak.see(runtime.NumGoroutine())
			case <-done:
				return
			}
		}
	}()

	out := bufio.NewWriter(stdout)
	fmt.Fprintf(out, "addr %s probe %s\n", l.Addr(), probe.Addr())
	if err := out.Flush(); err != nil {
		return err
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	cmds := make(chan string)
	go func() {
		defer close(cmds)
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			cmds <- sc.Text()
		}
	}()
	enc := json.NewEncoder(out)
	for {
		select {
		case <-sig:
			return nil
		case cmd, ok := <-cmds:
			if !ok {
				return nil // the coordinator is gone
			}
			name, arg, _ := strings.Cut(cmd, " ")
			switch name {
			case "stats":
				// Runs first: a request counted in received has either
				// run, or is waiting for a slot, or was dropped.
				st := serverStats{Runs: h.runs.Load(), Wasted: h.wasted.Load(), DropsBy: drops(), DropWait: dropWait(),
					BurnRuns: h.burnRuns.Load(), BurnNanos: h.burnNanos.Load()}
				for _, n := range st.DropsBy {
					st.Dropped += n
				}
				st.Received = h.received.Load() + st.Dropped
				st.Goroutines = runtime.NumGoroutine()
				st.PeakGoroutines = peak.take(st.Goroutines)
				explain(&st)
				if arg == "full" && h.dep.ledger != nil {
					st.Dependency = h.dep.ledger.account()
				}
				if err := enc.Encode(st); err != nil {
					return err
				}
			case "service":
				d, err := time.ParseDuration(arg)
				if err != nil || d <= 0 {
					return fmt.Errorf("service %q: want a positive duration", arg)
				}
				h.dep.setService(d)
				fmt.Fprintln(out, "ok")
			case "quit":
				return nil
			default:
				return fmt.Errorf("unknown command %q", cmd)
			}
			if err := out.Flush(); err != nil {
				return err
			}
		}
	}
}

// probeSize is the size of a probe ping and of its echo.
const probeSize = 16

// serveProbe echoes probe pings on every connection of l: the floor under
// any RPC's round trip between the two processes, from the machine alone.
func serveProbe(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			var b [probeSize]byte
			for {
				if _, err := io.ReadFull(c, b[:]); err != nil {
					return
				}
				if _, err := c.Write(b[:]); err != nil {
					return
				}
			}
		}()
	}
}

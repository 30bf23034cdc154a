package main

// The server side: one process per system under test, started by the
// coordinator as `overload -serve=<system>`. It listens on 127.0.0.1:0,
// prints "addr <host:port>" on stdout, then answers commands read from
// stdin, one per line:
//
//	stats  prints one JSON line of serverStats
//	quit   exits
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
	sysKiev       = "kiev"        // kiev with its overload scheduler
	sysKievNoShed = "kiev-noshed" // kiev, scheduler disabled: a goroutine per call
	sysNetRPC     = "netrpc"      // the standard library's net/rpc
	sysGRPC       = "grpc"        // grpc-go
)

var allSystems = []string{sysKiev, sysKievNoShed, sysNetRPC, sysGRPC}

// Args are the arguments of Work for kiev and net/rpc; grpc sends the
// same fields in a workpb.WorkRequest.
type Args struct {
	ID       uint64 // the user request; its retries share it
	Deadline int64  // the attempt's absolute deadline, unix nanoseconds
	Priority int    // 0 to 9, 9 the most important
}

// Reply is the reply of Work.
type Reply struct {
	ID uint64
}

// serverStats are a server's counters since it started.
type serverStats struct {
	Received uint64 // requests that reached the server (handler or scheduler)
	Runs     uint64 // handler runs: work done
	Wasted   uint64 // runs that started after their caller's deadline
	Dropped  uint64 // requests the scheduler answered without running (kiev only)

	DropsBy map[string]uint64 `json:",omitempty"` // Dropped by shed.Reason
	// DropWait counts the dropped requests by how long they waited in the
	// scheduler's queue before their answer, in the buckets of
	// shed.DropWaitBounds (kiev only).
	DropWait []uint64 `json:",omitempty"`
}

// slot is one unit of the handler's capacity. due is the nominal end of
// its previous run.
type slot struct{ due time.Time }

// hold occupies the slot for d, starting now. time.Sleep overshoots (by
// about 0.25ms here) and a goroutine waiting for a slot wakes some time
// after it is released; together they would cut the capacity by a tenth
// or more. So a run that starts within d of the slot's previous nominal
// end continues from that end instead of from now: a busy slot completes
// exactly one run per d, and the runs' nominal intervals never overlap,
// so no slot exceeds one run per d either. (A run that starts within d
// of an idle slot's last end is shortened by as much; at most one run per
// idle period.)
func (s *slot) hold(now time.Time, d time.Duration) {
	begin := now
	if late := now.Sub(s.due); late >= 0 && late < d {
		begin = s.due
	}
	s.due = begin.Add(d)
	time.Sleep(time.Until(s.due))
}

// worker is the handler every system serves: it holds one of a fixed
// number of slots for a fixed time, so its capacity is exactly
// slots/slotTime calls per second. It does not look at its context (net/rpc
// has none): like most handlers it does its work once it starts. Calls
// beyond the capacity wait for a slot.
type worker struct {
	slots    chan *slot
	slotTime time.Duration
	received atomic.Uint64
	runs     atomic.Uint64
	wasted   atomic.Uint64
}

func newWorker(n int, slotTime time.Duration) *worker {
	w := &worker{slots: make(chan *slot, n), slotTime: slotTime}
	for range n {
		w.slots <- &slot{}
	}
	return w
}

func (w *worker) work(id uint64, deadline int64) uint64 {
	w.received.Add(1)
	s := <-w.slots
	now := time.Now()
	w.runs.Add(1)
	if now.UnixNano() > deadline {
		w.wasted.Add(1)
	}
	s.hold(now, w.slotTime)
	w.slots <- s
	return id
}

// KievWork serves Work on kiev.
type KievWork struct{ w *worker }

// Work does one unit of work.
func (s *KievWork) Work(ctx context.Context, a Args, r *Reply) error {
	r.ID = s.w.work(a.ID, a.Deadline)
	return nil
}

// RPCWork serves Work on net/rpc.
type RPCWork struct{ w *worker }

// Work does one unit of work.
func (s *RPCWork) Work(a Args, r *Reply) error {
	r.ID = s.w.work(a.ID, a.Deadline)
	return nil
}

// grpcWork serves Work on grpc-go.
type grpcWork struct {
	workpb.UnimplementedWorkServer
	w *worker
}

func (s *grpcWork) Work(ctx context.Context, req *workpb.WorkRequest) (*workpb.WorkReply, error) {
	return &workpb.WorkReply{Id: s.w.work(req.GetId(), req.GetDeadlineUnixNano())}, nil
}

// serverConfig is what a server process needs to know.
type serverConfig struct {
	system   string
	slots    int
	slotTime time.Duration
	shed     shed.Options // for sysKiev
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
	w := newWorker(cfg.slots, cfg.slotTime)
	drops := func() map[string]uint64 { return nil }
	dropWait := func() []uint64 { return nil }

	switch cfg.system {
	case sysKiev, sysKievNoShed:
		o := cfg.shed
		if cfg.system == sysKievNoShed {
			o = shed.Options{Disabled: true}
		}
		srv := kiev.NewServer(kiev.WithShed(o))
		if err := srv.RegisterName("Work", &KievWork{w}); err != nil {
			return err
		}
		go srv.Serve(l)
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
		if err := srv.RegisterName("Work", &RPCWork{w}); err != nil {
			return err
		}
		go srv.Accept(l) // returns when l is closed
	case sysGRPC:
		srv := grpc.NewServer()
		workpb.RegisterWorkServer(srv, &grpcWork{w: w})
		go srv.Serve(l)
	default:
		return fmt.Errorf("unknown system %q; want one of %v", cfg.system, allSystems)
	}

	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go serveProbe(probe)

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
			switch cmd {
			case "stats":
				// Runs first: a request counted in received has either
				// run, or is waiting for a slot, or was dropped.
				st := serverStats{Runs: w.runs.Load(), Wasted: w.wasted.Load(), DropsBy: drops(), DropWait: dropWait()}
				for _, n := range st.DropsBy {
					st.Dropped += n
				}
				st.Received = w.received.Load() + st.Dropped
				if err := enc.Encode(st); err != nil {
					return err
				}
				if err := out.Flush(); err != nil {
					return err
				}
			case "quit":
				return nil
			default:
				return fmt.Errorf("unknown command %q", cmd)
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

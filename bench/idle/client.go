package main

// The client side: a server process per system and rep, and N connections
// to it opened as each system's own client opens one.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/rpc"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/bench/internal/echopb"
	"github.com/kievrpc/kiev/bench/internal/proc"
)

// childTimeout bounds starting the server process and each of its answers.
const childTimeout = 60 * time.Second

// callTimeout bounds dialing one connection and each call on it.
const callTimeout = 20 * time.Second

// dialers is how many connections are opened at once.
const dialers = 16

// sample is one system's run: the server's figures before the
// connections, and after they were idle.
type sample struct {
	system string
	rep    int
	conns  int
	before serverStats
	after  serverStats
	failed int   // calls that failed after the measurement: connections lost while idle
	final  int64 // connections the server had accepted by the end
	err    string
}

func (s sample) heapPerConn() float64 {
	return float64(int64(s.after.HeapLive)-int64(s.before.HeapLive)) / float64(s.conns)
}

func (s sample) stacksPerConn() float64 {
	return float64(int64(s.after.Stacks)-int64(s.before.Stacks)) / float64(s.conns)
}

func (s sample) goroutinesPerConn() float64 {
	return float64(s.after.Goroutines-s.before.Goroutines) / float64(s.conns)
}

// measure runs system's server process, opens n connections to it, makes
// one call on each, leaves them idle for idle, and reads the server's
// figures; then it calls once more on each, to count the connections that
// did not survive.
func measure(ctx context.Context, exe, system string, n int, idle time.Duration, stderr io.Writer) (sample, error) {
	s := sample{conns: n}
	srv, err := proc.Start(exec.Command(exe, "-serve", system), stderr)
	if err != nil {
		return s, err
	}
	defer srv.Stop(childTimeout)
	line, err := srv.ReadLine(childTimeout)
	if err != nil {
		return s, fmt.Errorf("server process: %w", err)
	}
	var h hello
	if err := json.Unmarshal([]byte(line), &h); err != nil {
		return s, fmt.Errorf("server process printed %q: %w", line, err)
	}
	if s.before, err = askStats(srv); err != nil {
		return s, err
	}

	conns, err := openAll(ctx, system, h.Addr, n)
	defer closeAll(conns)
	if err != nil {
		return s, err
	}
	t := time.NewTimer(idle)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return s, ctx.Err()
	}
	if s.after, err = askStats(srv); err != nil {
		return s, err
	}
	if s.after.Accepted != int64(n) {
		return s, fmt.Errorf("the server accepted %d connections for the %d opened: some were redialed while idle", s.after.Accepted, n)
	}

	var failed atomic.Int64
	each(conns, func(c idleConn) error {
		if c.call(ctx) != nil {
			failed.Add(1)
		}
		return nil
	})
	s.failed = int(failed.Load())
	last, err := askStats(srv)
	if err != nil {
		return s, err
	}
	s.final = last.Accepted
	return s, nil
}

// askStats asks the server process for its figures.
func askStats(srv *proc.Process) (serverStats, error) {
	var st serverStats
	if _, err := io.WriteString(srv.Stdin, "stats\n"); err != nil {
		return st, fmt.Errorf("server process: %w", err)
	}
	line, err := srv.ReadLine(childTimeout)
	if err != nil {
		return st, fmt.Errorf("server process: %w", err)
	}
	if err := json.Unmarshal([]byte(line), &st); err != nil {
		return st, fmt.Errorf("server process printed %q: %w", line, err)
	}
	return st, nil
}

// idleConn is one connection of a system's client.
type idleConn interface {
	call(ctx context.Context) error
	close()
}

// openAll opens n connections to system at addr, dialers at a time, and
// makes one call on each. It returns the connections it opened, also on
// error, for the caller to close.
func openAll(ctx context.Context, system, addr string, n int) ([]idleConn, error) {
	conns := make([]idleConn, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, dialers)
	for w := range dialers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				c, err := open(ctx, system, addr)
				if err == nil {
					conns[i] = c
					err = c.call(ctx)
				}
				if err != nil {
					errs[w] = fmt.Errorf("connection %d of %d: %w", i+1, n, err)
					next.Store(int64(n)) // the others stop
					return
				}
			}
		})
	}
	wg.Wait()
	opened := conns[:0]
	for _, c := range conns {
		if c != nil {
			opened = append(opened, c)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return opened, err
	}
	return opened, ctx.Err()
}

// closeAll closes every connection, dialers at a time.
func closeAll(conns []idleConn) {
	each(conns, func(c idleConn) error { c.close(); return nil })
}

// each runs f on every connection, dialers at a time.
func each(conns []idleConn, f func(idleConn) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range dialers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(conns) {
					return
				}
				f(conns[i])
			}
		})
	}
	wg.Wait()
}

// open opens one connection to system, as its own client does: for grpc,
// it waits for the connection to be Ready.
func open(ctx context.Context, system, addr string) (idleConn, error) {
	switch system {
	case sysKiev:
		c, err := kiev.Dial(addr)
		if err != nil {
			return nil, err
		}
		return kievConn{c}, nil
	case sysGRPC:
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		cc.Connect()
		for st := cc.GetState(); st != connectivity.Ready; st = cc.GetState() {
			if !cc.WaitForStateChange(ctx, st) {
				cc.Close()
				return nil, fmt.Errorf("grpc connection not ready within %v: %s", callTimeout, st)
			}
		}
		return grpcConn{cc, echopb.NewEchoClient(cc)}, nil
	case sysNetRPC:
		c, err := rpc.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		return netRPCConn{c}, nil
	}
	return nil, fmt.Errorf("unknown system %q", system)
}

type kievConn struct{ c *kiev.Client }

func (k kievConn) call(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var out Ping
	return k.c.Call(ctx, "Echo.Ping", &Ping{N: 1}, &out)
}

func (k kievConn) close() { k.c.Close() }

type grpcConn struct {
	cc *grpc.ClientConn
	c  echopb.EchoClient
}

func (g grpcConn) call(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_, err := g.c.Small(ctx, &echopb.Small{Id: 1})
	return err
}

func (g grpcConn) close() { g.cc.Close() }

type netRPCConn struct{ c *rpc.Client }

// call has no timeout: net/rpc takes no context, and a lost connection
// fails its calls at once.
func (n netRPCConn) call(context.Context) error {
	var out Ping
	return n.c.Call("NetEcho.Ping", &Ping{N: 1}, &out)
}

func (n netRPCConn) close() { n.c.Close() }

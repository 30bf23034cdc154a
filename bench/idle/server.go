package main

// The server process (`idle -serve <system>`): one system on a 127.0.0.1:0
// listener, on its defaults. It prints one JSON line of hello, then
// answers each line "stats" on its stdin with a JSON line of serverStats,
// and exits when stdin ends.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/rpc"
	"runtime"
	"runtime/metrics"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/bench/internal/echopb"
)

// hello is the server process's first line.
type hello struct {
	Addr string // where the system listens
}

// serverStats is the server process's answer to "stats".
type serverStats struct {
	HeapLive   uint64 // /gc/heap/live:bytes after two runtime.GC
	Stacks     uint64 // /memory/classes/heap/stacks:bytes: the goroutines' stacks
	Goroutines int
	Accepted   int64 // connections the listener accepted so far
}

// Ping is the argument and reply of the kiev and net/rpc calls.
type Ping struct{ N int64 }

// Echo is the kiev service.
type Echo struct{}

// Ping answers in with itself.
func (*Echo) Ping(ctx context.Context, in *Ping, out *Ping) error { *out = *in; return nil }

// NetEcho is the same service for net/rpc, which has no context.
type NetEcho struct{}

// Ping answers in with itself.
func (*NetEcho) Ping(in *Ping, out *Ping) error { *out = *in; return nil }

// grpcEcho is the service for grpc-go; only Small is called.
type grpcEcho struct {
	echopb.UnimplementedEchoServer
}

func (grpcEcho) Small(ctx context.Context, in *echopb.Small) (*echopb.Small, error) { return in, nil }

// countingListener counts the connections it accepts. It hands out the
// connections it accepts unchanged (kiev writes to a *net.TCPConn inline,
// which a wrapper would prevent).
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// serveMain is the server process of system.
func serveMain(system string, stdin io.Reader, stdout io.Writer) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	cl := &countingListener{Listener: l}
	stop, err := startServer(system, cl)
	if err != nil {
		l.Close()
		return err
	}
	defer stop()
	enc := json.NewEncoder(stdout)
	if err := enc.Encode(hello{Addr: l.Addr().String()}); err != nil {
		return err
	}
	sc := bufio.NewScanner(stdin)
	for sc.Scan() { // until the coordinator is gone
		if sc.Text() != "stats" {
			return fmt.Errorf("unknown command %q; the one command is stats", sc.Text())
		}
		if err := enc.Encode(readStats(cl.accepted.Load())); err != nil {
			return err
		}
	}
	return sc.Err()
}

// startServer serves system on l, on its defaults, and returns its stop.
func startServer(system string, l net.Listener) (func(), error) {
	switch system {
	case sysKiev:
		s := kiev.NewServer()
		if err := s.Register(&Echo{}); err != nil {
			return nil, err
		}
		go s.Serve(l)
		return func() { s.Close() }, nil
	case sysGRPC:
		s := grpc.NewServer()
		echopb.RegisterEchoServer(s, grpcEcho{})
		go s.Serve(l)
		return s.Stop, nil
	case sysNetRPC:
		s := rpc.NewServer()
		if err := s.Register(&NetEcho{}); err != nil {
			return nil, err
		}
		go func() { // rpc.Server.Accept would log the listener's closing
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go s.ServeConn(c)
			}
		}()
		return func() { l.Close() }, nil
	}
	return nil, fmt.Errorf("unknown system %q; the systems are kiev, grpc, net/rpc", system)
}

// readStats collects twice, so that what the first collection freed, and
// the finalizers it ran, are gone, then reads the live heap.
func readStats(accepted int64) serverStats {
	runtime.GC()
	runtime.GC()
	ms := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(ms)
	return serverStats{
		HeapLive:   ms[0].Value.Uint64(),
		Stacks:     ms[1].Value.Uint64(),
		Goroutines: runtime.NumGoroutine(),
		Accepted:   accepted,
	}
}

package kiev_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/wire"
)

func TestSlowReaderIsCut(t *testing.T) {
	log := &records{}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(log)), kiev.WithHeartbeat(250*time.Millisecond, 2*time.Second))
	srv.Register(&Arith{})
	addr := startServer(t, srv)

	// A client that asks for 1 MiB replies and never reads them.
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	args, _ := codec.Msgpack.Marshal(nil, Args{A: 1 << 20})
	req := wire.AppendPreface(nil, wire.Version)
	for id := uint64(1); id <= 64; id++ {
		req = append(req, frame(wire.TypeRequest, id, func(b []byte) []byte {
			b = wire.AppendString(b, wire.KeyMethod, "Arith.Big")
			return wire.AppendString(b, wire.KeyCodec, "msgpack")
		}, args)...)
	}
	start := time.Now()
	if _, err := nc.Write(req); err != nil {
		t.Fatal(err)
	}
	// It keeps sending pings, so the heartbeat sees it alive: only its
	// not reading can get it cut.
	stop := make(chan struct{})
	pinged := make(chan struct{})
	go func() {
		defer close(pinged)
		ping := frame(wire.TypePing, 1, nil, nil)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := nc.Write(ping); err != nil {
				return
			}
		}
	}()
	defer func() { close(stop); <-pinged }()

	// Meanwhile other clients are served.
	c := dial(t, addr)
	for i := range 20 {
		var r Reply
		if err := c.Call(context.Background(), "Arith.Add", Args{i, 1}, &r); err != nil || r.C != i+1 {
			t.Fatalf("a normal call next to the slow reader: %v, %v", r.C, err)
		}
	}
	// The slow reader is cut.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if attrs, _, ok := log.find("kiev: closing connection"); ok {
			// Cut for not reading, or, when the reader goroutine was the
			// one held sending it a Pong, by the heartbeat: either way
			// it no longer holds the server.
			if !strings.Contains(attrs["err"], "read nothing") && !strings.Contains(attrs["err"], "heartbeat timeout") {
				t.Fatalf("connection closed for %q; want it cut for not reading", attrs["err"])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a client that reads nothing was not cut within 10s")
		}
		time.Sleep(10 * time.Millisecond) // the server logs on its own goroutine
	}
	// Reading now ends, after what was sent.
	nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	n, err := io.Copy(io.Discard, nc)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("a client that read nothing was kept for 30s (%d bytes read then)", n)
	}
	t.Logf("slow reader cut after %v; it then read %d MiB before the connection ended", time.Since(start).Round(time.Millisecond), n>>20)
}

func TestManyIdleConnections(t *testing.T) {
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	srv.Register(&Arith{})
	addr := startServer(t, srv)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	const idle = 1000
	conns := make([]net.Conn, 0, idle)
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	preface := wire.AppendPreface(nil, wire.Version)
	for range idle {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, nc)
		if _, err := nc.Write(preface); err != nil {
			t.Fatal(err)
		}
	}
	// Every idle connection has been answered its preface, so the server
	// holds all of them.
	buf := make([]byte, wire.PrefaceLen)
	for _, nc := range conns {
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(nc, buf); err != nil {
			t.Fatal(err)
		}
	}
	c := dial(t, addr)
	start := time.Now()
	for i := range 200 {
		var r Reply
		if err := c.Call(context.Background(), "Arith.Add", Args{i, 1}, &r); err != nil || r.C != i+1 {
			t.Fatalf("call with %d idle connections open: %v, %v", idle, r.C, err)
		}
	}
	took := time.Since(start)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	perConn := (int64(after.HeapInuse) - int64(before.HeapInuse)) / idle
	if perConn > 256<<10 {
		t.Errorf("each idle connection holds %d KiB of heap; want well under 256 KiB", perConn>>10)
	}
	t.Logf("%d idle connections: %d KiB of heap each, both sides of the test included; 200 calls beside them in %v", idle, perConn>>10, took.Round(time.Millisecond))
}

package main

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/kievrpc/kiev/bench/internal/loadgen"
	"github.com/kievrpc/kiev/bench/internal/payload"
	"github.com/kievrpc/kiev/bench/peers/internal/kitexecho"
)

// No goleak here: kitex's netpoll starts poller goroutines that live as
// long as the process.

// testAddrs are the servers every test calls: started once, as in the
// server process, and stopped after the last test. (kitex's mux server,
// stopped, sends its clients a control frame that kitex v0.16.3's client
// cannot decode: it logs a recovered panic.)
var testAddrs serverAddrs

func TestMain(m *testing.M) {
	quietLogs()
	s, err := startServers()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testAddrs = s.addrs
	code := m.Run()
	s.stop()
	os.Exit(code)
}

// payloads are the structs and a bulk payload, each as its Go value.
var payloads = []struct {
	name  string
	value func() any // a pointer to the payload
	fresh func() any // a pointer to a zero value of its type
}{
	{payload.NameSmall, func() any { return payload.NewSmall() }, func() any { return new(payload.Small) }},
	{payload.NameMessage, func() any {
		m := payload.NewMessage()
		m.Field5 = []uint64{1, 1 << 40} // a list too, which NewMessage leaves empty
		return m
	}, func() any { return new(payload.Message) }},
	{payload.Name16K, func() any { return &payload.Blob{Data: payload.BlobData(payload.Name16K)} }, func() any { return new(payload.Blob) }},
}

func TestRPCXEchoesThePayloadUnchanged(t *testing.T) {
	addrs := testAddrs
	c, err := dialRPCX(addrs.RPCX)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, p := range payloads {
		in, out := p.value(), p.fresh()
		method := map[string]string{payload.NameSmall: "Small", payload.NameMessage: "Message"}[p.name]
		if method == "" {
			method = "Blob"
		}
		if err := c.c.Call(context.Background(), method, in, out); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		if !reflect.DeepEqual(in, out) {
			t.Errorf("%s: sent %+v, got back %+v", p.name, in, out)
		}
	}
}

func TestARPCEchoesThePayloadUnchanged(t *testing.T) {
	addrs := testAddrs
	c, err := dialARPC(addrs.ARPC)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, p := range payloads {
		in, out := p.value(), p.fresh()
		method := map[string]string{payload.NameSmall: "/echo/small", payload.NameMessage: "/echo/message"}[p.name]
		if method == "" {
			method = "/echo/blob"
		}
		if err := c.c.CallWith(context.Background(), method, in, out); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		if !reflect.DeepEqual(in, out) {
			t.Errorf("%s: sent %+v, got back %+v", p.name, in, out)
		}
	}
}

func TestKitexEchoesThePayloadUnchanged(t *testing.T) {
	addrs := testAddrs
	for _, mux := range []bool{false, true} {
		addr := addrs.Kitex
		if mux {
			addr = addrs.KitexMux
		}
		k, err := dialKitex(addr, mux)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		small := kitexSmall(payload.NewSmall())
		if got, err := k.c.EchoSmall(ctx, small); err != nil || !reflect.DeepEqual(got, small) {
			t.Errorf("mux=%v: small: sent %+v, got back %+v, %v", mux, small, got, err)
		}
		m := payload.NewMessage()
		m.Field5 = []uint64{1, 1 << 40}
		msg := kitexMessage(m)
		if got, err := k.c.EchoMessage(ctx, msg); err != nil || !reflect.DeepEqual(got, msg) {
			t.Errorf("mux=%v: 581B: sent %+v, got back %+v, %v", mux, msg, got, err)
		}
		blob := &kitexecho.Blob{Data: payload.BlobData(payload.Name16K)}
		if got, err := k.c.EchoBlob(ctx, blob); err != nil || !reflect.DeepEqual(got, blob) {
			t.Errorf("mux=%v: 16KiB: got back %d bytes, %v", mux, len(got.GetData()), err)
		}
	}
}

// TestKitexMessageKeepsEveryField checks the conversion to thrift's
// struct: every field of the Go struct has its twin, set to its value.
func TestKitexMessageKeepsEveryField(t *testing.T) {
	m := payload.NewMessage()
	m.Field5 = []uint64{7}
	k := reflect.ValueOf(kitexMessage(m)).Elem()
	g := reflect.ValueOf(m).Elem()
	for i := range g.NumField() {
		name := g.Type().Field(i).Name
		f := k.FieldByName(name)
		if !f.IsValid() {
			t.Errorf("thrift's BenchmarkMessage has no %s", name)
			continue
		}
		if name == "Field5" {
			if !reflect.DeepEqual(f.Interface(), []int64{7}) {
				t.Errorf("Field5 = %v, want [7]", f.Interface())
			}
			continue
		}
		if f.Interface() != g.Field(i).Interface() {
			t.Errorf("%s = %v, want %v", name, f.Interface(), g.Field(i).Interface())
		}
	}
}

// TestLoadCells runs a short closed-loop cell of every peer and payload
// through the load generator, as bench/compare's client process does.
func TestLoadCells(t *testing.T) {
	addrs := testAddrs
	l := loadgen.NewLoader(addrs.Control, func(sys string) (loadgen.Conn, error) { return dialSystem(sys, addrs) })
	defer l.Close()
	for _, sys := range []string{sysRPCX, sysARPC, sysKitex, sysKitexMux} {
		for _, p := range []string{payload.NameSmall, payload.NameMessage, payload.Name16K} {
			res, err := l.Run(context.Background(), loadgen.Spec{System: sys, Payload: p, Callers: 8, Warmup: 20 * time.Millisecond, Duration: 80 * time.Millisecond})
			if err != nil {
				t.Fatalf("%s %s: %v", sys, p, err)
			}
			if res.Calls == 0 || res.Errors > 0 {
				t.Errorf("%s %s: %d calls, %d errors (%s)", sys, p, res.Calls, res.Errors, res.FirstErr)
			}
			if res.Server.CPU <= 0 {
				t.Errorf("%s %s: no server CPU counted", sys, p)
			}
		}
	}
}

func TestUnknownSystem(t *testing.T) {
	if _, err := dialSystem("thrift", serverAddrs{}); err == nil {
		t.Error("dialing an unknown system succeeded")
	}
}

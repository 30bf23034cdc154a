package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kievrpc/kiev/bench/internal/hist"
	"github.com/kievrpc/kiev/bench/internal/proc"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
)

// TestMain lets the test binary serve as the program's server and client
// processes: the coordinator re-executes os.Executable, which here is the
// test binary, with -serve or -load.
func TestMain(m *testing.M) {
	for _, a := range os.Args[1:] {
		if a == "-serve" || a == "-load" {
			os.Exit(compareMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
		}
	}
	goleak.VerifyTestMain(m)
}

// TestRun runs the program end to end on short windows, every system,
// closed and open loop and pinned, and checks that the report is whole:
// every row measured without error, the targets table, the charts. It
// asserts nothing about the figures, which depend on the machine.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark for about 20 seconds")
	}
	out := t.TempDir()
	var stdout bytes.Buffer
	stderr := &proc.Output{}
	args := []string{"-payloads=small,16KiB", "-callers=1,16", "-loads=25,75", "-repeats=1",
		"-warmup=50ms", "-duration=150ms", "-open-duration=200ms", "-pinned-callers=16", "-out=" + out}
	if code := compareMain(args, strings.NewReader(""), &stdout, stderr); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	report := stdout.String()
	for _, want := range []string{"### Targets", "### Where the gap to raw TCP lies", "### kiev-msgpack's calls/s over each system's, 16 callers", "mux-floor vs raw TCP", "### Closed loop, small-struct", "### Closed loop, 16KiB", "### Open loop", "### Pinned"} {
		if !strings.Contains(report, want) {
			t.Errorf("the report has no %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "errors:") {
		t.Errorf("some calls failed:\n%s", report)
	}
	// Every system has a row in every table: 2 payloads × 2 concurrencies
	// closed, 2 loads open, 1 pinned.
	for _, sys := range allSystems {
		if n := strings.Count("\n"+report, "\n| "+sys+" |"); n != 2*2+2+1 {
			t.Errorf("%s has %d rows, want 7:\n%s", sys, n, report)
		}
	}
	for _, f := range []string{"throughput-small.png", "throughput-16KiB.png", "latency-p50-small.png", "latency-p99-small.png", "results.md"} {
		st, err := os.Stat(filepath.Join(out, f))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if log := stderr.String(); !strings.Contains(log, "cells measured") || !strings.Contains(log, "[") {
		t.Errorf("no progress bar on stderr:\n%s", log)
	}
}

// TestRunCompression runs kiev with compression beside kiev-msgpack on
// the compressible payload, and checks the comparison's table: bytes on
// the wire counted for every kiev system, and fewer with compression.
func TestRunCompression(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark for a few seconds")
	}
	var stdout bytes.Buffer
	stderr := &proc.Output{}
	args := []string{"-systems=kiev-msgpack,kiev-zstd,kiev-s2", "-payloads=16KiB-json", "-callers=4", "-loads=50", "-open-payloads=16KiB-json",
		"-repeats=1", "-warmup=50ms", "-duration=150ms", "-open-duration=200ms", "-pinned=false", "-out=" + t.TempDir()}
	if code := compareMain(args, strings.NewReader(""), &stdout, stderr); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	report := stdout.String()
	if !strings.Contains(report, "### Compression: bytes on the wire") || strings.Contains(report, "errors:") {
		t.Fatalf("no compression table, or errors:\n%s", report)
	}
	// | 16KiB-json | 4 | calls/s | wire | system | calls/s | × | wire | × |
	rows := 0
	for _, l := range strings.Split(report, "\n") {
		f := strings.Split(l, " | ")
		if len(f) != 9 || f[0] != "| 16KiB-json" {
			continue
		}
		rows++
		base, err1 := strconv.Atoi(f[3])
		wire, err2 := strconv.Atoi(f[7])
		if err1 != nil || err2 != nil || wire*3 > base {
			t.Errorf("%s: wire bytes per call %q against %q uncompressed, want under a third", f[4], f[7], f[3])
		}
	}
	if rows != 2 {
		t.Errorf("%d rows for kiev-zstd and kiev-s2, want 2:\n%s", rows, report)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-systems=kiev,thrift"},
		{"-payloads=2KiB"},
		{"-callers=0"},
		{"-loads=150"},
		{"-repeats=0"},
	} {
		var stderr bytes.Buffer
		if code := compareMain(args, strings.NewReader(""), &bytes.Buffer{}, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if !strings.Contains(stderr.String(), "compare:") {
			t.Errorf("%v: no explanation: %q", args, stderr.String())
		}
	}
}

// TestHistQuantiles checks the histogram against exact quantiles.
func TestHistQuantiles(t *testing.T) {
	var h hist.Hist
	rng := rand.New(rand.NewPCG(1, 2))
	vals := make([]time.Duration, 100000)
	for i := range vals {
		vals[i] = time.Duration(rng.ExpFloat64() * float64(200*time.Microsecond))
		h.Record(vals[i])
	}
	sorted := append([]time.Duration(nil), vals...)
	slices.Sort(sorted)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := sorted[int(q*float64(len(sorted)))-1]
		got := h.Quantile(q)
		if d := float64(got-exact) / float64(exact); d > 0.035 || d < -0.035 {
			t.Errorf("q%.3f = %v, exact %v: off by %.1f%%", q, got, exact, 100*d)
		}
	}
	var empty hist.Hist
	if empty.Quantile(0.5) != 0 {
		t.Error("empty histogram: quantile not 0")
	}
}

// TestRawEcho runs many concurrent callers through the raw-TCP client and
// server: every call returns, in order, and close ends both.
func TestRawEcho(t *testing.T) {
	srv, err := startServers()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	c, err := dialRaw(srv.addrs.Raw)
	if err != nil {
		t.Fatal(err)
	}
	frame := binary.BigEndian.AppendUint32(nil, 100)
	frame = append(frame, make([]byte, 100)...)
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply := make(chan error, 1)
			for range 200 {
				if err := c.call(frame, reply); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	c.close()
	if err := c.call(frame, make(chan error, 1)); err == nil {
		t.Error("a call after close succeeded")
	}
}

// TestBatchWriterNeverAppendsToTheBufferBeingWritten drives a batchWriter's
// buffers by hand through a batch found empty: the frames taken for a write
// stay as they were while more are queued. They once did not, as the queue
// became the spare buffer while the spare still was.
func TestBatchWriterNeverAppendsToTheBufferBeingWritten(t *testing.T) {
	w := &batchWriter{kick: make(chan struct{}, 1)} // no writer goroutine: the test is the writer
	w.queue([]byte("first"))
	w.giveBack(w.take()) // written
	if b := w.take(); b != nil {
		t.Fatalf("take found %q queued, want nothing", b)
	}
	w.queue([]byte("second"))
	writing := w.take()
	w.queue([]byte("third")) // while "second" is being written
	if string(writing) != "second" {
		t.Fatalf("the frames being written became %q, want %q", writing, "second")
	}
	w.giveBack(writing)
	if b := w.take(); string(b) != "third" {
		t.Fatalf("take = %q, want %q", b, "third")
	}
}

// TestFloorEcho runs many callers with frames of their own through the
// multiplexing floor: each gets its own frame back, under its own id, and
// close fails the calls that follow.
func TestFloorEcho(t *testing.T) {
	srv, err := startServers()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	c, err := dialFloor(srv.addrs.Floor)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for caller := range 64 {
		wg.Go(func() {
			// A kiev-shaped frame: length, type and flags, id, then a body
			// naming the caller, of a length of its own.
			frame := binary.BigEndian.AppendUint32(nil, 0)
			frame = append(frame, 1, 0)
			frame = binary.BigEndian.AppendUint64(frame, 0)
			frame = append(frame, bytes.Repeat([]byte{byte(caller)}, 10+caller)...)
			binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
			var buf []byte
			reply := make(chan floorReply, 1)
			for range 200 {
				got, err := c.call(frame, &buf, reply)
				if err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(got, buf) {
					t.Errorf("caller %d got % x, sent % x", caller, got, buf)
					return
				}
			}
		})
	}
	wg.Wait()
	c.close()
	var buf []byte
	if _, err := c.call(make([]byte, 16), &buf, make(chan floorReply, 1)); err == nil {
		t.Error("a call after close succeeded")
	}
}

// TestCaptureKievRequest checks that the raw-TCP system sends what kiev
// sends: one Request frame, its length prefix whole.
func TestCaptureKievRequest(t *testing.T) {
	srv, err := startServers()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	rc, err := newRawConn(srv.addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	for _, p := range allPayloads {
		f := rc.frames[p]
		if len(f) < 16 || int(binary.BigEndian.Uint32(f))+4 != len(f) || f[4] != 1 {
			t.Errorf("%s: not one Request frame: % x", p, f[:min(len(f), 32)])
		}
		if n := blobSize(p); n > 0 && len(f) < n {
			t.Errorf("%s: frame of %d bytes, shorter than its payload", p, len(f))
		}
		call, _ := rc.Caller(p)
		if err := call(context.Background()); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// TestMessageSize checks that the protobuf message is rpcx-benchmark's
// 581 bytes.
func TestMessageSize(t *testing.T) {
	if n := protoSize(newMessagePB()); n != 581 {
		t.Errorf("BenchmarkMessage encodes to %d bytes, want 581", n)
	}
}

func protoSize(m proto.Message) int { return proto.Size(m) }

// A run at one concurrency still draws its charts: the throughput chart's
// log axis gets a range around it.
func TestRunOneConcurrency(t *testing.T) {
	out := t.TempDir()
	var stdout bytes.Buffer
	stderr := &proc.Output{}
	args := []string{"-systems=raw-tcp", "-payloads=small", "-callers=1", "-loads=25", "-repeats=1", "-pinned=false",
		"-warmup=20ms", "-duration=50ms", "-open-duration=50ms", "-out=" + out}
	if code := compareMain(args, strings.NewReader(""), &stdout, stderr); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if st, err := os.Stat(filepath.Join(out, "throughput-small.png")); err != nil || st.Size() == 0 {
		t.Fatalf("throughput chart: %v", err)
	}
}

// The report says how the collector of both processes was set, since
// they inherit it and it moves every allocating system's figures.
func TestGCSetting(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{nil, "default GC (GOGC=100)"},
		{map[string]string{"GOGC": "400"}, "GOGC=400"},
		{map[string]string{"GOGC": "off", "GOMEMLIMIT": "2GiB"}, "GOGC=off GOMEMLIMIT=2GiB"},
	} {
		if got := gcSetting(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("gcSetting(%v) = %q, want %q", c.env, got, c.want)
		}
	}
}

// The open-loop benchmark offers the rate it is given, and reports the
// rate it achieved with the latency quantiles.
func TestBenchOpenReports(t *testing.T) {
	l := startLoader(t)
	r := testing.Benchmark(func(b *testing.B) { benchOpen(b, l, "kiev-msgpack", 2000) })
	if r.N == 0 {
		t.Fatal("the benchmark failed")
	}
	if got := r.Extra["calls/s"]; got < 1500 || got > 2500 {
		t.Errorf("achieved %.0f calls/s at an offered 2000/s", got)
	}
	p50, p99 := r.Extra["p50-ns"], r.Extra["p99-ns"]
	if p50 <= 0 || p99 < p50 {
		t.Errorf("p50 %v ns, p99 %v ns: want 0 < p50 <= p99", p50, p99)
	}
}

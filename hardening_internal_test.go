package kiev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kievrpc/kiev/internal/transport"
	"github.com/kievrpc/kiev/internal/wire"
)

type PresizeSvc struct{}

func (PresizeSvc) Echo(n int, reply *int) error { *reply = n; return nil }

// TestMetadataCountIsNoAllocation makes calls whose header repeats one
// empty metadata pair 20,000 times. The server sized the call's metadata
// map by the count of pairs: 1.28 MiB per call for a map of one key.
func TestMetadataCountIsNoAllocation(t *testing.T) {
	s := NewServer()
	defer s.Close()
	if err := s.Register(PresizeSvc{}); err != nil {
		t.Fatal(err)
	}
	b := wire.BeginFrame(nil, wire.TypeRequest, 1)
	b = wire.AppendString(b, wire.KeyMethod, "PresizeSvc.Echo")
	b = wire.AppendString(b, wire.KeyCodec, "msgpack")
	for range 20000 {
		b = wire.AppendMeta(b, "", "")
	}
	if err := wire.EndHeader(b, 0); err != nil {
		t.Fatal(err)
	}
	b = append(b, 0x01)
	if err := wire.EndFrame(b, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	f, err := wire.Parse(b[4:])
	if err != nil {
		t.Fatal(err)
	}
	var h wire.Header
	if err := wire.ParseHeader(f.Header, &h); err != nil {
		t.Fatal(err)
	}
	const calls = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range calls {
		var hd transport.Head
		hd.Read(&f, &h)
		sc, _, msg := s.open(&hd, t.Context(), nil)
		if sc == nil {
			t.Fatal(msg)
		}
		if len(sc.req.Metadata) != 1 {
			t.Fatalf("metadata %v; want the one empty key", sc.req.Metadata)
		}
		sc.Release()
	}
	runtime.ReadMemStats(&after)
	perCall := (after.TotalAlloc - before.TotalAlloc) / calls
	t.Logf("%d bytes allocated per call of %d metadata pairs", perCall, h.MetaCount)
	if perCall > 16<<10 {
		t.Errorf("%d bytes allocated per call; want a few KiB at most, whatever the count of pairs", perCall)
	}
}

// flakyListener fails its first n Accepts with a temporary error, as a
// listener does while the process is out of file descriptors.
type flakyListener struct {
	net.Listener
	n atomic.Int32
}

type tempErr struct{}

func (tempErr) Error() string   { return "accept: too many open files" }
func (tempErr) Temporary() bool { return true }
func (tempErr) Timeout() bool   { return false }

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.n.Add(-1) >= 0 {
		return nil, tempErr{}
	}
	return l.Listener.Accept()
}

// fcgiGetValues is a FastCGI FCGI_GET_VALUES management record, which a
// responder answers with FCGI_GET_VALUES_RESULT (type 10).
var fcgiGetValues = []byte{1, 9, 0, 0, 0, 0, 0, 0}

// TestFastCGIOutlivesAcceptErrors fails ServeFastCGI's first Accepts as a
// process out of file descriptors does. ServeFastCGI stopped for good at
// the first; now it retries, and serves once Accept works again.
func TestFastCGIOutlivesAcceptErrors(t *testing.T) {
	s := NewServer(WithLogger(slog.New(slog.DiscardHandler)))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: l}
	fl.n.Store(3)
	done := make(chan error, 1)
	go func() { done <- s.ServeFastCGI(fl) }()
	defer func() {
		s.Close()
		if err := <-done; err != ErrServerClosed {
			t.Errorf("ServeFastCGI returned %v; want ErrServerClosed", err)
		}
	}()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second)) // safety net only
	if _, err := nc.Write(fcgiGetValues); err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, 8)
	if _, err := io.ReadFull(nc, hdr); err != nil {
		t.Fatalf("no answer after three failed Accepts: %v", err)
	}
	if hdr[1] != 10 {
		t.Errorf("answered a record of type %d; want FCGI_GET_VALUES_RESULT (10)", hdr[1])
	}
}

// TestFastCGIIdleConnectionCloses makes two requests 100ms apart on a
// FastCGI connection, and then sends nothing: it stays open while it
// carries requests, and closes once idle for the idle timeout. It stayed
// open for ever once.
func TestFastCGIIdleConnectionCloses(t *testing.T) {
	s := NewServer(WithLogger(slog.New(slog.DiscardHandler)), WithFastCGILimits(FastCGILimits{IdleTimeout: 200 * time.Millisecond}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.ServeFastCGI(l) }()
	defer func() {
		s.Close()
		<-done
	}()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	start := time.Now()
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second)) // safety net only
	// Two requests 100ms apart, each within the idle time, are answered
	// on the same connection.
	for range 2 {
		if _, err := nc.Write(fcgiGetValues); err != nil {
			t.Fatal(err)
		}
		hdr := make([]byte, 8)
		if _, err := io.ReadFull(nc, hdr); err != nil {
			t.Fatalf("a request within the idle time: %v", err)
		}
		body := make([]byte, int(hdr[4])<<8|int(hdr[5])+int(hdr[6]))
		if _, err := io.ReadFull(nc, body); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the workload: a pause shorter than the idle time
	}
	_, err = io.Copy(io.Discard, nc) // the rest of the answers, then the close
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the idle connection was not closed within 5s")
	}
	// The last bytes moved 100ms or more after start.
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("closed %v after the first request; want after its last byte plus the idle time, 300ms or more", took)
	} else {
		t.Logf("closed %v after the first request (idle time 200ms, last request at 100ms)", took)
	}
}

// TestRetiredProviderIsRetried: a call that picked a provider as it left
// its service (the registry dropped it, and the client closed its
// endpoint before the balancer's next pick) fails as not sent, so it is
// retried on another provider; only a closed client's calls fail for
// good. Such a call failed with ErrShutdown, now and then, as a provider
// drained under load.
func TestRetiredProviderIsRetried(t *testing.T) {
	srv := NewServer(WithLogger(slog.New(slog.DiscardHandler)))
	if err := srv.Register(new(PresizeSvc)); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()
	c, err := Dial(l.Addr().String(), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	ep := newEndpoint(c, c.single.inst)
	ep.close(fmt.Errorf("%w: provider %s left service PresizeSvc", ErrShutdown, ep.inst.Address), true)
	call := &Call{ServiceMethod: "PresizeSvc.Echo", Args: 1, Reply: new(int), signal: make(chan *Call, 1)}
	_, err = c.start(context.Background(), ep, call, false)
	if !errors.As(err, new(notSent)) || errors.Is(err, errClientClosed) {
		t.Fatalf("a call to a provider that left = %v; want it marked not sent, to retry elsewhere", err)
	}

	ep = newEndpoint(c, c.single.inst)
	ep.close(errClientClosed, false)
	_, err = c.start(context.Background(), ep, call, false)
	if errors.As(err, new(notSent)) || !errors.Is(err, errClientClosed) {
		t.Fatalf("a call of a closed client = %v; want errClientClosed, not retried", err)
	}
}

package kiev_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/internal/nginxtest"
)

// FCGIWait is a service for the FastCGI tests.
type FCGIWait struct{}

// Wait answers ms after it is called: a slow handler.
func (FCGIWait) Wait(ctx context.Context, ms int, reply *int) error {
	time.Sleep(time.Duration(ms) * time.Millisecond) // the workload: a handler that takes its time
	*reply = ms
	return nil
}

// fcgiRecord is a FastCGI record of type typ for request 1.
func fcgiRecord(typ byte, content []byte) []byte {
	rec := []byte{1, typ, 0, 1, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(rec[4:], uint16(len(content)))
	return append(rec, content...)
}

// fcgiBegin is an FCGI_BEGIN_REQUEST of a responder that keeps the
// connection, as nginx's fastcgi_keep_conn sends it.
var fcgiBegin = fcgiRecord(1, []byte{0, 1, 1, 0, 0, 0, 0, 0})

// fcgiCall is the records of a whole FastCGI request that calls
// FCGIWait.Wait with ms, as nginx sends it.
func fcgiCall(ms int) []byte {
	body := fmt.Sprint(ms)
	var params []byte
	for _, kv := range [][2]string{
		{"REQUEST_METHOD", "POST"}, {"SERVER_PROTOCOL", "HTTP/1.1"},
		{"REQUEST_URI", "/FCGIWait.Wait"}, {"HTTP_HOST", "localhost"},
		{"CONTENT_TYPE", "application/json"}, {"CONTENT_LENGTH", fmt.Sprint(len(body))},
	} {
		params = append(params, byte(len(kv[0])), byte(len(kv[1])))
		params = append(append(params, kv[0]...), kv[1]...)
	}
	out := append([]byte(nil), fcgiBegin...)
	out = append(out, fcgiRecord(4, params)...)
	out = append(out, fcgiRecord(4, nil)...)
	out = append(out, fcgiRecord(5, []byte(body))...)
	return append(out, fcgiRecord(5, nil)...)
}

// readFCGIAnswer reads records up to FCGI_END_REQUEST and returns the
// standard output they carried.
func readFCGIAnswer(r io.Reader) (string, error) {
	var out []byte
	for range 100 {
		hdr := make([]byte, 8)
		if _, err := io.ReadFull(r, hdr); err != nil {
			return string(out), err
		}
		body := make([]byte, int(binary.BigEndian.Uint16(hdr[4:]))+int(hdr[6]))
		if _, err := io.ReadFull(r, body); err != nil {
			return string(out), err
		}
		switch hdr[1] {
		case 3: // FCGI_END_REQUEST
			return string(out), nil
		case 6: // FCGI_STDOUT
			out = append(out, body[:binary.BigEndian.Uint16(hdr[4:])]...)
		}
	}
	return string(out), errors.New("no FCGI_END_REQUEST in 100 records")
}

// serveFastCGI serves a server with FCGIWait and opts over FastCGI until
// the test ends, and returns its address.
func serveFastCGI(t *testing.T, opts ...kiev.ServerOption) string {
	t.Helper()
	srv := kiev.NewServer(append([]kiev.ServerOption{kiev.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err := srv.Register(FCGIWait{}); err != nil {
		t.Fatal(err)
	}
	l := listen(t)
	done := make(chan error, 1)
	go func() { done <- srv.ServeFastCGI(l) }()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return l.Addr().String()
}

// closedWithin reads nc until it ends and says how long after start it
// did; it fails the test if nc is still open at start plus limit.
func closedWithin(t *testing.T, name string, nc net.Conn, start time.Time, limit time.Duration) time.Duration {
	t.Helper()
	_ = nc.SetReadDeadline(start.Add(limit))
	_, err := io.Copy(io.Discard, nc)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("%s: still open %v after it began", name, limit)
	}
	return time.Since(start)
}

// TestFastCGISilentAndSlowConnectionsAreCut opens FastCGI connections
// that send nothing, half a record header, a request's first record and no
// more, or a request and then the next dribbled one byte every 50ms, with
// a header timeout of 300ms: each is closed once its record is 300ms
// late. A connection whose request runs three times as long as the header
// timeout is answered, and then stays open, idle, for a further three.
// Before, all of them stayed open until the 5-minute idle timeout.
func TestFastCGISilentAndSlowConnectionsAreCut(t *testing.T) {
	const header = 300 * time.Millisecond
	addr := serveFastCGI(t, kiev.WithFastCGILimits(kiev.FastCGILimits{HeaderTimeout: header, IdleTimeout: 10 * time.Second}))
	dial := func() net.Conn { return dialFCGI(t, addr) }
	start := time.Now()
	const silent = 20
	var conns []net.Conn
	for range silent {
		conns = append(conns, dial())
	}
	half := dial()
	if _, err := half.Write(fcgiBegin[:4]); err != nil {
		t.Fatal(err)
	}
	begun := dial()
	if _, err := begun.Write(fcgiBegin); err != nil {
		t.Fatal(err)
	}
	// The slow loris makes a request, as nginx would over a kept
	// connection, then dribbles the next.
	loris := dial()
	_ = loris.SetReadDeadline(time.Now().Add(5 * time.Second)) // safety net only
	if _, err := loris.Write(fcgiCall(1)); err != nil {
		t.Fatal(err)
	}
	if out, err := readFCGIAnswer(loris); err != nil {
		t.Fatalf("the slow loris's first request: %q, %v", out, err)
	}
	lorisStart := time.Now()
	dribbled := make(chan int, 1)
	go func() {
		n := 0
		rec := fcgiCall(1)
		tick := time.NewTicker(50 * time.Millisecond) // the workload: one byte every 50ms
		defer tick.Stop()
		for ; n < len(rec) && n < 100; n++ {
			if _, err := loris.Write(rec[n : n+1]); err != nil {
				break
			}
			<-tick.C
		}
		dribbled <- n
	}()
	answered := dial()
	if _, err := answered.Write(fcgiCall(int(3 * header / time.Millisecond))); err != nil {
		t.Fatal(err)
	}

	var latest time.Duration
	for i, nc := range conns {
		latest = max(latest, closedWithin(t, fmt.Sprintf("silent connection %d", i), nc, start, 5*time.Second))
	}
	t.Logf("%d silent connections closed by %v (header timeout %v)", silent, latest, header)
	t.Logf("half a header: closed after %v", closedWithin(t, "half a header", half, start, 5*time.Second))
	t.Logf("a request's first record alone: closed after %v", closedWithin(t, "a request's first record", begun, start, 5*time.Second))
	took := closedWithin(t, "the slow loris", loris, lorisStart, 5*time.Second)
	loris.Close()
	t.Logf("after a request answered, a record dribbled a byte every 50ms: closed %v after its first byte, %d bytes sent", took, <-dribbled)
	if took < header {
		t.Errorf("the slow loris was closed %v after its first byte; want the header timeout, %v, first", took, header)
	}
	if latest < header {
		t.Errorf("silent connections closed after %v; want the header timeout, %v, first", latest, header)
	}

	_ = answered.SetReadDeadline(time.Now().Add(5 * time.Second)) // safety net only
	out, err := readFCGIAnswer(answered)
	if err != nil || !strings.HasSuffix(strings.TrimSpace(out), "900") {
		t.Fatalf("a request that runs 900ms: %q, %v; want its answer, 900", out, err)
	}
	_ = answered.SetReadDeadline(time.Now().Add(3 * header))
	if _, err := answered.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("an answered connection, idle for three header timeouts: %v; want it still open", err)
	}
	if _, err := answered.Write(fcgiCall(1)); err != nil {
		t.Fatal(err)
	}
	_ = answered.SetReadDeadline(time.Now().Add(5 * time.Second)) // safety net only
	if out, err := readFCGIAnswer(answered); err != nil {
		t.Fatalf("a second request on the kept connection: %q, %v", out, err)
	}
}

// dialFCGI dials the FastCGI server at addr for the rest of the test.
func dialFCGI(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second)) // safety net only
	return nc
}

// askFCGI sends a request for FCGIWait.Wait(ms) on nc, and returns a
// channel that gets the error of reading its answer.
func askFCGI(t *testing.T, nc net.Conn, ms int) <-chan error {
	t.Helper()
	answered := make(chan error, 1)
	if _, err := nc.Write(fcgiCall(ms)); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := readFCGIAnswer(nc)
		answered <- err
	}()
	return answered
}

// TestFastCGICapHolds serves FastCGI with at most 2 connections: a third
// is answered only once one of two silent ones closes, and two silent
// connections hold the cap only until the header timeout cuts them.
// Before, there was no cap.
func TestFastCGICapHolds(t *testing.T) {
	const header = time.Second
	addr := serveFastCGI(t, kiev.WithFastCGILimits(kiev.FastCGILimits{MaxConns: 2, HeaderTimeout: header}))
	first := dialFCGI(t, addr)
	second := dialFCGI(t, addr)
	thirdConn := dialFCGI(t, addr)
	third := askFCGI(t, thirdConn, 1)
	select {
	case err := <-third:
		t.Fatalf("a third connection was answered (%v) while two were open", err)
	case <-time.After(header / 3): // a bounded look for what must not happen, within the header timeout
	}
	first.Close()
	if err := <-third; err != nil {
		t.Fatalf("the third connection, once the first closed: %v", err)
	}
	second.Close()
	thirdConn.Close()

	start := time.Now()
	dialFCGI(t, addr)
	dialFCGI(t, addr)
	if err := <-askFCGI(t, dialFCGI(t, addr), 1); err != nil {
		t.Fatalf("a connection behind two silent ones: %v", err)
	}
	took := time.Since(start)
	if took < header {
		t.Errorf("a connection behind two silent ones was answered after %v; want the header timeout, %v, first", took, header)
	}
	t.Logf("a connection behind two silent ones answered after %v (header timeout %v)", took, header)
}

// The FastCGI child of TestFastCGIConnectionsLeaveDescriptorsForRPC.
const (
	envFastCGIChild   = "KIEV_TEST_FASTCGI_CHILD" // set in the child
	fastCGIChildFiles = 64                        // its RLIMIT_NOFILE
	fastCGIChildCap   = 16                        // its FastCGILimits.MaxConns
)

// TestFastCGIConnectionsLeaveDescriptorsForRPC runs a server in a child
// process limited to 64 file descriptors, opens 100 FastCGI connections to
// it that send nothing, and has the child call its own RPC port. With
// FastCGI capped at 16 connections the call is answered; before, the
// FastCGI connections took every descriptor and the client could not
// dial.
func TestFastCGIConnectionsLeaveDescriptorsForRPC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envFastCGIChild+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(stdout)
	addr, err := out.ReadString('\n')
	if err != nil {
		t.Fatalf("the child gave no address: %v; stderr: %s", err, stderr.String())
	}
	for range 100 {
		nc, err := net.Dial("tcp", strings.TrimSpace(addr))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(out)
	err = cmd.Wait()
	t.Logf("child: %s", strings.TrimSpace(string(rest)))
	if err != nil {
		t.Fatalf("child: %v; stderr: %s", err, stderr.String())
	}
}

// runFastCGIChild is the child of
// TestFastCGIConnectionsLeaveDescriptorsForRPC. It lowers its descriptor
// limit, serves RPC and FastCGI, prints the FastCGI address, and once the
// parent has opened its connections calls the RPC port. It returns the
// process's exit code.
func runFastCGIChild() int {
	fail := func(err error) int {
		fmt.Println(err)
		return 1
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fail(err)
	}
	lim.Cur = fastCGIChildFiles
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fail(err)
	}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)), kiev.WithFastCGILimits(kiev.FastCGILimits{MaxConns: fastCGIChildCap}))
	defer srv.Close()
	if err := srv.Register(FCGIWait{}); err != nil {
		return fail(err)
	}
	rpc, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	fl := &acceptSignaler{Listener: l, accepted: make(chan struct{}, 1000)}
	go srv.Serve(rpc)
	go srv.ServeFastCGI(fl)
	fmt.Println(l.Addr())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fail(err)
	}
	// The parent has opened its connections. Wait for the cap's worth to be
	// accepted, then look a while for more, as an uncapped server takes
	// them up to its last descriptor.
	n := 0
	for timeout := time.After(5 * time.Second); n < fastCGIChildCap; n++ {
		select {
		case <-fl.accepted:
		case <-timeout:
			return fail(fmt.Errorf("%d FastCGI connections accepted in 5s; want %d", n, fastCGIChildCap))
		}
	}
	for look := time.After(300 * time.Millisecond); ; n++ { // a bounded look for what must not happen
		select {
		case <-fl.accepted:
			continue
		case <-look:
		}
		break
	}
	c, err := kiev.Dial(rpc.Addr().String(), kiev.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return fail(fmt.Errorf("%d FastCGI connections accepted, and Dial of the RPC port: %w", n, err))
	}
	defer c.Close()
	callCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var reply int
	if err := c.Call(callCtx, "FCGIWait.Wait", 1, &reply); err != nil {
		return fail(fmt.Errorf("%d FastCGI connections accepted, and a call to the RPC port: %w", n, err))
	}
	fmt.Printf("%d FastCGI connections accepted of 100 (the cap), under RLIMIT_NOFILE %d; the RPC call answered\n", n, fastCGIChildFiles)
	return 0
}

// acceptSignaler sends on accepted for each connection it accepts.
type acceptSignaler struct {
	net.Listener
	accepted chan struct{}
}

func (l *acceptSignaler) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err == nil {
		select {
		case l.accepted <- struct{}{}:
		default:
		}
	}
	return nc, err
}

// FCGIConcurrency is a service that counts the calls it runs at once.
type FCGIConcurrency struct {
	now, most atomic.Int32
}

// Hold runs for ms, counting itself.
func (s *FCGIConcurrency) Hold(ctx context.Context, ms int, reply *int) error {
	n := s.now.Add(1)
	defer s.now.Add(-1)
	for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
	}
	time.Sleep(time.Duration(ms) * time.Millisecond) // the workload
	*reply = ms
	return nil
}

// TestFastCGICapBehindNginx sends bursts of 16 calls through a real nginx
// to a server capped at 8 FastCGI connections, with fastcgi_keep_conn (and
// nginx keeping 4 idle connections, under the cap) and without: every
// call is answered, and at most 8 run at once. Before, there was no cap.
func TestFastCGICapBehindNginx(t *testing.T) {
	for _, keep := range []bool{true, false} {
		t.Run(map[bool]string{true: "keep_conn", false: "conn_per_request"}[keep], func(t *testing.T) {
			svc := new(FCGIConcurrency)
			srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)), kiev.WithFastCGILimits(kiev.FastCGILimits{MaxConns: 8}))
			if err := srv.Register(svc); err != nil {
				t.Fatal(err)
			}
			l := listen(t)
			done := make(chan error, 1)
			go func() { done <- srv.ServeFastCGI(l) }()
			// Before nginxtest.Start, which skips the test without nginx.
			t.Cleanup(func() {
				srv.Close()
				<-done
			})
			opts := []nginxtest.Option{nginxtest.ReadTimeout(5 * time.Second), nginxtest.Keepalive(4)}
			if !keep {
				opts = append(opts, nginxtest.NoKeepConn())
			}
			ng := nginxtest.Start(t, l.Addr().String(), opts...)
			t.Cleanup(ng.Stop) // first: nginx goes before the server
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 10 * time.Second}
			defer client.CloseIdleConnections()
			start := time.Now()
			codes := make(chan int, 48)
			for range 3 {
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() {
						resp, err := client.Post(ng.URL()+"/FCGIConcurrency.Hold", "application/json", strings.NewReader("50"))
						if err != nil {
							t.Error(err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						codes <- resp.StatusCode
					})
				}
				wg.Wait()
			}
			close(codes)
			ok, other := 0, map[int]int{}
			for c := range codes {
				if c == http.StatusOK {
					ok++
				} else {
					other[c]++
				}
			}
			if ok != 48 {
				t.Errorf("%d of 48 calls answered 200; the others: %v\nnginx's error log:\n%s", ok, other, ng.ErrorLog())
			}
			if most := svc.most.Load(); most > 8 {
				t.Errorf("%d calls ran at once; want at most 8, the cap", most)
			}
			t.Logf("%d of 48 answered 200 in %v, at most %d at once", ok, time.Since(start), svc.most.Load())
		})
	}
}

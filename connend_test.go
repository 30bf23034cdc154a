package kiev_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/admin"
	"github.com/kievrpc/kiev/internal/logtest"
	"github.com/kievrpc/kiev/internal/wire"
)

// The tests of this file check what a client says of the calls pending
// on a connection as it ends: in its log line, its metrics and its
// status, calls the server never read (unsent, and retried) are counted
// apart from calls whose outcome was lost (failed).

// pendingCalls is how many calls the fake servers below read before they
// end the connection.
const pendingCalls = 6

// endingServer listens for a kiev client. On the first connection it
// reads pendingCalls Requests and answers none, then ends the connection
// with end; every later connection it relays to the server at next. It
// returns its address.
func endingServer(t *testing.T, next string, end func(net.Conn) error) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, nc := range conns {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for first := true; ; first = false {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			if first {
				wg.Go(func() {
					if err := readCalls(nc); err != nil {
						t.Errorf("the fake server: %v", err)
						return
					}
					if err := end(nc); err != nil {
						t.Errorf("the fake server ending the connection: %v", err)
					}
				})
				continue
			}
			up, err := net.Dial("tcp", next)
			if err != nil {
				t.Errorf("relaying to %s: %v", next, err)
				nc.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, up)
			mu.Unlock()
			wg.Go(func() { io.Copy(up, nc); up.Close() })
			wg.Go(func() { io.Copy(nc, up); nc.Close() })
		}
	})
	return ln.Addr().String()
}

// readCalls answers the client's preface on nc and reads its frames until
// pendingCalls Requests have come.
func readCalls(nc net.Conn) error {
	r := wire.NewReader(nc, 4096, 1<<20)
	if _, err := wire.ReadPreface(r); err != nil {
		return err
	}
	if _, err := nc.Write(wire.AppendPreface(nil, wire.Version)); err != nil {
		return err
	}
	for n := 0; n < pendingCalls; {
		f, err := r.Next()
		if err != nil {
			return fmt.Errorf("after %d Requests: %w", n, err)
		}
		if f.Type == wire.TypeRequest {
			n++
		}
	}
	return nil
}

// drainUnread ends nc as a draining server does that read none of the
// Requests pending: GoAway, then a last GoAway whose LastID, 0, says it
// read none of them, then the end of its stream.
func drainUnread(nc net.Conn) error {
	goAway := func(last bool) []byte {
		b := wire.BeginFrame(nil, wire.TypeGoAway, 0)
		if last {
			b = wire.AppendUvarint(b, wire.KeyLastID, 0)
		}
		_ = wire.EndHeader(b, 0)
		_ = wire.EndFrame(b, 0, 1<<20)
		return b
	}
	if _, err := nc.Write(append(goAway(false), goAway(true)...)); err != nil {
		return err
	}
	if err := nc.(*net.TCPConn).CloseWrite(); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, nc) // until the client closes
	return nil
}

// callAll makes pendingCalls calls of Arith.Add on c at once, and returns
// how many failed. Their deadline is a safety net: a call that reaches it
// fails the test.
func callAll(c *kiev.Client) (failed int, first error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range pendingCalls {
		wg.Go(func() {
			var r Reply
			if err := c.Call(ctx, "Arith.Add", Args{i, 1}, &r); err != nil {
				mu.Lock()
				failed++
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failed, first
}

// TestDrainedConnectionCountsUnsentCalls has a server drain with six
// calls pending that its last GoAway says it never read: the client
// retries them on a new connection, all succeed, and the log line, the
// metrics and the status page say six calls were unsent and retried, none
// failed. Before, the log said "failed_calls":6 while no call failed, and
// no metric told them apart.
func TestDrainedConnectionCountsUnsentCalls(t *testing.T) {
	srv := kiev.NewServer()
	if err := srv.Register(&Arith{}); err != nil {
		t.Fatal(err)
	}
	real := startServer(t, srv)
	addr := endingServer(t, real, drainUnread)
	logger, log := logtest.New(t)
	c := dial(t, addr, kiev.WithLogger(logger))
	if n, err := callAll(c); n > 0 {
		t.Fatalf("%d of %d calls failed, the first: %v; want none, the unsent ones retried", n, pendingCalls, err)
	}
	line := log.WaitFor(t, 0, "server closed the connection after draining")
	for _, want := range []string{fmt.Sprintf("unsent_calls=%d", pendingCalls), "failed_calls=0"} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q lacks %s", line, want)
		}
	}
	checkConnEnd(t, srv, addr, pendingCalls, 0, pendingCalls)
}

// TestLostConnectionCountsFailedCalls has a server's connection cut with
// six calls in flight and no GoAway, as when it is killed: their outcome
// is lost, so they fail (the method is not idempotent), and the log line,
// the metrics and the status page count six failed calls, none unsent.
func TestLostConnectionCountsFailedCalls(t *testing.T) {
	srv := kiev.NewServer()
	if err := srv.Register(&Arith{}); err != nil {
		t.Fatal(err)
	}
	real := startServer(t, srv)
	addr := endingServer(t, real, func(nc net.Conn) error { return nc.Close() })
	logger, log := logtest.New(t)
	c := dial(t, addr, kiev.WithLogger(logger))
	if n, err := callAll(c); n != pendingCalls || !errors.Is(err, kiev.ErrShutdown) {
		t.Fatalf("%d of %d calls failed, the first: %v; want all, with ErrShutdown", n, pendingCalls, err)
	}
	line := log.WaitFor(t, 0, "connection lost")
	for _, want := range []string{"unsent_calls=0", fmt.Sprintf("failed_calls=%d", pendingCalls)} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q lacks %s", line, want)
		}
	}
	checkConnEnd(t, srv, addr, 0, pendingCalls, 0)
}

// checkConnEnd checks that the metrics, the status page and the status
// of srv's admin handler, for the client of target, count unsent and failed calls at the
// end of a connection, and retried retries of unsent calls.
func checkConnEnd(t *testing.T, srv *kiev.Server, target string, unsent, failed, retried int) {
	t.Helper()
	hs := httptest.NewServer(srv.AdminHandler())
	defer hs.Close()
	body := get(t, hs.URL+"/metrics")
	for _, want := range []string{
		fmt.Sprintf(`kiev_client_connection_ended_calls_total{outcome="unsent",target=%q} %d`, target, unsent),
		fmt.Sprintf(`kiev_client_connection_ended_calls_total{outcome="failed",target=%q} %d`, target, failed),
		fmt.Sprintf(`kiev_client_retries_total{reason="unsent",target=%q} %d`, target, retried),
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	page := get(t, hs.URL+"/")
	for _, want := range []string{fmt.Sprintf("%d unsent", unsent), fmt.Sprintf("%d failed", failed)} {
		if i := strings.Index(page, `<p class="client" data-target="`+target+`"`); i < 0 || !strings.Contains(page[i:], want) {
			t.Errorf("the status page lacks %q for the client of %s", want, target)
		}
	}
	cs := srv.Status(context.Background()).Clients
	i := slices.IndexFunc(cs, func(c admin.ClientStatus) bool { return c.Target == target })
	if i < 0 {
		t.Fatalf("the status lists no client of %s", target)
	}
	c := cs[i]
	if want := (admin.ConnEndedStatus{Unsent: int64(unsent), Failed: int64(failed)}); c.ConnEnded != want {
		t.Errorf("the status of the client of %s: connection_ended_calls %+v, want %+v", target, c.ConnEnded, want)
	}
}

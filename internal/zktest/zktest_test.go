package zktest

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestShared(t *testing.T) {
	if err := Ready(Shared(t), time.Second); err != nil {
		t.Fatalf("the shared server at $%s does not answer: %v", EnvAddr, err)
	}
}

func TestServerStopStart(t *testing.T) {
	s := Start(t)
	if err := Ready(s.Addr(), time.Second); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if err := Ruok(s.Addr(), time.Second); err == nil {
		t.Fatal("the server answers after Stop")
	}
	s.Stop() // stopping a stopped server does nothing
	s.Start()
	if err := Ready(s.Addr(), time.Second); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
}

func TestStartSkipsWithoutClasspath(t *testing.T) {
	if os.Getenv(EnvClasspath) == "" {
		t.Skip("nothing to check: the variable is unset already")
	}
	t.Setenv(EnvClasspath, "")
	t.Run("skip", func(t *testing.T) {
		Start(t)
		t.Fatal("Start did not skip")
	})
}

// echo serves one loopback listener that echoes what it reads.
func echo(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	conns := make(chan net.Conn, 16)
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns <- c
			go io.Copy(c, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	expect(t, c, msg)
}

func expect(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		t.Fatalf("read %q, %v; want %q", buf, err, msg)
	}
}

func TestProxy(t *testing.T) {
	p := NewProxy(t, echo(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c, "hello")

	p.Pause()
	if _, err := io.WriteString(c, "held"); err != nil {
		t.Fatal(err)
	}
	// Nothing to wait for but silence: a short read deadline.
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	var ne net.Error
	if n, err := c.Read(make([]byte, 4)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read while paused = %d, %v; want a timeout", n, err)
	}
	p.Resume()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	expect(t, c, "held")

	p.Cut()
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("Read after Cut = %d, nil; want an error", n)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	roundTrip(t, c2, "again")
}

func TestSharedEnsemble(t *testing.T) {
	for _, addr := range SharedEnsemble(t) {
		mode, err := Mode(addr, time.Second)
		if err != nil {
			t.Fatalf("a member of the shared ensemble at $%s does not answer: %v", EnvEnsemble, err)
		}
		if mode != "leader" && mode != "follower" {
			t.Errorf("%s is %s; want a leader or a follower", addr, mode)
		}
	}
}

// TestEnsembleKillLeader kills the leader of a private ensemble: another
// member leads, and the killed one comes back as a follower.
func TestEnsembleKillLeader(t *testing.T) {
	start := time.Now()
	e := StartEnsemble(t, 3)
	t.Logf("3 members serving after %v", time.Since(start).Round(time.Millisecond))
	leader := e.AwaitLeader(10 * time.Second)
	followers := 0
	for _, m := range e.Members {
		if mode, err := m.Mode(time.Second); err == nil && mode == "follower" {
			followers++
		}
	}
	if followers != 2 {
		t.Fatalf("%d followers; want 2: %s", followers, e.Modes())
	}

	leader.Kill()
	leader.Kill() // killing a stopped member does nothing
	killed := time.Now()
	next := e.AwaitLeader(10 * time.Second)
	if next == leader {
		t.Fatalf("%s still leads after it was killed", leader)
	}
	t.Logf("new leader %s after %v", next, time.Since(killed).Round(time.Millisecond))
	leader.Start()
	if mode, err := leader.Mode(time.Second); err != nil || mode != "follower" {
		t.Fatalf("the old leader came back as %q, %v; want a follower", mode, err)
	}
}

func TestSessions(t *testing.T) {
	s := NewSessions()
	start := time.Now()
	a, b := s.Logger("a"), s.Logger("b").With("k", "v")
	a.Debug("kiev/registry/zookeeper: session established", "server", "127.0.0.1:1")
	b.Warn("kiev/registry/zookeeper: lost the connection to ZooKeeper; reconnecting", "server", "127.0.0.1:2")
	b.Debug("kiev/registry/zookeeper: session established", "server", "127.0.0.1:3")
	a.Info("something else", "server", "127.0.0.1:4")
	if got := s.Where("a"); got != "127.0.0.1:1" {
		t.Errorf(`Where("a") = %q`, got)
	}
	if got := s.Where("c"); got != "" {
		t.Errorf(`Where("c") = %q; want ""`, got)
	}
	es := s.Since(start)
	if len(es) != 3 || Count(es, Established) != 2 || Count(es, Disconnected) != 1 || Count(es, Expired) != 0 {
		t.Errorf("Since = %+v; want 2 established, 1 disconnected", es)
	}
	if e := s.AwaitEstablished(t, "b", "127.0.0.1:2", start, time.Second); e.Server != "127.0.0.1:3" {
		t.Errorf("AwaitEstablished = %+v", e)
	}
	if tail := s.Tail(1 << 10); !strings.Contains(tail, "something else") || !strings.Contains(tail, "k=v") {
		t.Errorf("Tail lacks a line:\n%s", tail)
	}
}

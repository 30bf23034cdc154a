package zktest

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// SharedEnsemble returns the addresses of the members of the shared
// ensemble named by $KIEV_ZOOKEEPER_ENSEMBLE, or skips the test when it is
// unset. Tests sharing it must keep their nodes apart, and must not stop
// its members: those that do start an [Ensemble] of their own.
func SharedEnsemble(t testing.TB) []string {
	t.Helper()
	v := os.Getenv(EnvEnsemble)
	if v == "" {
		t.Skipf("zktest: %s is not set; %s to test against a ZooKeeper ensemble", EnvEnsemble, howToRun)
	}
	return strings.Split(v, ",")
}

// Ensemble is a private ZooKeeper ensemble: its members are [Server]s on
// loopback, each with its own client, quorum and election ports and data
// directory, which a test may Kill, Stop and Start one by one. Members
// need a majority of them running to serve; while they have none, every
// running member refuses sessions.
type Ensemble struct {
	t       testing.TB
	Members []*Server
}

// StartEnsemble starts an ensemble of n members (3 or 5, typically) and
// waits until every member serves, which takes a quorum and an elected
// leader. Its members are stopped when the test ends; if the test failed,
// the end of each member's log is printed first. StartEnsemble skips the
// test when $KIEV_ZOOKEEPER_CLASSPATH is unset.
func StartEnsemble(t testing.TB, n int) *Ensemble {
	t.Helper()
	if n < 1 {
		t.Fatalf("zktest: an ensemble of %d members", n)
	}
	e := &Ensemble{t: t}
	var peers strings.Builder
	for id := 1; id <= n; id++ {
		m := newServer(t, id)
		e.Members = append(e.Members, m)
		fmt.Fprintf(&peers, "server.%d=127.0.0.1:%d:%d\n", id, freePort(t), freePort(t))
	}
	for _, m := range e.Members {
		m.writeConfig(peers.String())
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, m := range e.Members {
			wg.Go(m.Stop)
		}
		wg.Wait()
	})
	t.Cleanup(func() { // before the members stop, lest their shutdown fill the tails
		if t.Failed() {
			e.logTails()
		}
	})
	// Each under its lock, released by defer: a member that fails to start
	// fails the test (runtime.Goexit), and the cleanup that stops the
	// members takes the locks again.
	for _, m := range e.Members {
		m.locked(m.launchLocked)
	}
	for _, m := range e.Members {
		m.locked(m.awaitLocked)
	}
	return e
}

// Servers returns the members' addresses, for a client's list of servers.
func (e *Ensemble) Servers() []string {
	addrs := make([]string, len(e.Members))
	for i, m := range e.Members {
		addrs[i] = m.Addr()
	}
	return addrs
}

// Leader returns the member that says it leads, or nil if none does now:
// an election is under way, or too few members run.
func (e *Ensemble) Leader() *Server {
	for _, m := range e.Members {
		if mode, err := m.Mode(time.Second); err == nil && mode == "leader" {
			return m
		}
	}
	return nil
}

// AwaitLeader waits up to timeout for a member to lead, polling each
// member's "srvr", and returns it. It fails the test if none leads by
// then.
func (e *Ensemble) AwaitLeader(timeout time.Duration) *Server {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if l := e.Leader(); l != nil {
			return l
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("zktest: no member of the ensemble leads after %v: %s", timeout, e.Modes())
		}
		time.Sleep(10 * time.Millisecond) // polling the members; nothing to wait on
	}
}

// Modes describes every member's state now, for messages: "member 1
// (127.0.0.1:port): follower, member 2 (...): down: connection refused".
func (e *Ensemble) Modes() string {
	parts := make([]string, len(e.Members))
	for i, m := range e.Members {
		mode, err := m.Mode(time.Second)
		if err != nil {
			mode = "down: " + err.Error()
		}
		parts[i] = m.String() + ": " + mode
	}
	return strings.Join(parts, ", ")
}

// logTails logs the end of every member's log.
func (e *Ensemble) logTails() {
	for _, m := range e.Members {
		e.t.Logf("zktest: the end of the log of %s:\n%s", m, m.logTail())
	}
}

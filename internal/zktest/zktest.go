// Package zktest runs real ZooKeeper servers for tests: a private server
// per test that the test may stop and restart ([Start]), a private
// ensemble whose members it may kill, stop and restart ([StartEnsemble]),
// the shared server and the shared ensemble that scripts/services.sh
// starts ([Shared], [SharedEnsemble]), a TCP [Proxy] that can pause or cut
// the connections between a client and a server, and a record of the
// session changes kiev's registries log ([Sessions]).
//
// The servers come from the Debian zookeeper package. scripts/services.sh
// installs it, and `eval "$(scripts/services.sh env)"` sets the variables
// this package reads:
//
//   - KIEV_ZOOKEEPER, the address of the shared server ("127.0.0.1:2181");
//   - KIEV_ZOOKEEPER_ENSEMBLE, the addresses of the shared ensemble's
//     members ("127.0.0.1:2182,127.0.0.1:2183,127.0.0.1:2184");
//   - KIEV_ZOOKEEPER_CLASSPATH, the Java classpath of ZooKeeper's server.
//
// Tests skip, saying which variable is missing, where they are unset.
package zktest

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The environment variables the package reads.
const (
	EnvAddr      = "KIEV_ZOOKEEPER"
	EnvEnsemble  = "KIEV_ZOOKEEPER_ENSEMBLE" // comma-separated
	EnvClasspath = "KIEV_ZOOKEEPER_CLASSPATH"
)

// StartTimeout bounds how long Start waits for a server to answer.
const StartTimeout = 30 * time.Second

const howToRun = `run "scripts/services.sh up" and eval "$(scripts/services.sh env)"`

// Shared returns the address of the shared ZooKeeper server named by
// $KIEV_ZOOKEEPER, or skips the test when it is unset. Tests sharing it
// must keep their nodes apart, for example under a root made from the
// test's name.
func Shared(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		t.Skipf("zktest: %s is not set; %s to test against a real ZooKeeper", EnvAddr, howToRun)
	}
	return addr
}

// Server is a private ZooKeeper server: a java process with its own data
// directory and loopback port, standalone ([Start]) or a member of an
// [Ensemble]. Stop (or Kill) and Start may be called in turn to stop it and
// bring it back with the same port and data, so that its sessions and
// persistent nodes survive, as an ensemble's do.
type Server struct {
	t         testing.TB
	dir       string
	port      int
	id        int    // myid in an ensemble; 0 for a standalone server
	heap      string // the JVM's -Xmx flag
	classpath string
	java      string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	log    *os.File
}

// Start starts a private ZooKeeper on a free loopback port, with its data
// in a directory of t.TempDir(), and waits until it serves sessions. The
// server is stopped when the test ends. Start skips the test when
// $KIEV_ZOOKEEPER_CLASSPATH is unset.
func Start(t testing.TB) *Server {
	t.Helper()
	s := newServer(t, 0)
	s.writeConfig("")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("zktest: the end of ZooKeeper's log:\n%s", s.logTail())
		}
	})
	t.Cleanup(s.Stop)
	s.Start()
	return s
}

// newServer prepares a server, member id of an ensemble or 0 for a
// standalone one, on a free port, with a directory of t.TempDir(). It
// skips the test when $KIEV_ZOOKEEPER_CLASSPATH is unset.
func newServer(t testing.TB, id int) *Server {
	t.Helper()
	cp := os.Getenv(EnvClasspath)
	if cp == "" {
		t.Skipf("zktest: %s is not set; %s to run private ZooKeeper servers", EnvClasspath, howToRun)
	}
	java, err := exec.LookPath("java")
	if err != nil {
		t.Fatalf("zktest: %s is set but java is not installed: %v", EnvClasspath, err)
	}
	heap := "-Xmx256m"
	if id > 0 {
		heap = "-Xmx128m" // three of them share a small machine
	}
	return &Server{t: t, dir: t.TempDir(), port: freePort(t), id: id, heap: heap, classpath: cp, java: java}
}

// writeConfig writes the server's zoo.cfg, with extra (an ensemble's
// server lines) at its end, and the myid file of an ensemble's member.
func (s *Server) writeConfig(extra string) {
	s.t.Helper()
	data := filepath.Join(s.dir, "data")
	cfg := fmt.Sprintf(`tickTime=500
initLimit=10
syncLimit=5
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
maxClientCnxns=0
forceSync=no
admin.enableServer=false
4lw.commands.whitelist=*
`, data, s.port) + extra
	if err := os.WriteFile(filepath.Join(s.dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
		s.t.Fatalf("zktest: %v", err)
	}
	if s.id == 0 {
		return
	}
	if err := os.MkdirAll(data, 0o755); err != nil {
		s.t.Fatalf("zktest: %v", err)
	}
	if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(s.id)+"\n"), 0o644); err != nil {
		s.t.Fatalf("zktest: %v", err)
	}
}

// Addr returns the server's address, "127.0.0.1:port". It stays the same
// across Stop and Start.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Start starts the stopped server again on the same port and data
// directory and waits until it serves sessions. It fails the test if the
// server does not come up within [StartTimeout]. A member of an ensemble
// serves only once it has joined a quorum: Start it while a majority of
// the members runs, or while starting the member that makes one.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.launchLocked()
	s.awaitLocked()
}

// launchLocked starts the java process. REQUIRES s.mu is held.
func (s *Server) launchLocked() {
	s.t.Helper()
	if s.cmd != nil {
		s.t.Fatalf("zktest: Start of %s, which is running", s)
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "zookeeper.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatalf("zktest: %v", err)
	}
	cmd := exec.Command(s.java,
		s.heap, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
		"-Dorg.slf4j.simpleLogger.showDateTime=true",
		"-cp", s.classpath,
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(s.dir, "zoo.cfg"))
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		s.t.Fatalf("zktest: starting ZooKeeper: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited, s.log = cmd, exited, logf
}

// awaitLocked waits until the launched server serves sessions, for at
// most [StartTimeout]. REQUIRES s.mu is held.
func (s *Server) awaitLocked() {
	s.t.Helper()
	deadline := time.Now().Add(StartTimeout)
	for {
		if Ready(s.Addr(), time.Second) == nil {
			return
		}
		select {
		case <-s.exited:
			state := s.cmd.ProcessState
			s.reapLocked()
			s.t.Fatalf("zktest: %s exited before serving: %s\n%s", s, state, s.logTail())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stopLocked()
			s.t.Fatalf("zktest: %s was not serving within %v\n%s", s, StartTimeout, s.logTail())
		}
	}
}

// locked runs f with s.mu held, released however f ends (t.Fatalf in it
// ends the goroutine).
func (s *Server) locked(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

// Stop stops the server (SIGTERM, then SIGKILL after 10 s) and waits for
// it to exit. Its data directory is kept for Start. Stopping a stopped
// server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	s.reapLocked()
}

// Kill kills the server with SIGKILL, as a crash or the kernel's OOM
// killer would, and waits for it to exit. Its data directory is kept for
// Start. Killing a stopped server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.exited
	s.reapLocked()
}

func (s *Server) reapLocked() {
	s.log.Close()
	s.cmd, s.exited, s.log = nil, nil, nil
}

// Mode returns what the server says it is, within timeout: "standalone",
// "leader" or "follower". It fails if the server is down or does not
// serve, as a member that lost its quorum does not.
func (s *Server) Mode(timeout time.Duration) (string, error) { return Mode(s.Addr(), timeout) }

// String names the server in messages: "ZooKeeper on 127.0.0.1:port", or
// "member 2 (127.0.0.1:port)" of an ensemble.
func (s *Server) String() string {
	if s.id == 0 {
		return "ZooKeeper on " + s.Addr()
	}
	return fmt.Sprintf("member %d (%s)", s.id, s.Addr())
}

// logTail returns the end of the server's log, for failure messages.
func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "zookeeper.log"))
	const max = 16 << 10
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// Ruok asks the ZooKeeper server at addr "ruok" and returns nil if it
// answers "imok" within timeout: the server runs, though it may not serve
// sessions yet.
func Ruok(addr string, timeout time.Duration) error {
	b, err := fourLetters(addr, "ruok", timeout)
	if err != nil {
		return err
	}
	if string(b) != "imok" {
		return fmt.Errorf("zktest: %s answered ruok with %q", addr, b)
	}
	return nil
}

// Ready returns nil if the ZooKeeper server at addr serves sessions: its
// answer to "srvr" within timeout shows its mode (standalone, leader or
// follower).
func Ready(addr string, timeout time.Duration) error {
	_, err := Mode(addr, timeout)
	return err
}

// Mode returns the mode the ZooKeeper server at addr shows in its answer to
// "srvr" within timeout: "standalone", "leader" or "follower".
func Mode(addr string, timeout time.Duration) (string, error) {
	b, err := fourLetters(addr, "srvr", timeout)
	if err != nil {
		return "", err
	}
	_, rest, ok := bytes.Cut(b, []byte("\nMode: "))
	if !ok {
		return "", fmt.Errorf("zktest: %s is not serving: %q", addr, b)
	}
	mode, _, _ := bytes.Cut(rest, []byte("\n"))
	return string(bytes.TrimSpace(mode)), nil
}

// fourLetters sends ZooKeeper's four-letter word cmd to addr and returns
// the answer.
func fourLetters(addr, cmd string, timeout time.Duration) ([]byte, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, cmd); err != nil {
		return nil, err
	}
	return io.ReadAll(c)
}

// freePort returns a loopback TCP port that was free a moment ago, and
// that it has not returned before in this process: the kernel may hand a
// port just closed out again, and an ensemble's members and their peer
// ports, chosen one after another, must all differ.
func freePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("zktest: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !portsGiven[port] {
			portsGiven[port] = true
			return port
		}
	}
	t.Fatal("zktest: 100 free ports in a row had been handed out before")
	return 0
}

// The ports freePort has returned.
var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// Package zktest runs real ZooKeeper servers for tests: a private server
// per test that the test may stop and restart ([Start]), the shared server
// that scripts/services.sh starts ([Shared]), and a TCP [Proxy] that can
// pause or cut the connections between a client and a server.
//
// The servers come from the Debian zookeeper package. scripts/services.sh
// installs it, and `eval "$(scripts/services.sh env)"` sets the two
// variables this package reads:
//
//   - KIEV_ZOOKEEPER, the address of the shared server ("127.0.0.1:2181");
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

// Server is a private ZooKeeper server: a standalone java process with its
// own data directory and loopback port. Stop and Start may be called in
// turn to stop it and bring it back with the same port and data, so that
// its sessions and persistent nodes survive, as an ensemble's do.
type Server struct {
	t         testing.TB
	dir       string
	port      int
	classpath string
	java      string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	log    *os.File
}

// Start starts a private ZooKeeper on a free loopback port, with its data
// in a directory of t.TempDir(), and waits until it serves sessions. The server is
// stopped when the test ends. Start skips the test when
// $KIEV_ZOOKEEPER_CLASSPATH is unset.
func Start(t testing.TB) *Server {
	t.Helper()
	cp := os.Getenv(EnvClasspath)
	if cp == "" {
		t.Skipf("zktest: %s is not set; %s to run private ZooKeeper servers", EnvClasspath, howToRun)
	}
	java, err := exec.LookPath("java")
	if err != nil {
		t.Fatalf("zktest: %s is set but java is not installed: %v", EnvClasspath, err)
	}
	s := &Server{t: t, dir: t.TempDir(), port: freePort(t), classpath: cp, java: java}
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
`, filepath.Join(s.dir, "data"), s.port)
	if err := os.WriteFile(filepath.Join(s.dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
		t.Fatalf("zktest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("zktest: the end of ZooKeeper's log:\n%s", s.logTail())
		}
	})
	t.Cleanup(s.Stop)
	s.Start()
	return s
}

// Addr returns the server's address, "127.0.0.1:port". It stays the same
// across Stop and Start.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Start starts the stopped server again on the same port and data
// directory and waits until it serves sessions. It fails the test if the server
// does not come up within [StartTimeout].
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.t.Fatalf("zktest: Start of the server on %s, which is running", s.Addr())
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "zookeeper.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatalf("zktest: %v", err)
	}
	cmd := exec.Command(s.java,
		"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
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

	deadline := time.Now().Add(StartTimeout)
	for {
		if Ready(s.Addr(), time.Second) == nil {
			return
		}
		select {
		case <-exited:
			s.reapLocked()
			s.t.Fatalf("zktest: ZooKeeper exited before serving: %s\n%s", cmd.ProcessState, s.logTail())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stopLocked()
			s.t.Fatalf("zktest: ZooKeeper on %s was not serving within %v\n%s", s.Addr(), StartTimeout, s.logTail())
		}
	}
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

func (s *Server) reapLocked() {
	s.log.Close()
	s.cmd, s.exited, s.log = nil, nil, nil
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
	b, err := fourLetters(addr, "srvr", timeout)
	if err != nil {
		return err
	}
	if !bytes.Contains(b, []byte("\nMode: ")) {
		return fmt.Errorf("zktest: %s is not serving: %q", addr, b)
	}
	return nil
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

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("zktest: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

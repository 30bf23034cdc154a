// Package etcdtest runs real etcd servers for the etcd registry's tests: a
// private server per test that the test may stop, restart or wipe
// ([Start]), the shared server that scripts/services.sh starts ([Shared]),
// and a TCP [Proxy] that can pause or cut the connections between a client
// and a server.
//
// The servers come from Debian's etcd-server package. scripts/services.sh
// installs it, and `eval "$(scripts/services.sh env)"` sets the two
// variables this package reads:
//
//   - KIEV_ETCD, the client address of the shared server ("127.0.0.1:2379");
//   - KIEV_ETCD_BIN, the etcd binary that private servers run.
//
// Tests skip, saying which variable is missing, where they are unset.
package etcdtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kievrpc/kiev/internal/zktest"
)

// The environment variables the package reads.
const (
	EnvAddr = "KIEV_ETCD"
	EnvBin  = "KIEV_ETCD_BIN"
)

// StartTimeout bounds how long Start waits for a server to be healthy.
const StartTimeout = 30 * time.Second

const howToRun = `run "scripts/services.sh up" and eval "$(scripts/services.sh env)"`

// Shared returns the client address of the shared etcd server named by
// $KIEV_ETCD, or skips the test when it is unset. Tests sharing it must
// keep their keys apart, for example under a root made from the test's
// name.
func Shared(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		t.Skipf("etcdtest: %s is not set; %s to test against a real etcd", EnvAddr, howToRun)
	}
	return addr
}

// Proxy forwards TCP connections to a target and can pause them, as a
// network partition does, or cut them; see zktest.Proxy, which it is.
type Proxy = zktest.Proxy

// NewProxy starts a proxy to target on a free loopback port, closed when
// the test ends.
func NewProxy(t testing.TB, target string) *Proxy { return zktest.NewProxy(t, target) }

// Server is a private etcd server: a single-member cluster with its own
// data directory and loopback ports. Stop and Start may be called in turn
// to stop it and bring it back with the same ports and data, so that its
// keys and leases survive, as a cluster's do; Wipe deletes its data in
// between, as a member rebuilt from nothing.
type Server struct {
	t          testing.TB
	dir        string
	bin        string
	port, peer int

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	log    *os.File
}

// Start starts a private etcd on free loopback ports, with its data in a
// directory of t.TempDir(), and waits until it is healthy (it has elected
// itself leader). The server is stopped when the test ends. Start skips
// the test when $KIEV_ETCD_BIN is unset.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := os.Getenv(EnvBin)
	if bin == "" {
		t.Skipf("etcdtest: %s is not set; %s to run private etcd servers", EnvBin, howToRun)
	}
	s := &Server{t: t, dir: t.TempDir(), bin: bin, port: freePort(t), peer: freePort(t)}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("etcdtest: the end of etcd's log:\n%s", s.logTail())
		}
	})
	t.Cleanup(s.Stop)
	s.Start()
	return s
}

// Addr returns the server's client address, "127.0.0.1:port". It stays
// the same across Stop and Start.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Start starts the stopped server again on the same ports and data
// directory and waits until it is healthy. It fails the test if the server
// is not healthy within [StartTimeout].
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.t.Fatalf("etcdtest: Start of the server on %s, which is running", s.Addr())
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatalf("etcdtest: %v", err)
	}
	client := "http://" + s.Addr()
	peer := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.peer))
	cmd := exec.Command(s.bin,
		"--name", "n1",
		"--data-dir", filepath.Join(s.dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "n1="+peer,
		// A short election timeout makes the single member leader
		// sooner after each start.
		"--heartbeat-interval", "50", "--election-timeout", "500",
		"--log-level", "warn")
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		s.t.Fatalf("etcdtest: starting etcd: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited, s.log = cmd, exited, logf

	deadline := time.Now().Add(StartTimeout)
	for {
		if Healthy(s.Addr(), time.Second) == nil {
			return
		}
		select {
		case <-exited:
			s.reapLocked()
			s.t.Fatalf("etcdtest: etcd exited before it was healthy: %s\n%s", cmd.ProcessState, s.logTail())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stopLocked()
			s.t.Fatalf("etcdtest: etcd on %s was not healthy within %v\n%s", s.Addr(), StartTimeout, s.logTail())
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

// Wipe deletes the stopped server's data, so that the next Start begins a
// new, empty cluster (with a new cluster ID, its revisions from 1, and no
// leases) on the same ports.
func (s *Server) Wipe() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.t.Fatalf("etcdtest: Wipe of the server on %s, which is running", s.Addr())
	}
	if err := os.RemoveAll(filepath.Join(s.dir, "data")); err != nil {
		s.t.Fatalf("etcdtest: %v", err)
	}
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
	b, _ := os.ReadFile(filepath.Join(s.dir, "etcd.log"))
	const max = 16 << 10
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// Healthy returns nil if the etcd server whose client address is addr
// answers GET /health within timeout with {"health":"true"}: it runs and
// has a leader.
func Healthy(addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/health", nil)
	if err != nil {
		return err
	}
	// A transport of its own, closed at once, so that no idle
	// connection outlives the check.
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if err != nil {
		return err
	}
	var h struct {
		Health string `json:"health"`
	}
	if err := json.Unmarshal(body, &h); err != nil || h.Health != "true" {
		return fmt.Errorf("etcdtest: %s is not healthy: %s %q", addr, resp.Status, body)
	}
	return nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

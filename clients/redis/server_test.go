package redis_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// server is a private redis-server, a child of the test, that the test
// may kill and start again on the same port.
type server struct {
	t    testing.TB
	bin  string
	dir  string
	conf string   // the configuration file, if any
	args []string // beyond the port and the files
	port int
	addr string
	cmd  *exec.Cmd
	// exited is closed when cmd has ended.
	exited chan struct{}
}

// startServer starts a private redis-server on a free loopback port with
// the extra arguments args, and stops it when t ends. It skips the test
// if KIEV_REDIS_SERVER is unset.
func startServer(t testing.TB, args ...string) *server {
	t.Helper()
	bin := os.Getenv(envServer)
	if bin == "" {
		t.Skipf("%s is not set; run eval \"$(scripts/services.sh env)\" for the redis-server binary", envServer)
	}
	return launch(t, bin, "", args...)
}

// startSentinel starts a private Sentinel watching master under the
// name name, like startServer.
func startSentinel(t testing.TB, name string, master *server) *server {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	err := os.WriteFile(conf, []byte(fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\n", name, master.port)), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	return launch(t, master.bin, conf, "--sentinel")
}

func launch(t testing.TB, bin, conf string, args ...string) *server {
	t.Helper()
	s := &server{t: t, bin: bin, dir: t.TempDir(), conf: conf, args: args, port: freePort(t)}
	s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	s.start()
	t.Cleanup(s.kill)
	return s
}

// freePort returns a loopback TCP port where nothing listens.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start starts the server and waits until it answers PING.
func (s *server) start() {
	s.t.Helper()
	var args []string
	if s.conf != "" {
		args = append(args, s.conf) // first, as redis-server wants
	}
	args = append(args,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--dir", s.dir, "--logfile", filepath.Join(s.dir, "log"))
	args = append(args, s.args...)
	s.cmd = exec.Command(s.bin, args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting %s: %v", s.bin, err)
	}
	cmd, exited := s.cmd, make(chan struct{})
	s.exited = exited
	go func() {
		cmd.Wait() // reaps the process, whenever it ends
		close(exited)
	}()
	deadline := time.Now().Add(waitTimeout)
	for {
		if reply, err := s.raw("PING"); err == nil && (reply == "+PONG" || strings.HasPrefix(reply, "-NOAUTH")) {
			return
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
			s.t.Fatalf("redis-server exited at start; its log:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s does not answer PING within %v", s.addr, waitTimeout)
		}
		time.Sleep(20 * time.Millisecond) // polling the server's readiness
	}
}

// raw sends one inline command to the server on a connection of its own
// and returns the first line of the reply.
func (s *server) raw(cmd string) (string, error) {
	conn, err := net.DialTimeout("tcp", s.addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(conn, "%s\r\n", cmd); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// kill kills the server with SIGKILL, as a crash would, and waits for it
// to end. It does nothing if the server is not running.
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// waitBlocked waits until a client of the server is blocked, in BLPOP.
func (s *server) waitBlocked(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		info, err := s.bulk("INFO clients")
		if err == nil && strings.Contains(info, "blocked_clients:1") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no client blocked on %s within %v (%v)", s.addr, waitTimeout, err)
		}
		time.Sleep(10 * time.Millisecond) // polling the server
	}
}

// bulk sends one inline command whose reply is a bulk string, and
// returns the string.
func (s *server) bulk(cmd string) (string, error) {
	conn, err := net.DialTimeout("tcp", s.addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(conn, "%s\r\n", cmd); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if err != nil {
		return "", fmt.Errorf("reply %q is no bulk string", head)
	}
	b := make([]byte, n)
	_, err = io.ReadFull(r, b)
	return string(b), err
}

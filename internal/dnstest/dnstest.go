// Package dnstest runs a real DNS server, dnsmasq, for tests: [Start] runs a
// private dnsmasq per test on a free loopback port, answering only from a
// hosts file and an SRV file in a directory of t.TempDir(), so that tests
// share no state and can change the answers as they go. It is the
// authority for the names under .test: a name the files lack has no
// records (NXDOMAIN). Other names it refuses.
//
// The dnsmasq comes from Debian's dnsmasq-base package. scripts/services.sh
// installs it, and `eval "$(scripts/services.sh env)"` sets the variable
// this package reads:
//
//   - KIEV_DNSMASQ, the path of the dnsmasq binary ("/usr/sbin/dnsmasq").
//
// Tests skip, saying that the variable is missing, where it is unset.
package dnstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// EnvBinary is the environment variable that names the dnsmasq binary.
const EnvBinary = "KIEV_DNSMASQ"

// Timeout bounds how long Start waits for dnsmasq to answer, and how long
// SetHosts and SetSRV wait for it to answer with the new records.
const Timeout = 10 * time.Second

const howToRun = `run "scripts/services.sh up" and eval "$(scripts/services.sh env)"`

// readyName is a name the hosts file always holds, to tell when dnsmasq
// answers.
const readyName = "ready.dnstest"

// SRV is one SRV record: Name (such as "_kiev._tcp.feed.test") points at
// Target:Port.
type SRV struct {
	Name     string
	Target   string
	Port     int
	Priority int
	Weight   int
}

// Server is a private dnsmasq on 127.0.0.1.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
	gen  int           // bumped by each change, to tell when dnsmasq has it
}

// Start starts a private dnsmasq that knows no name yet, and waits until it
// answers. It is stopped when the test ends. Start skips the test when
// $KIEV_DNSMASQ is unset.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := os.Getenv(EnvBinary)
	if bin == "" {
		t.Skipf("dnstest: %s is not set; %s to test against a real DNS server", EnvBinary, howToRun)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	t.Cleanup(s.Stop)
	s.write(nil, nil)
	for attempt := 1; ; attempt++ {
		s.port = freePort(t)
		err := s.start()
		if err == nil {
			return s
		}
		if attempt < 3 && strings.Contains(s.log(), "Address already in use") {
			continue
		}
		t.Fatalf("dnstest: %v\n%s", err, s.log())
	}
}

// Addr returns the server's "127.0.0.1:PORT", as a dns:// URL's authority
// takes it.
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// Resolver returns a resolver that asks the server.
func (s *Server) Resolver() *net.Resolver {
	var d net.Dialer
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, s.Addr())
	}}
}

// SetHosts makes the server answer for each name of hosts with its
// addresses, and for no other name, and waits until it does: it rewrites
// the hosts file and sends dnsmasq SIGHUP.
func (s *Server) SetHosts(hosts map[string][]string) {
	s.t.Helper()
	s.write(hosts, nil)
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		s.t.Fatalf("dnstest: SIGHUP: %v", err)
	}
	s.await()
}

// SetSRV makes the server answer with hosts and the SRV records srvs, and
// waits until it does. dnsmasq reads SRV records only when it starts, so
// SetSRV restarts it on the same port; a lookup made meanwhile may fail.
func (s *Server) SetSRV(hosts map[string][]string, srvs []SRV) {
	s.t.Helper()
	s.write(hosts, srvs)
	s.Stop()
	var err error
	for range 50 { // the port may linger a moment after the old one exits
		if err = s.start(); err == nil {
			return
		}
		if !strings.Contains(s.log(), "Address already in use") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("dnstest: restarting dnsmasq: %v\n%s", err, s.log())
}

// write writes the hosts and SRV files, with a new generation's marker.
func (s *Server) write(hosts map[string][]string, srvs []SRV) {
	s.gen++
	var h strings.Builder
	fmt.Fprintf(&h, "127.0.%d.%d %s\n", s.gen/250, s.gen%250+1, readyName)
	names := make([]string, 0, len(hosts))
	for n := range hosts {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		for _, a := range hosts[n] {
			fmt.Fprintf(&h, "%s %s\n", a, n)
		}
	}
	var c strings.Builder
	for _, r := range srvs {
		fmt.Fprintf(&c, "srv-host=%s,%s,%d,%d,%d\n", r.Name, r.Target, r.Port, r.Priority, r.Weight)
	}
	for name, text := range map[string]string{"hosts": h.String(), "srv.conf": c.String()} {
		if err := os.WriteFile(filepath.Join(s.dir, name), []byte(text), 0o644); err != nil {
			s.t.Fatalf("dnstest: %v", err)
		}
	}
}

// start starts dnsmasq and waits until it answers for the current
// generation.
func (s *Server) start() error {
	args := []string{
		"--keep-in-foreground", "--no-resolv", "--no-hosts", "--no-poll",
		"--local=/test/", "--local=/dnstest/", // NXDOMAIN for the names the files lack
		fmt.Sprintf("--port=%d", s.port), "--listen-address=127.0.0.1", "--bind-interfaces",
		"--addn-hosts=" + filepath.Join(s.dir, "hosts"),
		"--conf-file=" + filepath.Join(s.dir, "srv.conf"),
		"--local-ttl=1", "--cache-size=0",
		"--pid-file=" + filepath.Join(s.dir, "dnsmasq.pid"),
		"--log-facility=" + filepath.Join(s.dir, "log"),
	}
	if u, err := user.Current(); err == nil {
		// As root, dnsmasq would run as nobody, which cannot enter
		// t.TempDir() (mode 0700) to read its files.
		args = append(args, "--user="+u.Username)
	}
	cmd := exec.Command(s.bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd, s.done = cmd, make(chan struct{})
	done := s.done
	go func() { cmd.Wait(); close(done) }()
	return s.ready()
}

// ready waits until dnsmasq answers with the current generation's marker.
func (s *Server) ready() error {
	want := fmt.Sprintf("127.0.%d.%d", s.gen/250, s.gen%250+1)
	r := s.Resolver()
	deadline := time.Now().Add(Timeout)
	for {
		select {
		case <-s.done:
			return errors.New("dnsmasq exited")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		addrs, err := r.LookupHost(ctx, readyName)
		cancel()
		if err == nil && slices.Contains(addrs, want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dnsmasq did not answer with the new records within %v (last: %v %v)", Timeout, addrs, err)
		}
		time.Sleep(10 * time.Millisecond) // polling a process we cannot be told by
	}
}

// await waits until dnsmasq answers with the current generation.
func (s *Server) await() {
	s.t.Helper()
	if err := s.ready(); err != nil {
		s.t.Fatalf("dnstest: %v\n%s", err, s.log())
	}
}

// Stop stops dnsmasq and waits for it to exit; lookups then fail.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// log returns dnsmasq's log.
func (s *Server) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "log"))
	return string(b)
}

// freePort returns a port that is free on 127.0.0.1 for both UDP and TCP,
// as dnsmasq listens on both.
func freePort(t testing.TB) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("dnstest: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatalf("dnstest: no port free for both UDP and TCP")
	return 0
}

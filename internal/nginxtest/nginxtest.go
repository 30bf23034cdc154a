// Package nginxtest runs a real nginx in front of a FastCGI responder for
// tests: [Start] runs a private nginx per test, with its config, pid file,
// logs and temporary files in a directory of t.TempDir() and its HTTP
// listener on a free loopback port, that passes every request to the given
// FastCGI address over kept-alive connections.
//
// The nginx comes from Debian's nginx-light package. scripts/services.sh
// installs it (without letting the package start one on port 80), and
// `eval "$(scripts/services.sh env)"` sets the variable this package reads:
//
//   - KIEV_NGINX, the path of the nginx binary ("/usr/sbin/nginx").
//
// Tests skip, saying that the variable is missing, where it is unset.
//
// # What the FastCGI responder sees
//
// The location includes Debian's /etc/nginx/fastcgi_params and then sets
// SCRIPT_NAME to "" and PATH_INFO to $uri. Under net/http/fcgi:
//
//   - r.URL comes from REQUEST_URI, the request target exactly as the
//     client sent it: decoded into r.URL.Path (r.URL.RawPath keeps an
//     encoding such as %2F), with the query in r.URL.RawQuery, and not
//     normalized ("/x/../a" and "//a" stay so, although nginx matched its
//     location against the cleaned "/a"). r.RequestURI is empty.
//   - net/http/fcgi hides SCRIPT_NAME and PATH_INFO, which it reads only
//     when REQUEST_URI is missing; nginx's cleaned path is DOCUMENT_URI in
//     fcgi.ProcessEnv(r), with the other parameters that net/http/fcgi does
//     not map.
//   - r.Host is nginx's $host: the Host header without its port.
//   - Request headers arrive as HTTP_* parameters that net/http/fcgi turns
//     back into canonical header names ("Kiev-Meta-Trace-Id"). nginx drops
//     header names with an underscore (ignore_invalid_headers), and of a
//     header sent several times net/http/fcgi keeps one value: nginx 1.22
//     sends each as a parameter of the same name, and the last one wins.
//     The same goes for a parameter set twice, as SCRIPT_NAME is: the last
//     fastcgi_param wins.
//   - nginx reads the whole request body before it passes the request on
//     (fastcgi_request_buffering on), so r.ContentLength is known even for
//     a chunked request. A body over the MaxBody limit (64m by default) gets
//     nginx's own 413 and never reaches the responder. With
//     Location("fastcgi_request_buffering off;") a chunked body longer than
//     what nginx read with the headers comes with no CONTENT_LENGTH, which
//     net/http/fcgi makes r.ContentLength 0, not -1: the body is there all
//     the same, so read r.Body to its end rather than trust a 0.
//   - The responder's status, headers (repeated ones included) and body
//     come back to the client unchanged.
package nginxtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvBinary is the environment variable that names the nginx binary.
const EnvBinary = "KIEV_NGINX"

// StartTimeout bounds how long Start waits for nginx to accept connections.
const StartTimeout = 10 * time.Second

// StopTimeout is how long Stop waits after SIGTERM before it kills nginx.
const StopTimeout = 5 * time.Second

const howToRun = `run "scripts/services.sh up" and eval "$(scripts/services.sh env)"`

// An Option changes the generated nginx config.
type Option func(*config)

type config struct {
	maxBody     string
	readTimeout time.Duration
	keepConn    bool
	keepalive   int
	noBuffering bool
	location    []string
}

// MaxBody sets client_max_body_size, in nginx's syntax ("64m", "1k",
// "0" for no limit). The default is "64m".
func MaxBody(size string) Option { return func(c *config) { c.maxBody = size } }

// ReadTimeout sets fastcgi_read_timeout, how long nginx waits between two
// reads from the responder before it answers 504. The default is 60 s;
// nginx counts in milliseconds.
func ReadTimeout(d time.Duration) Option { return func(c *config) { c.readTimeout = d } }

// NoKeepConn turns fastcgi_keep_conn off, and the upstream's keepalive
// cache with it: nginx then opens a FastCGI connection per request and the
// responder closes it after its answer.
func NoKeepConn() Option { return func(c *config) { c.keepConn = false } }

// Keepalive sets the upstream's keepalive, how many idle connections to
// the responder nginx keeps open (with fastcgi_keep_conn). The default is
// 64.
func Keepalive(n int) Option { return func(c *config) { c.keepalive = n } }

// NoBuffering turns fastcgi_buffering off: nginx passes the responder's
// answer on as it arrives instead of reading it whole first.
func NoBuffering() Option { return func(c *config) { c.noBuffering = true } }

// Location appends raw directives, such as "fastcgi_request_buffering off;"
// or "fastcgi_param HTTP_X_REAL_IP $remote_addr;", to the location block
// that passes requests on. Most directives the block already holds may not be repeated
// (nginx refuses to start: "directive is duplicate"); fastcgi_param may, and
// an appended one overrides the included one under net/http/fcgi.
func Location(directives string) Option {
	return func(c *config) { c.location = append(c.location, directives) }
}

// Server is a private nginx: a master and one worker process serving
// 127.0.0.1 on a port of its own, stopped when the test ends.
type Server struct {
	dir  string
	port int

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
}

// Start starts a private nginx that passes every request to the FastCGI
// responder at fastcgiAddr ("127.0.0.1:PORT", or "unix:/PATH"), and waits
// until it accepts connections. The responder need not be up yet: until it
// is, nginx answers 502. nginx is stopped when the test ends; if the test
// failed, the end of its error log is logged then. Start skips the test
// when $KIEV_NGINX is unset and fails it if nginx does not start within
// [StartTimeout].
func Start(t testing.TB, fastcgiAddr string, opts ...Option) *Server {
	t.Helper()
	bin := os.Getenv(EnvBinary)
	if bin == "" {
		t.Skipf("nginxtest: %s is not set; %s to test behind a real nginx", EnvBinary, howToRun)
	}
	c := config{maxBody: "64m", readTimeout: 60 * time.Second, keepConn: true, keepalive: 64}
	for _, o := range opts {
		o(&c)
	}
	s := &Server{dir: t.TempDir()}
	startFailed := false
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() && !startFailed {
			t.Logf("nginxtest: the end of nginx's error log:\n%s", s.logTail())
		}
	})
	// The free port may be taken between freePort and nginx's bind; then
	// nginx exits at once, and another port is tried.
	for attempt := 1; ; attempt++ {
		s.port = freePort(t)
		conf := filepath.Join(s.dir, "nginx.conf")
		if err := os.WriteFile(conf, []byte(c.render(s.dir, s.port, fastcgiAddr)), 0o644); err != nil {
			t.Fatalf("nginxtest: %v", err)
		}
		err := s.start(bin, conf)
		if err == nil {
			return s
		}
		if attempt < 3 && strings.Contains(s.ErrorLog(), "Address already in use") {
			continue
		}
		startFailed = true
		t.Fatalf("nginxtest: %v\n%s\nthe config:\n%s", err, s.logTail(), s.Config())
	}
}

// render returns the nginx config for a server in dir on port.
func (c *config) render(dir string, port int, fastcgiAddr string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	path := func(name string) string { return quote(filepath.Join(dir, name)) }
	p("daemon off;")
	p("worker_processes 1;")
	if u := workerUser(); u != "" {
		// As root, nginx's worker would run as nobody, which cannot enter
		// t.TempDir() (mode 0700) to write its temporary files.
		p("user %s;", u)
	}
	p("pid %s;", path("nginx.pid"))
	p("error_log %s warn;", path("error.log"))
	p("events { worker_connections 4096; }")
	p("http {")
	p("\taccess_log off;")
	p("\tclient_body_temp_path %s;", path("body"))
	p("\tfastcgi_temp_path %s;", path("fastcgi"))
	p("\tproxy_temp_path %s;", path("proxy"))
	p("\tuwsgi_temp_path %s;", path("uwsgi"))
	p("\tscgi_temp_path %s;", path("scgi"))
	p("\tclient_max_body_size %s;", c.maxBody)
	p("\tupstream kiev {")
	p("\t\tserver %s;", fastcgiAddr)
	if c.keepConn && c.keepalive > 0 {
		p("\t\tkeepalive %d;", c.keepalive)
	}
	p("\t}")
	p("\tserver {")
	p("\t\tlisten 127.0.0.1:%d;", port)
	p("\t\tlocation / {")
	p("\t\t\tinclude /etc/nginx/fastcgi_params;")
	p(`			fastcgi_param SCRIPT_NAME "";`)
	p("\t\t\tfastcgi_param PATH_INFO $uri;")
	if c.keepConn {
		p("\t\t\tfastcgi_keep_conn on;")
	}
	p("\t\t\tfastcgi_pass kiev;")
	p("\t\t\tfastcgi_read_timeout %dms;", max(c.readTimeout.Milliseconds(), 1))
	if c.noBuffering {
		p("\t\t\tfastcgi_buffering off;")
	} else {
		p("\t\t\tfastcgi_buffering on;")
	}
	for _, d := range c.location {
		p("\t\t\t%s", d)
	}
	p("\t\t}")
	p("\t}")
	p("}")
	return b.String()
}

// quote quotes s for nginx's config.
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// workerUser returns the "user" directive's argument that keeps nginx's
// worker as the current user when the tests run as root, or "" otherwise
// (nginx ignores the directive then, with a warning).
func workerUser() string {
	if os.Geteuid() != 0 {
		return ""
	}
	u, err := user.Current()
	if err != nil {
		return ""
	}
	if g, err := user.LookupGroupId(u.Gid); err == nil {
		return quote(u.Username) + " " + quote(g.Name)
	}
	return quote(u.Username)
}

// start runs nginx with conf and waits until its port accepts connections.
func (s *Server) start(bin, conf string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	errLog := filepath.Join(s.dir, "error.log")
	// nginx repeats on stderr what it logs before it detaches from the
	// terminal; ErrorLog reads the file only if error.log is empty.
	logf, err := os.OpenFile(filepath.Join(s.dir, "stderr.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child holds its own copy
	cmd := exec.Command(bin, "-p", s.dir, "-e", errLog, "-c", conf)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited

	deadline := time.Now().Add(StartTimeout)
	for {
		c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			s.cmd, s.exited = nil, nil
			return fmt.Errorf("nginx exited before serving: %s", cmd.ProcessState)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stopLocked()
			return fmt.Errorf("nginx on %s was not accepting connections within %v", s.Addr(), StartTimeout)
		}
	}
}

// Addr returns the address nginx serves HTTP on, "127.0.0.1:PORT".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL returns nginx's base URL, "http://127.0.0.1:PORT", with no slash at
// the end.
func (s *Server) URL() string { return "http://" + s.Addr() }

// Dir returns the directory of nginx's config, pid file, logs and
// temporary files.
func (s *Server) Dir() string { return s.dir }

// Config returns the nginx config the server runs with.
func (s *Server) Config() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "nginx.conf"))
	return string(b)
}

// ErrorLog returns the content of nginx's error log (level warn and up),
// or what nginx wrote to its stderr if the log is empty, for failure
// messages.
func (s *Server) ErrorLog() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "error.log"))
	if len(b) == 0 {
		b, _ = os.ReadFile(filepath.Join(s.dir, "stderr.log"))
	}
	return string(b)
}

// logTail returns the end of the error log.
func (s *Server) logTail() string {
	const max = 4 << 10
	l := s.ErrorLog()
	if len(l) > max {
		l = "..." + l[len(l)-max:]
	}
	if l == "" {
		l = "(the error log is empty)"
	}
	return l
}

// Stop stops nginx (SIGTERM, then SIGKILL to its process group after
// [StopTimeout]) and waits for it to exit. Stopping a stopped server does
// nothing; it cannot be started again.
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
	case <-time.After(StopTimeout):
		killGroup(s.cmd.Process)
		<-s.exited
	}
	s.cmd, s.exited = nil, nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("nginxtest: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// server is a private MariaDB server, a child of the test, that the test
// may kill and start again on the same port. It runs with
// --skip-grant-tables: any user and password may connect.
type server struct {
	t    testing.TB
	bin  string // mariadbd
	dir  string
	port int
	addr string
	cmd  *exec.Cmd
	// exited is closed when cmd has ended.
	exited chan struct{}
}

// startServer makes a data directory and starts a private MariaDB server
// on a free loopback port, with a database "test", and stops it when t
// ends. It skips the test if MariaDB is not installed.
func startServer(t testing.TB) *server {
	t.Helper()
	bin := lookPath(t, "mariadbd", "/usr/sbin/mariadbd")
	install := lookPath(t, "mariadb-install-db", "/usr/bin/mariadb-install-db")
	s := &server{t: t, bin: bin, dir: t.TempDir(), port: freePort(t)}
	s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	start := time.Now()
	out, err := exec.Command(install, "--no-defaults", "--datadir="+filepath.Join(s.dir, "data"),
		"--auth-root-authentication-method=normal").CombinedOutput()
	if err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	s.start()
	t.Cleanup(s.kill)
	db := s.sql("")
	defer db.Close()
	if _, err := db.Exec("CREATE DATABASE IF NOT EXISTS test"); err != nil {
		t.Fatal(err)
	}
	t.Logf("private MariaDB on %s ready in %v", s.addr, time.Since(start))
	return s
}

// lookPath finds a program of MariaDB's, or skips the test.
func lookPath(t testing.TB, name, fallback string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if _, err := os.Stat(fallback); err == nil {
		return fallback
	}
	t.Skipf("%s is not installed; scripts/services.sh up installs MariaDB", name)
	return ""
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

// dsn returns the DSN of the server's database "test", with the password
// password (which the server does not check).
func (s *server) dsn(password string) string {
	return fmt.Sprintf("root:%s@tcp(%s)/test", password, s.addr)
}

// sql returns a bare database/sql pool on the server's database db.
func (s *server) sql(db string) *sql.DB {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.DBName = "root", "tcp", s.addr, db
	cfg.Timeout = time.Second
	cfg.Logger = &mysql.NopLogger{} // its complaints while the server starts
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	return sql.OpenDB(c)
}

// start starts the server and waits until it answers.
func (s *server) start() {
	s.t.Helper()
	args := []string{
		"--no-defaults", "--datadir=" + filepath.Join(s.dir, "data"), "--socket=" + filepath.Join(s.dir, "sock"),
		"--port=" + strconv.Itoa(s.port), "--bind-address=127.0.0.1", "--skip-grant-tables", "--skip-log-bin",
		"--innodb-buffer-pool-size=16M", "--log-error=" + filepath.Join(s.dir, "error.log"),
	}
	if os.Getuid() == 0 {
		if u, err := user.Current(); err == nil {
			args = append(args, "--user="+u.Username) // mariadbd refuses root otherwise
		}
	}
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
	db := s.sql("")
	defer db.Close()
	deadline := time.Now().Add(waitTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "error.log"))
			s.t.Fatalf("mariadbd exited at start; its log:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("mariadbd on %s does not answer within %v: %v", s.addr, waitTimeout, err)
		}
		time.Sleep(20 * time.Millisecond) // polling the server's readiness
	}
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

// waitRunning waits until the server runs a statement that starts with
// prefix.
func (s *server) waitRunning(t testing.TB, prefix string) {
	t.Helper()
	db := s.sql("")
	defer db.Close()
	deadline := time.Now().Add(waitTimeout)
	for {
		var n int
		err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE CONCAT(?, '%')", prefix).Scan(&n)
		if err == nil && n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server does not run %q within %v (%v)", prefix, waitTimeout, err)
		}
		time.Sleep(10 * time.Millisecond) // polling the server
	}
}

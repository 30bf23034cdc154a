package mongo_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kievrpc/kiev/clients/mongo"
)

// ferretDB is a private FerretDB server, a child process of the test,
// with its data in a directory of its own.
type ferretDB struct {
	t         *testing.T
	bin, dir  string
	addr      string // listen address
	debugAddr string
	cmd       *exec.Cmd
	exited    chan struct{}
}

// startFerretDB starts a FerretDB from $KIEV_FERRETDB on free loopback
// ports, or skips t. It is killed at the end of t.
func startFerretDB(t *testing.T) *ferretDB {
	t.Helper()
	bin := os.Getenv(envFerretDB)
	if bin == "" {
		t.Skipf("set %s to a FerretDB binary (eval \"$(scripts/services.sh env)\" after scripts/services.sh up builds one)", envFerretDB)
	}
	f := &ferretDB{t: t, bin: bin, dir: t.TempDir(), addr: freeAddr(t), debugAddr: freeAddr(t)}
	for _, d := range []string{"data", "state"} {
		if err := os.Mkdir(filepath.Join(f.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f.start()
	t.Cleanup(f.kill)
	return f
}

// start starts the server and waits for its port.
func (f *ferretDB) start() {
	f.t.Helper()
	logf, err := os.OpenFile(filepath.Join(f.dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		f.t.Fatal(err)
	}
	defer logf.Close()
	f.cmd = exec.Command(f.bin,
		"--handler=sqlite",
		"--sqlite-url=file:"+filepath.Join(f.dir, "data")+"/",
		"--state-dir="+filepath.Join(f.dir, "state"),
		"--listen-addr="+f.addr,
		"--debug-addr="+f.debugAddr,
		"--telemetry=disable",
		"--log-level=WARN",
	)
	f.cmd.Stdout, f.cmd.Stderr = logf, logf
	if err := f.cmd.Start(); err != nil {
		f.t.Fatalf("starting FerretDB: %v", err)
	}
	f.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		cmd.Wait()
		close(exited)
	}(f.cmd, f.exited)
	deadline := time.Now().Add(waitTimeout)
	for {
		conn, err := net.DialTimeout("tcp", f.addr, time.Second)
		if err == nil {
			conn.Close()
			return
		}
		select {
		case <-f.exited:
			log, _ := os.ReadFile(filepath.Join(f.dir, "log"))
			f.t.Fatalf("FerretDB exited at start: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("FerretDB does not answer on %s after %v", f.addr, waitTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill kills the server, as a crash would, and waits for it to exit.
func (f *ferretDB) kill() {
	if f.cmd == nil {
		return
	}
	f.cmd.Process.Kill()
	<-f.exited
	f.cmd = nil
}

// freeAddr returns a loopback address where nothing listens now.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestServerRestart kills the server under a Client and starts it again on
// the same port and data: while it is down, operations and Health fail
// with clear errors; once it is back, the same Client serves again.
func TestServerRestart(t *testing.T) {
	f := startFerretDB(t)
	c, reg, log := newClient(t, mongo.Options{URI: "mongodb://" + f.addr, Name: "restart"})
	coll := c.DB().Collection("items")
	op := func(timeout time.Duration, i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if _, err := coll.InsertOne(ctx, d("_id", i)); err != nil {
			return err
		}
		return coll.FindOne(ctx, d("_id", i)).Err()
	}
	for i := range 3 {
		if err := op(5*time.Second, i); err != nil {
			t.Fatalf("before the restart: %v", err)
		}
	}

	from := log.Mark()
	f.kill()
	t.Log("FerretDB killed")
	err := op(time.Second, 100)
	if err == nil {
		t.Fatal("an operation succeeded with the server down")
	}
	t.Logf("the operation in flight as the server died: %v", err)
	err = op(time.Second, 101)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("an operation with the server down: %v; want the driver's error saying the connection is refused", err)
	}
	t.Logf("an operation with the server down: %v", err)
	hctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = c.Health(hctx)
	if !errors.Is(err, mongo.ErrUnavailable) {
		t.Fatalf("Health with the server down: %v; want ErrUnavailable", err)
	}
	t.Logf("Health while the server is down: %v", err)
	log.WaitFor(t, from, "server unreachable", "server="+f.addr)

	from = log.Mark()
	start := time.Now()
	f.start()
	t.Log("FerretDB started again")
	for i := 3; ; i++ {
		err := op(time.Second, i)
		if err == nil {
			break
		}
		if time.Since(start) > waitTimeout {
			t.Fatalf("the Client has not recovered %v after the restart: %v", waitTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the Client recovered %v after the restart", time.Since(start))
	log.WaitFor(t, from, "server available", "server="+f.addr)
	if err := c.Health(context.Background()); err != nil {
		t.Errorf("Health after the restart: %v", err)
	}
	n, err := coll.CountDocuments(context.Background(), d("_id", d("$lt", 3)))
	if err != nil || n != 3 {
		t.Errorf("documents from before the restart: %d, %v; want 3", n, err)
	}
	st := c.Stats()
	if st.PoolCleared == 0 || st.Servers != 1 {
		t.Errorf("Stats after the restart: %+v; want a pool clear counted and the server available", st)
	}
	if n := counterValue(t, reg, "kiev_mongo_pool_cleared_total"); n == 0 {
		t.Errorf("kiev_mongo_pool_cleared_total = 0 after the restart")
	}
}

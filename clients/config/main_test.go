package config_test

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kievrpc/kiev/internal/zktest"
)

// waitTimeout bounds every wait of these tests for something to happen.
const waitTimeout = 15 * time.Second

func TestMain(m *testing.M) {
	code := m.Run()
	if addr := os.Getenv(zktest.EnvAddr); addr != "" {
		if err := deleteZKRunRoot(addr); err != nil {
			fmt.Fprintf(os.Stderr, "deleting %s: %v\n", zkRunRoot, err)
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// receive waits for a value from ch.
func receive[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("no %s within %v", what, waitTimeout)
		panic("unreachable")
	}
}

// zkRunRoot holds this run's nodes on the shared ZooKeeper; TestMain
// deletes it at the end.
var zkRunRoot = fmt.Sprintf("/kiev-test/config-run-%d", time.Now().UnixNano())

func deleteZKRunRoot(addr string) error {
	return zktest.DeleteTree(addr, zkRunRoot, testDigest)
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// closedAddr returns a loopback address where nothing listens.
func closedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

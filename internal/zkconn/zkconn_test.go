package zkconn

import (
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// mute is a server that accepts connections and reads them, but answers
// at most a prefix of what ZooKeeper would: a server starting, stopping
// or stuck. It counts the connections.
type mute struct {
	ln       net.Listener
	accepted atomic.Int64
	conns    chan net.Conn
}

func startMute(t *testing.T, prefix []byte) *mute {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &mute{ln: ln, conns: make(chan net.Conn, 100)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			m.accepted.Add(1)
			m.conns <- c
			c.Write(prefix)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(m.conns)
		for c := range m.conns {
			c.Close()
		}
	})
	return m
}

// A client whose server accepts its connection but does not answer tries
// again within about a session timeout, not ten read timeouts later (the
// library's handshake timeout), nor never (a server that sent the length
// of its answer and stopped).
func TestMuteServerIsLeftWithinTheReadLimit(t *testing.T) {
	const session = 500 * time.Millisecond
	for _, tc := range []struct {
		name   string
		prefix []byte
	}{
		{"silent", nil},
		{"stops mid-answer", []byte{0, 0, 0, 36}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startMute(t, tc.prefix)
			d := &Dialer{ReadLimit: session}
			conn, _, err := zk.Connect([]string{m.ln.Addr().String()}, session,
				zk.WithDialer(d.Dial), zk.WithLogger(Logger{Logger: slog.New(slog.DiscardHandler)}))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// Without the limit the first attempt waits 10 × 2/3 of the
			// session (3.3 s), or for ever; with it, 0.5 s, then the
			// library pauses 1 s before its next round of servers.
			start := time.Now()
			for m.accepted.Load() < 2 {
				if time.Since(start) > 3*time.Second {
					t.Fatalf("one connection in %v: the client still waits on a server that does not answer", time.Since(start).Round(time.Millisecond))
				}
				time.Sleep(10 * time.Millisecond) // polling the server's count; nothing to wait on
			}
			t.Logf("second connection %v after the first", time.Since(start).Round(time.Millisecond))
		})
	}
}

package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// dialer makes the client's connections and remembers the latest, so that
// Close can close it: the client itself would wait for its read timeout
// (two thirds of the session timeout) on a connection that hangs.
type dialer struct {
	mu     sync.Mutex
	conn   net.Conn
	closed bool
}

var errDialClosed = errors.New("kiev/registry/zookeeper: the registry is closing")

func (d *dialer) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, errDialClosed
	}
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		c.Close()
		return nil, errDialClosed
	}
	d.conn = c
	return c, nil
}

// close closes the current connection and refuses new ones.
func (d *dialer) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.conn != nil {
		d.conn.Close()
	}
}

// zkLogger passes the ZooKeeper client's messages to a slog.Logger.
type zkLogger struct{ l *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	if z.l.Enabled(context.Background(), slog.LevelInfo) {
		z.l.Info("zk: " + fmt.Sprintf(format, args...))
	}
}

// hostProvider is the client library's DNSHostProvider, except that after
// the ensemble expired the session it lets the client reconnect at once.
// The library pauses 1 s each time it has tried every server; with a
// single server that is every reconnection, and after an expiry it would
// only delay publishing the registrations again, since the server that
// reported the expiry is up.
type hostProvider struct {
	*zk.DNSHostProvider

	mu  sync.Mutex
	now bool
}

func (h *hostProvider) Next() (server string, retryStart bool) {
	server, retryStart = h.DNSHostProvider.Next()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.now {
		h.now, retryStart = false, false
	}
	return server, retryStart
}

// reconnectNow makes the next reconnection skip the pause.
func (h *hostProvider) reconnectNow() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.now = true
}

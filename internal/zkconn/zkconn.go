// Package zkconn holds what kiev's ZooKeeper users (registry/zookeeper
// and clients/config) need around github.com/go-zookeeper/zk: a dialer
// that Close can cut, and a logger adapter.
package zkconn

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

// ErrClosing is what Dial returns once Close has been called.
var ErrClosing = errors.New("kiev: the ZooKeeper client is closing")

// Dialer makes a zk.Conn's connections (zk.WithDialer(d.Dial)) and
// remembers the latest, so that Close can close it: the client library
// would otherwise wait for its read timeout (two thirds of the session
// timeout) on a connection that hangs.
//
// With ReadLimit set, it also bounds every read of its connections. The
// client library waits ten times its read timeout for a server's answer
// to its connect request, and reads the rest of that answer with no
// deadline at all: a server that accepts a connection but does not
// answer, as one starting or stopping may, would hold the client for
// minutes, or for ever, where a try at the next server was due.
type Dialer struct {
	// Dialed, if set, is called after every attempt with its error, nil
	// on success, with no lock held.
	Dialed func(err error)

	// ReadLimit, if positive, is the longest a read on a connection may
	// wait: a read deadline that is unset or later is brought forward to
	// it. Set it to the session timeout: the library's own read timeout
	// once connected is two thirds of that, which it leaves untouched.
	ReadLimit time.Duration

	mu     sync.Mutex
	conn   net.Conn
	closed bool
}

// Dial opens a connection, unless Close has been called.
func (d *Dialer) Dial(network, address string, timeout time.Duration) (net.Conn, error) {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, ErrClosing
	}
	c, err := net.DialTimeout(network, address, timeout)
	if err == nil && d.ReadLimit > 0 {
		bc := boundedConn{c, d.ReadLimit}
		_ = bc.SetReadDeadline(time.Time{}) // until the library sets one
		c = bc
	}
	if err == nil {
		d.mu.Lock()
		if d.closed {
			c.Close()
			c, err = nil, ErrClosing
		} else {
			d.conn = c
		}
		d.mu.Unlock()
	}
	if d.Dialed != nil && !errors.Is(err, ErrClosing) {
		d.Dialed(err)
	}
	return c, err
}

// Close closes the current connection and refuses new ones.
func (d *Dialer) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.conn != nil {
		d.conn.Close()
	}
}

// Settle makes one request that sets no watch and waits for its answer.
// A client calls it before its first watch. The library's receive loop
// writes the last zxid seen while, at each new connection, another of its
// goroutines reads it to set the watches again if there are any
// (go-zookeeper/zk#35, in no release); a watch set while a connection is
// young can make that a data race. One round trip first leaves the
// library time to find no watch to set again.
func Settle(conn *zk.Conn) {
	_, _, _ = conn.Exists("/")
}

// boundedConn is a connection whose reads wait at most limit.
type boundedConn struct {
	net.Conn
	limit time.Duration
}

func (c boundedConn) bound(t time.Time) time.Time {
	if latest := time.Now().Add(c.limit); t.IsZero() || t.After(latest) {
		return latest
	}
	return t
}

func (c boundedConn) SetReadDeadline(t time.Time) error {
	return c.Conn.SetReadDeadline(c.bound(t))
}

func (c boundedConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetReadDeadline(c.bound(t)); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}

// Logger passes the client library's messages to a slog.Logger at Debug
// level (zk.WithLogger(zkconn.Logger{Logger: l})). The library logs
// through one Printf, whatever happened: every connection, session and
// clean Close is a line ("connected to", "authenticated", "recv loop
// terminated: EOF"), and so are its failures. What matters to a user
// (a lost connection, an expired session, rejected credentials) reaches
// kiev's ZooKeeper clients as session events, which they log at the level
// it deserves; the library's own lines are detail for debugging.
type Logger struct {
	Logger *slog.Logger
}

// Printf logs one message of the library's at Debug level.
func (z Logger) Printf(format string, args ...any) {
	if z.Logger.Enabled(context.Background(), slog.LevelDebug) {
		z.Logger.Debug("zk: " + fmt.Sprintf(format, args...))
	}
}

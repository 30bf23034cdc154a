// Package connlimit bounds the connections a listener holds open at once.
// The admin HTTP server and Server.ServeFastCGI take their listeners
// through it, so that idle or slow clients of either cannot take the
// process's file descriptors from its RPC listeners.
package connlimit

import (
	"net"
	"sync"
)

// Listener accepts at most n connections at a time: once n are open,
// Accept waits for one to close, and the rest wait in the kernel's
// backlog, where they hold no file descriptor of the process. Close ends
// an Accept that waits for a slot, with net.ErrClosed.
type Listener struct {
	net.Listener
	slots chan struct{}
	done  chan struct{}
	once  sync.Once
}

// NewListener returns a Listener that accepts from l at most n
// connections at a time; n must be positive.
func NewListener(l net.Listener, n int) *Listener {
	return &Listener{Listener: l, slots: make(chan struct{}, n), done: make(chan struct{})}
}

// Accept waits for a free slot, then accepts a connection whose Close
// frees it.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	nc, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &conn{Conn: nc, release: func() { <-l.slots }}, nil
}

// Close closes the listener and ends an Accept that waits for a slot.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// conn gives its slot back once, when it is closed.
type conn struct {
	net.Conn
	release func()
	once    sync.Once
}

func (c *conn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

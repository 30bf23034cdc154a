package transport

import (
	"sync"
	"time"
)

// A client's transports, ClientConn (a TCP, TLS or Unix connection) and
// PacketClient (a UDP socket), are generic over C, the client's call
// (package kiev's *Call), which they only keep and hand back: what a call
// is, how its Request is encoded and its Response decoded, and what
// errors say, are the protocol's, above them. They ask it through a
// ClientHandler, which each transport extends with what it alone needs.

// ClientHandler is what a client transport asks of the protocol above it, the
// same for a connection and a socket. Reply is called from the
// transport's reader; Failure and Lost from whichever goroutine finds the
// transport dead, with no lock held. None may block.
type ClientHandler[C any] interface {
	// Reply completes call with its Response r, whose bytes are valid
	// only until Reply returns.
	Reply(call C, r *Response)
	// Failure returns the error the calls of a transport that died of
	// cause fail with, pending and new; draining says the server had sent
	// GoAway. It has no side effect: it may be called again for a
	// transport already dead.
	Failure(cause error, draining bool) error
	// Lost is called once, when the transport has died and closed its
	// socket, with the calls that were pending, for the handler to fail.
	Lost(l Loss[C])
}

// A Loss is how a client transport died: of Cause, its calls failing
// with Err (ClientHandler.Failure's), and the calls it had pending, taken out.
type Loss[C any] struct {
	Cause, Err error
	Calls      map[uint64]C
	// Draining says the server had sent GoAway (a connection only).
	Draining bool
	// drained says the server, having drained, sent a last GoAway with
	// the highest Request id it read, lastRead, all of them answered, and
	// then closed the stream.
	drained  bool
	lastRead uint64
}

// Unread reports whether the server surely never read the Request of
// call id: it drained, and its last GoAway, before it closed the stream,
// said it read none past a lower id. Such a call did not run, and may be
// retried elsewhere. (Without that GoAway, as from a server whose
// Shutdown ran out of time, the outcome of a pending call is unknown.)
func (l *Loss[C]) Unread(id uint64) bool { return l.drained && id > l.lastRead }

var timerPool sync.Pool

// getTimer returns a running timer that fires after d.
func getTimer(d time.Duration) *time.Timer {
	if t, ok := timerPool.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// putTimer stops t and keeps it for reuse. Since Go 1.23 a stopped timer's
// channel holds no stale value, so Reset after Get is safe.
func putTimer(t *time.Timer) {
	t.Stop()
	timerPool.Put(t)
}

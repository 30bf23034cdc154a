package kiev

import (
	"errors"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/internal/wire"
)

// Buffer sizes. A read buffer holds most frames whole, so they are parsed
// in place; the write queue is bounded so a slow peer pushes back on
// callers instead of growing memory without limit.
const (
	readBufSize   = 64 << 10
	maxQueued     = 4 << 20
	maxSpareBytes = 1 << 20 // a larger spare write buffer is kept only while in use
)

// link is the transport half shared by server and client connections: one
// writer goroutine that coalesces queued frames into as few syscalls as
// possible, and runs the heartbeat between writes.
//
// Frames are queued with send, which copies them, so callers reuse their
// buffers at once. The writer swaps the queue for its spare buffer and
// writes the whole batch with one Write.
type link struct {
	nc       net.Conn
	opts     *connOptions
	onDead   func(error) // called once from the writer when the link fails
	readSeen atomic.Bool // set by the reader on every frame
	// blocking makes send wait while more than maxQueued bytes are
	// queued (a client's calls). A server's replies never wait: its
	// reader stops taking calls instead (waitRoom), so that no handler
	// goroutine is held by a client that does not read.
	blocking bool

	mu    sync.Mutex
	space sync.Cond // signalled when the queue drains
	queue []byte
	spare []byte
	// backlog counts the bytes queued or being written. It changes under
	// mu and is read without it, once per call, by the server's reader
	// (waitRoom) and its calls (serverConn.backlogged).
	backlog atomic.Int64
	err     error // first failure; set once
	closing bool  // flush what is queued, then stop

	kick chan struct{} // a non-blocking nudge: the queue has frames
	quit chan struct{} // closed by stop
	done chan struct{} // closed when the writer exits
	once sync.Once
}

func newLink(nc net.Conn, opts *connOptions, onDead func(error)) *link {
	l := &link{
		nc:     nc,
		opts:   opts,
		onDead: onDead,
		kick:   make(chan struct{}, 1),
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	l.space.L = &l.mu
	return l
}

// send queues one encoded frame. On a blocking link it waits while more
// than maxQueued bytes wait for a slow peer. It fails once the link has
// failed.
func (l *link) send(frame []byte) error {
	l.mu.Lock()
	if l.blocking && len(l.queue) > maxQueued && l.err == nil && !l.closing {
		// The peer reads slower than we write. Wait for the writer to
		// drain the queue, but not for ever: a peer that takes no bytes
		// for the heartbeat timeout is cut, so that it cannot hold the
		// goroutines that answer it, nor memory.
		expired := false
		t := time.AfterFunc(l.opts.heartbeatTimeout, func() {
			l.mu.Lock()
			expired = true
			l.space.Broadcast()
			l.mu.Unlock()
		})
		for len(l.queue) > maxQueued && l.err == nil && !l.closing && !expired {
			l.space.Wait()
		}
		t.Stop()
		if expired && len(l.queue) > maxQueued && l.err == nil && !l.closing {
			l.mu.Unlock()
			err := &slowReaderError{queued: maxQueued, wait: l.opts.heartbeatTimeout}
			l.fail(err)
			l.stop(err)
			return err
		}
	}
	if l.err != nil || l.closing {
		err := l.err
		l.mu.Unlock()
		if err == nil {
			err = ErrShutdown
		}
		return err
	}
	wasEmpty := len(l.queue) == 0
	l.queue = append(l.queue, frame...)
	l.backlog.Add(int64(len(frame)))
	l.mu.Unlock()
	if wasEmpty {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// waitRoom waits until at most limit bytes are queued or being written,
// or the link has failed, which it returns. A peer that reads nothing is
// cut by the writer within the heartbeat timeout, so the wait is bounded.
func (l *link) waitRoom(limit int) error {
	if l.backlog.Load() <= int64(limit) {
		return nil // the common case, without the lock
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.backlog.Load() > int64(limit) && l.err == nil && !l.closing {
		l.space.Wait()
	}
	return l.err
}

// flushAndStop makes the writer write what is queued and then exit.
func (l *link) flushAndStop() {
	l.mu.Lock()
	l.closing = true
	l.space.Broadcast()
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// stop makes the writer exit at once, dropping what is queued.
func (l *link) stop(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.space.Broadcast()
	l.mu.Unlock()
	l.once.Do(func() { close(l.quit) })
}

// writeLoop is the writer goroutine. It returns when the link fails, is
// stopped, or has flushed after flushAndStop.
func (l *link) writeLoop() {
	defer close(l.done)
	tick := time.NewTicker(l.opts.heartbeatInterval)
	defer tick.Stop()
	lastRead := time.Now()
	var pingID uint64
	var ping [wire.HeaderSize]byte
	peak := 0 // the largest batch since the last tick
	for {
		select {
		case <-l.quit:
			return
		case now := <-tick.C:
			l.mu.Lock()
			if cap(l.spare) > maxSpareBytes && peak < cap(l.spare)/4 {
				l.spare = nil
			}
			l.mu.Unlock()
			peak = 0
			if l.readSeen.Swap(false) {
				lastRead = now
				continue
			}
			idle := now.Sub(lastRead)
			if idle >= l.opts.heartbeatTimeout {
				l.fail(&heartbeatError{idle: idle})
				return
			}
			pingID++
			b := wire.BeginFrame(ping[:0], wire.TypePing, pingID)
			_ = wire.EndFrame(b, 0, l.opts.maxFrame)
			if !l.write(b, &lastRead) {
				return
			}
		case <-l.kick:
			// Let the goroutines that are about to queue frames do so,
			// so that one syscall carries them all.
			runtime.Gosched()
		}
		l.mu.Lock()
		batch := l.queue
		l.queue = l.spare[:0]
		l.spare = nil
		closing := l.closing
		l.space.Broadcast()
		l.mu.Unlock()
		if len(batch) > 0 && !l.write(batch, &lastRead) {
			return
		}
		l.mu.Lock()
		l.backlog.Add(-int64(len(batch)))
		l.space.Broadcast()
		// Keep the batch's buffer for the next swap, so that a connection
		// busy with large frames does not regrow its queue (copying
		// megabytes) on every batch; the heartbeat tick lets a large one
		// go once the connection has calmed down.
		peak = max(peak, len(batch))
		l.spare = batch[:0]
		empty := len(l.queue) == 0
		l.mu.Unlock()
		if closing && empty {
			return
		}
		if !empty {
			select {
			case l.kick <- struct{}{}:
			default:
			}
		}
	}
}

// write writes b. A peer that stops reading blocks the write; it is given
// up once it has taken no byte for the heartbeat timeout: as dead if it
// has also sent nothing since *lastRead (which write moves forward while
// the peer still sends), as a slow reader otherwise. So a frozen peer is
// found as fast by a blocked writer as by the heartbeat, and a peer that
// sends but does not read cannot hold the bytes queued for it for long.
func (l *link) write(b []byte, lastRead *time.Time) bool {
	progress := time.Now()
	for {
		_ = l.nc.SetWriteDeadline(time.Now().Add(l.opts.heartbeatInterval))
		n, err := l.nc.Write(b)
		if err == nil {
			return true
		}
		b = b[n:]
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			l.fail(err)
			return false
		}
		now := time.Now()
		if n > 0 {
			progress = now
		}
		if l.readSeen.Swap(false) { // the peer sent something since the last look
			*lastRead = now
		}
		if idle := now.Sub(*lastRead); idle >= l.opts.heartbeatTimeout {
			l.fail(&heartbeatError{idle: idle})
			return false
		}
		if stuck := now.Sub(progress); stuck >= l.opts.heartbeatTimeout {
			l.fail(&slowReaderError{queued: int(l.backlog.Load()), wait: stuck})
			return false
		}
	}
}

func (l *link) fail(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.space.Broadcast()
	l.mu.Unlock()
	l.onDead(err)
}

// heartbeatError reports a peer that stayed silent past the timeout.
type heartbeatError struct{ idle time.Duration }

func (e *heartbeatError) Error() string {
	return "peer sent nothing for " + e.idle.Round(time.Millisecond).String() + ", past the heartbeat timeout; the connection is presumed dead"
}

func (e *heartbeatError) Timeout() bool { return true }

// slowReaderError reports a peer that did not read what was sent to it.
type slowReaderError struct {
	queued int
	wait   time.Duration
}

func (e *slowReaderError) Error() string {
	return "peer read nothing of the " + strconv.Itoa(e.queued>>10) + " KiB queued for it for " + e.wait.Round(time.Millisecond).String() + "; the connection is cut so that it cannot hold memory or goroutines"
}

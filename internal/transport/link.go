package transport

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kievrpc/kiev/internal/wire"
)

// Buffer sizes. A read buffer holds most frames whole, so they are parsed
// in place; the write queue is bounded so a slow peer pushes back on
// callers instead of growing memory without limit.
const (
	ReadBufSize = 64 << 10 // the size of a connection's wire.Reader buffer
	MaxQueued   = 4 << 20  // what a blocking link queues before Send waits
	// maxHeld is what a hold (Link.Hold) lets wait before the writer is
	// woken all the same: enough for one large write, and far below a
	// connection's share of the queued bytes, which would refuse calls.
	maxHeld = 32 << 10
)

// Link is the writing half of a kiev connection, shared by server and
// client connections: one writer goroutine (Run) that coalesces queued
// frames into as few syscalls as possible, and runs the heartbeat between
// writes.
//
// Frames are queued with Send, which copies them into pooled chunks
// (frameQueue), so callers reuse their buffers at once, and a link with
// nothing to send holds no buffer. The writer takes the whole queue and
// writes it with one writev.
//
// A frame sent with SendAlone, by the only call in flight on the
// connection, is written by its sender when nobody else is writing, with
// one non-blocking syscall; the writer gets only what the socket did not
// take. A lone call then costs no wake-up of the writer goroutine, a large
// part of a call's latency between two idle processes. With more calls in
// flight, frames queue and the writer coalesces them, as one syscall for
// many frames costs less than a syscall each. This is brpc's "wait-free
// write", kept to the case where it pays.
//
// A Link's methods are safe for concurrent use. It owns one goroutine, Run,
// which its connection starts; Done is closed when Run returns.
type Link struct {
	nc  net.Conn
	raw syscall.RawConn // nc's socket, for inline writes; nil if nc is not a plain socket (TLS)
	cfg Config
	// readSeen is set by the reader on every frame (FrameRead).
	readSeen atomic.Bool
	// bytesSeen is set on every read that returns bytes (Reader): a large
	// frame in progress proves its sender alive, though no whole frame
	// arrives for a while on a slow link.
	bytesSeen atomic.Bool
	// waiting is set while the reader waits in WaitRoom, and onCalls
	// while it waits there for its calls in flight only.
	waiting, onCalls atomic.Bool

	mu    sync.Mutex // guards the fields below
	space sync.Cond  // signalled when the queue drains
	queue frameQueue
	// backlog counts the bytes queued or being written. It changes under
	// mu and is read without it, once per call, by the server's reader
	// (WaitRoom) and its calls (Backlog).
	backlog atomic.Int64
	err     error // first failure; set once
	closing bool  // flush what is queued, then stop
	writing bool  // a goroutine (the writer or an inline sender) writes to nc
	held    bool  // queue without waking the writer: the server's reader runs a burst of calls

	inline  []byte // the frame being written inline, for inlineWrite
	written int    // what of it the socket took
	// inlineWrite is the callback of nc's RawConn.Write, made once so
	// that an inline write allocates nothing.
	inlineWrite func(fd uintptr) bool

	// Streams with frames to send (stream.go), served in turn by the
	// writer, a few chunks each, after the frames queued.
	lowat   atomic.Bool // TCP_NOTSENT_LOWAT is set: the connection carries streams
	smu     sync.Mutex  // guards sready and sbusy
	sready  []*Stream
	sbusy   bool      // the writer frames and writes streams' frames: it looks at sready once done, unwoken
	scratch []*Stream // the writer's: an array for the next sready

	// The writer's: the array of its last batch, for the queue's next,
	// and its buffer for streams' frames.
	spareBufs net.Buffers
	sbuf      []byte
	// The chunks of streams' messages written from their buffers rather
	// than copied into sbuf, each at its place in sbuf (srefs); their
	// bytes (srefBytes); and the buffers to give back once written.
	srefs     []streamRef
	srefBytes int
	srelease  []*[]byte
	out       net.Buffers // the array of what write writes: a batch's chunks, then sbuf
	wout      net.Buffers // what write has yet to write of it

	kick chan struct{} // a non-blocking nudge: the queue has frames
	quit chan struct{} // closed by Stop
	done chan struct{} // closed when the writer exits
	once sync.Once
}

// Config is how a Link behaves.
type Config struct {
	// HeartbeatInterval is how often the writer checks that the peer is
	// alive, pinging it when it sent no whole frame since the last check;
	// HeartbeatTimeout is how long a silent peer, or one that takes no
	// byte written to it, is given before the link fails.
	HeartbeatInterval, HeartbeatTimeout time.Duration
	// MaxFrame bounds the frames the link makes itself (pings).
	MaxFrame int
	// Blocking makes Send wait while more than MaxQueued bytes are queued
	// (a client's calls). A server's replies never wait: its reader stops
	// taking calls instead (WaitRoom), so that no handler goroutine is
	// held by a client that does not read.
	Blocking bool
	// OnDead is called once, from the writer, when the link fails.
	OnDead func(error)
}

// NewLink returns the link of nc; its connection starts Run.
func NewLink(nc net.Conn, cfg Config) *Link {
	l := &Link{
		cfg:  cfg,
		kick: make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	l.SetConn(nc)
	l.space.L = &l.mu
	l.inlineWrite = l.writeSome
	return l
}

// SetConn makes nc the connection written to. It must be called before
// Run starts. Only a plain socket is written inline: TLS, or a wrapper,
// must see every byte through its Write.
func (l *Link) SetConn(nc net.Conn) {
	l.nc, l.raw = nc, nil
	switch sc := nc.(type) {
	case *net.TCPConn, *net.UnixConn:
		if raw, err := sc.(syscall.Conn).SyscallConn(); err == nil {
			l.raw = raw
		}
	}
}

// Done is closed when the writer has exited.
func (l *Link) Done() <-chan struct{} { return l.done }

// Backlog is the bytes queued or being written.
func (l *Link) Backlog() int64 { return l.backlog.Load() }

// FrameRead tells the heartbeat that the reader read a whole frame.
func (l *Link) FrameRead() { l.readSeen.Store(true) }

// Reader returns r, the reading side of the link's connection, counting
// every read that returns bytes as a sign of life (see progressReader).
func (l *Link) Reader(r io.Reader) io.Reader { return &progressReader{r, &l.bytesSeen} }

// Send queues one encoded frame. On a blocking link it waits while more
// than MaxQueued bytes wait for a slow peer. It fails once the link has
// failed.
func (l *Link) Send(frame []byte) error { return l.SendAlone(frame, false) }

// SendAlone is Send for a frame that may be written inline: alone says
// its call is the only one in flight on the connection.
func (l *Link) SendAlone(frame []byte, alone bool) error {
	var seg frameQueue // a large frame, copied before the lock
	if len(frame) >= chunkSize {
		seg = segmentOf(frame)
		defer func() { freeChunks(seg.bufs) }() // none once queued (put)
	}
	l.mu.Lock()
	if l.cfg.Blocking && l.queue.Len() > MaxQueued && l.err == nil && !l.closing {
		// The peer reads slower than we write. Wait for the writer to
		// drain the queue, but not for ever: a peer that takes no bytes
		// for the heartbeat timeout is cut, so that it cannot hold the
		// goroutines that answer it, nor memory.
		expired := false
		t := time.AfterFunc(l.cfg.HeartbeatTimeout, func() {
			l.mu.Lock()
			expired = true
			l.space.Broadcast()
			l.mu.Unlock()
		})
		for l.queue.Len() > MaxQueued && l.err == nil && !l.closing && !expired {
			l.space.Wait()
		}
		t.Stop()
		if expired && l.queue.Len() > MaxQueued && l.err == nil && !l.closing {
			l.mu.Unlock()
			err := &slowReaderError{queued: MaxQueued, wait: l.cfg.HeartbeatTimeout}
			l.fail(err)
			l.Stop(err)
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
	l.backlog.Add(int64(len(frame)))
	if l.held {
		l.queue.put(frame, &seg)
		full := l.queue.Len() >= maxHeld
		l.mu.Unlock()
		if full {
			l.nudge()
		}
		return nil
	}
	if alone && !l.writing && l.queue.Len() == 0 && l.raw != nil {
		l.writing = true
		l.mu.Unlock()
		l.writeInline(frame)
		return nil
	}
	wasEmpty := l.queue.Len() == 0
	l.queue.put(frame, &seg)
	l.mu.Unlock()
	if wasEmpty {
		l.nudge()
	}
	return nil
}

// Hold makes frames sent from now on wait in the queue, without waking
// the writer, until Release or until maxHeld bytes wait: a server's
// reader that runs a burst of calls sends their replies in one write at
// the burst's end.
func (l *Link) Hold() {
	l.mu.Lock()
	l.held = true
	l.mu.Unlock()
}

// Release ends a hold and wakes the writer for what it held.
func (l *Link) Release() {
	l.mu.Lock()
	was := l.held
	l.held = false
	more := l.queue.Len() > 0
	l.mu.Unlock()
	if was && more {
		l.nudge()
	}
}

// streamLowat is what a connection that carries streams lets the kernel
// hold unsent (TCP_NOTSENT_LOWAT, on Linux): a bulk stream then waits in
// the writer, whose every write puts the connection's other frames first,
// rather than in a socket buffer of megabytes that a reply would queue
// behind.
const streamLowat = 512 << 10

// ready puts s on the list of streams with frames to send, and wakes
// the writer. s is on it once at most (Stream.inReady).
func (l *Link) ready(s *Stream) {
	if !l.lowat.Load() && l.lowat.CompareAndSwap(false, true) && l.raw != nil {
		_ = l.raw.Control(func(fd uintptr) { setNotSentLowat(fd, streamLowat) })
	}
	l.smu.Lock()
	l.sready = append(l.sready, s)
	busy := l.sbusy
	l.smu.Unlock()
	if !busy {
		l.nudge()
	}
}

// Bounds of the stream frames the writer adds to one write: a write of
// queued frames (replies, credits, pings) waits at most this long behind
// streams.
const maxStreamBatch = 128 << 10

// minStreamWrite is the write of streams' frames below which the writer
// yields once before writing, for their senders to add more.
const minStreamWrite = 16 << 10

// streamFrames appends to b the frames of the streams that have some to
// send, round after round, each stream a few chunks a round, weighted by
// priority (1 chunk at priority 0 to 4 at 9), up to maxStreamBatch bytes;
// it reports whether streams still have frames to send.
func (l *Link) streamFrames(b []byte) ([]byte, bool) {
	start := len(b) + l.srefBytes
	for len(b)+l.srefBytes-start < maxStreamBatch {
		l.smu.Lock()
		turn := l.sready
		l.sready = nil
		l.smu.Unlock()
		if len(turn) == 0 {
			return b, false
		}
		again := l.scratch[:0] // the streams with more
		i := 0
		for ; i < len(turn) && len(b)+l.srefBytes-start < maxStreamBatch; i++ {
			s := turn[i]
			var more bool
			b, more = s.frames(b, 1+int(s.prio)/3)
			if more {
				again = append(again, s)
			}
		}
		again = append(again, turn[i:]...) // not served: the batch is full
		l.smu.Lock()
		l.sready = append(again, l.sready...) // those readied meanwhile go last
		l.smu.Unlock()
		clear(turn)
		l.scratch = turn[:0]
	}
	l.smu.Lock()
	more := len(l.sready) > 0
	l.smu.Unlock()
	return b, more
}

// minRefChunk is the chunk of a stream's message from which the writer
// writes it from the message's buffer rather than copy it: below it, a
// copy costs less than a piece more for writev.
const minRefChunk = 4 << 10

// streamRef is a chunk that the writer writes from its message's buffer,
// after the bytes of sbuf before at.
type streamRef struct {
	at   int
	body []byte
}

// refer has the writer write body after what the streams' frames hold
// at, without copying it. Only the writer calls it (Stream.frames).
func (l *Link) refer(at int, body []byte) {
	l.srefs = append(l.srefs, streamRef{at, body})
	l.srefBytes += len(body)
}

// releaseAfterWrite gives b back to the pool once the write that refers
// to it is done. Only the writer calls it (Stream.frames).
func (l *Link) releaseAfterWrite(b *[]byte) { l.srelease = append(l.srelease, b) }

// wroteRefs forgets the chunks written from their messages' buffers, and
// gives the buffers of the messages done back to the pool.
func (l *Link) wroteRefs() {
	clear(l.srefs)
	l.srefs, l.srefBytes = l.srefs[:0], 0
	for i, b := range l.srelease {
		PutBuf(b)
		l.srelease[i] = nil
	}
	l.srelease = l.srelease[:0]
}

// nudge wakes the writer without waiting.
func (l *Link) nudge() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// writeInline writes frame with one non-blocking syscall on the caller's
// goroutine, which holds l.writing. What the socket does not take goes to
// the front of the queue, for the writer; so do frames queued meanwhile.
// Errors, too, are left to the writer, which meets them on its own write
// and fails the link once, in one place.
func (l *Link) writeInline(frame []byte) {
	n := l.tryWrite(frame)
	l.mu.Lock()
	l.writing = false
	l.backlog.Add(-int64(n))
	if n < len(frame) {
		l.queue.pushFront(frame[n:])
	}
	more := l.queue.Len() > 0 || l.closing
	if n > 0 {
		l.space.Broadcast()
	}
	l.mu.Unlock()
	if more {
		l.nudge()
	}
}

// writeSome is the callback of an inline write: one write(2) of l.inline,
// keeping what the socket took in l.written. It never waits for room; the
// writer does that.
func (l *Link) writeSome(fd uintptr) bool {
	for {
		n, err := syscall.Write(int(fd), l.inline)
		if err == syscall.EINTR {
			continue
		}
		l.written = max(n, 0)
		return true
	}
}

// tryWrite writes what of b the socket takes at once and returns how
// much that was. Only the holder of l.writing calls it.
func (l *Link) tryWrite(b []byte) int {
	l.inline, l.written = b, 0
	err := l.raw.Write(l.inlineWrite)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The write deadline the writer set for its last batch has
		// passed, so the socket refused to try. Clear it: nobody else
		// writes while we hold l.writing, and the writer sets its own.
		_ = l.nc.SetWriteDeadline(time.Time{})
		_ = l.raw.Write(l.inlineWrite)
	}
	n := l.written
	l.inline = nil
	return n
}

// WaitRoom waits until the bytes queued or being written, plus the
// bytes held by calls in flight, are at most limit, and fewer than
// maxCalls calls are in flight; or until the link has failed, which it
// returns. The bytes held do not count while fewer than minHeldCalls
// calls are in flight. held counts both. Whoever lowers it then calls Wake. A peer
// that reads nothing is cut by the writer, or by the heartbeat if it is
// silent too, within the heartbeat timeout, so a wait for what is queued
// is bounded; a wait for calls in flight only lasts until they are
// answered, and the heartbeat meanwhile takes the peer for alive: it is
// not read because the server chose not to.
func (l *Link) WaitRoom(limit int, held *Held, maxCalls int) error {
	full := func() bool { return !l.HasRoom(limit, held, maxCalls) }
	if !full() {
		return nil // the common case, without the lock
	}
	l.Release() // what is held must be written for room to come
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waiting.Store(true)
	for full() && l.err == nil && !l.closing {
		// Waiting for the calls in flight, not for the peer to read: the
		// peer is not read, so its silence proves nothing.
		l.onCalls.Store(l.backlog.Load() <= int64(limit))
		l.space.Wait()
	}
	l.waiting.Store(false)
	l.onCalls.Store(false)
	return l.err
}

// HasRoom reports whether WaitRoom would return at once.
func (l *Link) HasRoom(limit int, held *Held, maxCalls int) bool {
	n, calls := held.Load()
	queued := l.backlog.Load()
	return queued <= int64(limit) && calls < maxCalls && (calls < minHeldCalls || queued+n <= int64(limit))
}

// Wake wakes a WaitRoom that waits, after what it waits on has dropped.
func (l *Link) Wake() {
	if l.waiting.Load() {
		l.mu.Lock()
		l.space.Broadcast()
		l.mu.Unlock()
	}
}

// FlushAndStop makes the writer write what is queued and then exit.
func (l *Link) FlushAndStop() {
	l.mu.Lock()
	l.closing = true
	l.space.Broadcast()
	l.mu.Unlock()
	l.nudge()
}

// Stop makes the writer exit at once, dropping what is queued.
func (l *Link) Stop(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.space.Broadcast()
	l.mu.Unlock()
	l.once.Do(func() { close(l.quit) })
}

// Run is the writer goroutine. It returns when the link fails, is
// stopped, or has flushed after FlushAndStop.
func (l *Link) Run() {
	defer close(l.done)
	tick := time.NewTicker(l.cfg.HeartbeatInterval)
	defer tick.Stop()
	lastRead := time.Now()
	var pingID uint64
	var ping [wire.HeaderSize]byte
	// Since the last tick, the writer wrote streams' frames (streamed),
	// and so many bytes in all (wrote).
	streamed, wrote := false, 0
	for {
		select {
		case <-l.quit:
			return
		case <-tick.C:
			// The clock, not the tick's time: a tick that waited in its
			// channel while a long write ran is stale, and would move
			// lastRead back past what write saw.
			now := time.Now()
			if !streamed { // no stream wrote for a tick: free its buffer
				l.sbuf = nil
			}
			if wrote < chunkSize { // a tick with less than a chunk written: give back the chunks kept
				l.mu.Lock()
				l.queue.release()
				l.mu.Unlock()
			}
			streamed, wrote = false, 0
			frames, bytes := l.readSeen.Swap(false), l.bytesSeen.Swap(false)
			if frames || bytes || l.onCalls.Load() {
				lastRead = now
			}
			if frames {
				continue
			}
			// No whole frame: ping, so that a peer whose own reader sees
			// only part of a large frame of ours hears from us.
			idle := now.Sub(lastRead)
			if idle >= l.cfg.HeartbeatTimeout {
				l.fail(&heartbeatError{idle: idle})
				return
			}
			pingID++
			b := wire.BeginFrame(ping[:0], wire.TypePing, pingID)
			_ = wire.EndFrame(b, 0, l.cfg.MaxFrame)
			// Queued like any frame: an inline sender may be writing.
			l.mu.Lock()
			l.queue.push(b)
			l.backlog.Add(int64(len(b)))
			l.mu.Unlock()
		case <-l.kick:
			// Let the goroutines that are about to queue frames do so,
			// so that one syscall carries them all.
			runtime.Gosched()
		}
		l.mu.Lock()
		if l.writing {
			// An inline sender is writing; it nudges when it is done.
			l.mu.Unlock()
			continue
		}
		queued := l.queue.Len()
		batch := l.queue.take(l.spareBufs)
		l.spareBufs = nil
		l.writing = true
		closing := l.closing
		l.space.Broadcast()
		l.mu.Unlock()
		l.smu.Lock()
		l.sbusy = true
		l.smu.Unlock()
		sb, streams := l.streamFrames(l.sbuf[:0])
		if !streams && len(sb) > 0 && queued+len(sb)+l.srefBytes < minStreamWrite {
			// Streams' frames, and few: their senders are likely about to
			// queue more. Let them, once, so that one write carries
			// several messages (grpc-go's loopy writer does the same).
			runtime.Gosched()
			sb, streams = l.streamFrames(sb)
		}
		streamed = streamed || len(sb) > 0
		l.sbuf = sb
		sn := len(sb) + l.srefBytes // the streams' bytes
		l.backlog.Add(int64(sn))
		if queued+sn > 0 && !l.write(batch, sb, &lastRead) {
			return
		}
		l.wroteRefs()
		l.smu.Lock()
		l.sbusy = false
		streams = streams || len(l.sready) > 0 // readied while busy, unwoken
		l.smu.Unlock()
		wrote += queued + sn
		l.mu.Lock()
		l.queue.recycle(batch)
		l.writing = false
		l.backlog.Add(-int64(queued + sn))
		l.spareBufs = batch[:0]
		l.space.Broadcast()
		empty := l.queue.Len() == 0 && !streams
		l.mu.Unlock()
		if closing && empty {
			return
		}
		if !empty {
			l.nudge()
		}
	}
}

// write writes the chunks of a batch, then sb, in one writev. A peer
// that stops reading blocks the write; it is given up once it has taken
// no byte for the heartbeat timeout: as dead if it has also sent nothing
// since *lastRead (which write moves forward while the peer still
// sends), as a slow reader otherwise. So a frozen peer is found as fast
// by a blocked writer as by the heartbeat, and a peer that sends but does
// not read cannot hold the bytes queued for it for long.
func (l *Link) write(batch net.Buffers, sb []byte, lastRead *time.Time) bool {
	all := append(l.out[:0], batch...)
	at := 0
	for _, r := range l.srefs {
		if r.at > at {
			all = append(all, sb[at:r.at])
		}
		all, at = append(all, r.body), r.at
	}
	if len(sb) > at {
		all = append(all, sb[at:])
	}
	// WriteTo consumes what it writes from the slice it is called on:
	// a field, as a local would escape to the heap on every write; all
	// keeps the array for the next write.
	l.wout = all
	defer func() {
		clear(all)
		l.out, l.wout = all[:0], nil
	}()
	now := time.Now()
	progress := now
	for {
		_ = l.nc.SetWriteDeadline(now.Add(l.cfg.HeartbeatInterval))
		n, err := l.wout.WriteTo(l.nc)
		if err == nil {
			return true
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			l.fail(err)
			return false
		}
		now = time.Now()
		if n > 0 {
			progress = now
		}
		if l.readSeen.Swap(false) || l.bytesSeen.Swap(false) { // the peer sent something since the last look
			*lastRead = now
		}
		if idle := now.Sub(*lastRead); idle >= l.cfg.HeartbeatTimeout {
			l.fail(&heartbeatError{idle: idle})
			return false
		}
		if stuck := now.Sub(progress); stuck >= l.cfg.HeartbeatTimeout {
			l.fail(&slowReaderError{queued: int(l.backlog.Load()), wait: stuck})
			return false
		}
	}
}

func (l *Link) fail(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.space.Broadcast()
	l.mu.Unlock()
	l.cfg.OnDead(err)
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

// progressReader is the reading side of a link's connection as its
// wire.Reader reads it: every read that returns bytes marks the peer alive
// (Link.bytesSeen), so that the heartbeat counts the progress of a frame,
// not only whole frames.
type progressReader struct {
	r    io.Reader
	seen *atomic.Bool // nil until the link is made
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 && p.seen != nil {
		p.seen.Store(true)
	}
	return n, err
}

// Budget is a wire.Budget of Max bytes shared by a server's readers.
type Budget struct {
	used atomic.Int64
	Max  int64 // set before use
}

// Take takes n bytes of the budget, unless that would pass Max.
func (b *Budget) Take(n int) bool {
	if b.used.Add(int64(n)) > b.Max {
		b.used.Add(-int64(n))
		return false
	}
	return true
}

// Give gives back n bytes taken.
func (b *Budget) Give(n int) { b.used.Add(-int64(n)) }

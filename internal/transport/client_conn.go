package transport

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/internal/wire"
)

// ClientConn is one connection of a client, over TCP, TLS or a Unix
// socket: any number of calls share it, each a Request frame out and a
// Response frame back, matched by id. It owns two goroutines: the reader,
// which hands each Response to its call's ClientHandler.Reply, answers pings
// and takes in the server's Settings and GoAway, and its Link's writer.
//
// The caller of a call encodes its Request and sends it in two steps:
// Add makes the call pending, and Write queues the frame. A call ends
// once: by its Response, by Abandon, or by the connection's failure,
// which hands every pending call to ClientHandler.Lost.
type ClientConn[C any] struct {
	h        ConnHandler[C]
	nc       net.Conn
	link     *Link
	maxFrame int
	nextID   atomic.Uint64
	dead     atomic.Bool // it failed: it takes no more calls, and a new connection is needed

	draining atomic.Bool   // the server sent GoAway
	ended    atomic.Bool   // a last GoAway said which Requests the server read
	lastRead atomic.Uint64 // the highest Request id it read, every one answered

	// Streams: the server's Settings said it serves them (streamsOK),
	// and settled is closed once the first frame after the preface came,
	// by when its Settings, if any, have.
	streams   streamOwner
	streamsOK atomic.Bool
	settled   chan struct{}
	settle    sync.Once

	mu      sync.Mutex // guards the field below
	pending Pending[C] // calls awaiting their Response; why the connection died or retires
}

// ConnConfig is how a ClientConn behaves.
type ConnConfig struct {
	// HeartbeatInterval, HeartbeatTimeout and MaxFrame are the Link's
	// (see Config); MaxFrame also bounds the frames the reader takes.
	HeartbeatInterval, HeartbeatTimeout time.Duration
	MaxFrame                            int
	// Settings is the client's Settings frame, sent after the preface;
	// nil if it has none to send.
	Settings []byte
	// Goroutines counts the connection's two goroutines; the client
	// waits on it as it closes.
	Goroutines *sync.WaitGroup
	// StreamBudget is what the connection's streams may hold received
	// and not yet taken, in all; 0 for DefaultStreamBudget.
	StreamBudget int
}

// ConnHandler is what a ClientConn asks of the protocol above it: a
// ClientHandler, and what to do with the server's Settings and GoAway. Both are
// called from the reader, and must not block.
type ConnHandler[C any] interface {
	ClientHandler[C]
	// Settings takes in the server's Settings: the compression
	// algorithms it accepts.
	Settings(accept AlgSet)
	// GoAway says the server drains: it answers the calls it has read,
	// and the connection takes no new call (Add fails with ErrDraining).
	GoAway()
}

// ErrDraining is what Add fails with once the server has sent GoAway:
// the call was not sent, and may go on a new connection.
var ErrDraining = errors.New("the server is draining")

// cancelFlushWait bounds how long a closing client waits for its Cancel
// frames to be written (see Close).
const cancelFlushWait = 100 * time.Millisecond

// DialConn handshakes on nc, bounded by ctx: it sends the preface, reads
// the server's, sends cfg.Settings, and starts the connection's
// goroutines.
func DialConn[C any](ctx context.Context, nc net.Conn, cfg ConnConfig, h ConnHandler[C]) (*ClientConn[C], error) {
	deadline, _ := ctx.Deadline()
	_ = nc.SetDeadline(deadline)
	if _, err := nc.Write(wire.AppendPreface(nil, wire.Version)); err != nil {
		return nil, err
	}
	cc := newClientConn(nc, cfg, h)
	r := cc.reader()
	if err := prefaceError(wire.ReadPreface(r)); err != nil {
		return nil, err
	}
	if cfg.Settings != nil {
		if _, err := nc.Write(cfg.Settings); err != nil {
			return nil, err
		}
	}
	_ = nc.SetDeadline(time.Time{})
	cc.run(cfg.Goroutines, func() { cc.readLoop(r) })
	return cc, nil
}

// StartConn starts a connection on nc without waiting for the handshake:
// the preface is the first thing the writer sends, then cfg.Settings,
// calls queue behind them, and the reader checks the server's preface
// before any Response. A bad preface fails the connection with an error
// that wraps the one of the handshake.
func StartConn[C any](nc net.Conn, cfg ConnConfig, h ConnHandler[C]) *ClientConn[C] {
	cc := newClientConn(nc, cfg, h)
	_ = cc.link.Send(wire.AppendPreface(nil, wire.Version))
	if cfg.Settings != nil {
		_ = cc.link.Send(cfg.Settings)
	}
	cc.run(cfg.Goroutines, func() {
		r := cc.reader()
		if err := prefaceError(wire.ReadPreface(r)); err != nil {
			cc.fail(fmt.Errorf("kiev: handshake: %w", err), false)
			return
		}
		cc.readLoop(r)
	})
	return cc
}

// newClientConn makes the connection on nc, not yet running.
func newClientConn[C any](nc net.Conn, cfg ConnConfig, h ConnHandler[C]) *ClientConn[C] {
	cc := &ClientConn[C]{h: h, nc: nc, maxFrame: cfg.MaxFrame, settled: make(chan struct{})}
	cc.link = NewLink(nc, Config{
		HeartbeatInterval: cfg.HeartbeatInterval, HeartbeatTimeout: cfg.HeartbeatTimeout, MaxFrame: cfg.MaxFrame,
		Blocking: true, // a caller waits for room
		OnDead:   func(err error) { cc.fail(err, false) },
	})
	cc.streams.init(cc.link, cfg.MaxFrame, cmp.Or(cfg.StreamBudget, DefaultStreamBudget), func() int { return MaxQueued })
	return cc
}

// reader returns the frame reader of cc's socket.
func (cc *ClientConn[C]) reader() *wire.Reader {
	return wire.NewReader(cc.link.Reader(cc.nc), ReadBufSize, cc.maxFrame)
}

// run starts cc's writer, and its reader, read, counted in wg.
func (cc *ClientConn[C]) run(wg *sync.WaitGroup, read func()) {
	wg.Go(cc.link.Run)
	wg.Go(read)
}

// prefaceError says what is wrong with the server's answer to the
// preface, the version v and the error of reading it, or returns nil.
func prefaceError(v uint8, err error) error {
	switch {
	case errors.Is(err, wire.ErrBadMagic):
		return fmt.Errorf("the peer does not speak the kiev protocol: %w", err)
	case err != nil:
		return err
	case v > wire.Version:
		return fmt.Errorf("the peer answered with protocol version %d, newer than this client's %d; it must answer with the lower version", v, wire.Version)
	}
	return nil
}

// Dead reports whether the connection failed: it takes no more calls.
func (cc *ClientConn[C]) Dead() bool { return cc.dead.Load() }

// Draining reports whether the server sent GoAway.
func (cc *ClientConn[C]) Draining() bool { return cc.draining.Load() }

// Err is why the connection failed, or nil.
func (cc *ClientConn[C]) Err() error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.pending.Err()
}

// NextID returns the id of a new call, to encode its Request with.
func (cc *ClientConn[C]) NextID() uint64 { return cc.nextID.Add(1) }

// Add makes call, of id, pending: from now on its Response, Abandon or
// the connection's failure may end it. alone says it is the only call in
// flight, for Write. Add fails, the call not added, with ErrDraining once
// the server has sent GoAway, or with why the connection takes no call
// (it failed, or retires; see Pending).
func (cc *ClientConn[C]) Add(id uint64, call C) (alone bool, err error) {
	cc.mu.Lock()
	switch err := cc.pending.Closed(); {
	case err != nil:
		cc.mu.Unlock()
		return false, err
	case cc.draining.Load():
		cc.mu.Unlock()
		return false, ErrDraining
	}
	_ = cc.pending.Add(id, call) // open: checked under the same lock
	alone = cc.pending.Len() == 1
	cc.mu.Unlock()
	return alone, nil
}

// Write queues the Request frame of the call of id, which Add made
// pending and said whether it is alone. If the frame cannot be queued,
// Write takes the call back out and returns why; it returns nil if the
// call was ended first (the connection failed under it, and fails it).
func (cc *ClientConn[C]) Write(id uint64, frame []byte, alone bool) error {
	if err := cc.link.SendAlone(frame, alone); err != nil {
		if _, ok := cc.take(id); ok {
			return err
		}
	}
	return nil
}

// take removes and returns the pending call with id, if it is there; ok
// is false if it is gone (answered, abandoned, or failed with the
// connection).
func (cc *ClientConn[C]) take(id uint64) (call C, ok bool) {
	cc.mu.Lock()
	call, ok, retired := cc.pending.Take(id)
	cc.mu.Unlock()
	if retired != nil {
		cc.fail(retired, false)
	}
	return call, ok
}

// Abandon gives up on the call of id, whose caller's context ended with
// err. It reports false if the call has already ended otherwise, in which
// case it completes shortly. A canceled call tells the server to cancel
// the handler; a call past its deadline does not need to, as the
// handler's ctx carries the same deadline.
func (cc *ClientConn[C]) Abandon(id uint64, err error) bool {
	if _, ok := cc.take(id); !ok {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var tmp [wire.HeaderSize]byte
	b := wire.BeginFrame(tmp[:0], wire.TypeCancel, id)
	_ = wire.EndFrame(b, 0, cc.maxFrame)
	_ = cc.link.Send(b)
	return true
}

// CloseWhenIdle closes the connection with err once the calls in flight
// have ended; new calls fail at once with err.
func (cc *ClientConn[C]) CloseWhenIdle(err error) {
	cc.mu.Lock()
	idle := cc.pending.Retire(err)
	cc.mu.Unlock()
	if idle {
		cc.fail(err, false)
	}
}

// Close closes the connection at once, as the client closes: its calls
// fail with err, and the server is told that nobody waits for them any
// more, so that their handlers are canceled (a server lets a connection's
// calls finish when the client ends its stream, as net/rpc's does for a
// client that half-closes).
func (cc *ClientConn[C]) Close(err error) { cc.fail(err, true) }

// cancelPending sends the Cancels of the calls pending as the client
// closes. The frames are given a moment to leave, no more: a peer that
// does not read gets none.
func (cc *ClientConn[C]) cancelPending(pending map[uint64]C) {
	if cc.link.Backlog() > MaxQueued/2 {
		return // the peer is not reading; it would not read these either
	}
	b := make([]byte, 0, len(pending)*wire.HeaderSize)
	for id := range pending {
		start := len(b)
		b = wire.BeginFrame(b, wire.TypeCancel, id)
		_ = wire.EndFrame(b, start, cc.maxFrame)
	}
	if cc.link.Send(b) != nil {
		return
	}
	cc.link.FlushAndStop()
	t := time.NewTimer(cancelFlushWait)
	defer t.Stop()
	select {
	case <-cc.link.Done():
	case <-t.C:
	}
}

func (cc *ClientConn[C]) readLoop(r *wire.Reader) {
	// f, h and the Response the handler sees live across frames: by
	// pointer through an interface, each would otherwise be allocated
	// anew.
	var f wire.Frame
	var h wire.Header
	var resp Response
	for {
		if !r.Buffered() {
			cc.streams.flushWakes() // Next may wait for the server
		}
		var err error
		f, err = r.Next()
		if err == nil && f.Type != wire.TypePing && f.Type != wire.TypePong {
			err = wire.ParseHeader(f.Header, &h)
		}
		if err != nil {
			cc.fail(err, false)
			return
		}
		cc.link.FrameRead()
		switch f.Type {
		case wire.TypeResponse:
			if cc.streams.open.Load() > 0 {
				if s, _ := cc.streams.get(f.ID); s != nil {
					resp.read(&f, &h)
					s.ended(&resp)
					break
				}
			}
			if call, ok := cc.take(f.ID); ok {
				resp.read(&f, &h)
				cc.h.Reply(call, &resp)
			}
		case wire.TypeMessage, wire.TypeCredit, wire.TypeEnd:
			if err := cc.streams.frame(&f, &h); err != nil {
				cc.fail(err, false)
				return
			}
		case wire.TypeSettings:
			cc.streamsOK.Store(h.HasStreams)
			cc.h.Settings(SetOf(h.Accept))
		case wire.TypeGoAway:
			if h.HasLastID {
				cc.lastRead.Store(h.LastID)
				cc.ended.Store(true)
			}
			cc.draining.Store(true)
			cc.h.GoAway()
		case wire.TypePing:
			var tmp [wire.HeaderSize]byte
			b := wire.BeginFrame(tmp[:0], wire.TypePong, f.ID)
			_ = wire.EndFrame(b, 0, cc.maxFrame)
			cc.streams.flushWakes() // Send may wait for room
			_ = cc.link.Send(b)
		}
		cc.settle.Do(func() { close(cc.settled) })
	}
}

// fail kills the connection once, of cause, and hands the calls pending
// to ClientHandler.Lost; with cancel, the server is first told to cancel them
// (see Close).
func (cc *ClientConn[C]) fail(cause error, cancel bool) {
	err := cc.h.Failure(cause, cc.draining.Load())
	cc.mu.Lock()
	pending, first := cc.pending.Fail(err)
	if first {
		cc.dead.Store(true)
	}
	cc.mu.Unlock()
	if !first {
		return
	}
	if cancel && len(pending) > 0 {
		cc.cancelPending(pending)
	}
	cc.link.Stop(err)
	cc.nc.Close()
	cc.streams.failAll(err)
	cc.h.Lost(Loss[C]{
		Cause: cause, Err: err, Calls: pending, Draining: cc.draining.Load(),
		// A server that drained sends, as it ends the stream, a last
		// GoAway with the highest Request id it read, having answered
		// every one.
		drained:  cc.ended.Load() && errors.Is(cause, io.EOF),
		lastRead: cc.lastRead.Load(),
	})
}

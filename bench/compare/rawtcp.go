package main

// The raw-TCP limit: a pipelined echo of exactly the bytes a kiev client
// sends for the same call (captured from a real kiev connection), framed by
// kiev's own 4-byte big-endian length prefix (PROTOCOL.md, "Frames"), over
// one connection with coalesced writes. It has everything a multiplexed
// RPC needs to move bytes and nothing else: no ids to match (replies come
// back in order), no codec, no handler, no scheduler. No framework on the
// same connection layout can beat it.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"

	"github.com/kievrpc/kiev"
)

// maxRawFrame bounds a raw frame, as kiev's default frame limit does.
const maxRawFrame = 16 << 20

// echoServer serves each connection its listener accepts with serve, on
// a goroutine of its own: rawEcho for raw-tcp, floorServe for mux-floor.
type echoServer struct {
	l     net.Listener
	serve func(net.Conn)
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newEchoServer(l net.Listener, serve func(net.Conn)) *echoServer {
	s := &echoServer{l: l, serve: serve, conns: make(map[net.Conn]struct{})}
	s.wg.Add(1)
	go s.accept()
	return s
}

func (s *echoServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.l.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serve(c)
			c.Close()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// close closes the listener and every connection, and waits for their
// goroutines.
func (s *echoServer) close() {
	s.l.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// rawEcho echoes the frames of c, flushing when its input is idle, until
// c fails.
func rawEcho(c net.Conn) error {
	br := bufio.NewReaderSize(c, 64<<10)
	bw := bufio.NewWriterSize(c, 64<<10)
	var hdr [4]byte
	buf := make([]byte, 0, 4<<10)
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[:]))
		if n > maxRawFrame {
			return fmt.Errorf("raw frame of %d bytes, over the %d limit", n, maxRawFrame)
		}
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return err
		}
		bw.Write(hdr[:])
		bw.Write(buf)
		if br.Buffered() == 0 {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
	}
}

// rawClient is the pipelined client: callers queue their frame on a
// batchWriter, which writes in a single syscall as many calls as arrived
// meanwhile; one reader goroutine hands each echoed frame to the oldest
// caller waiting.
type rawClient struct {
	conn net.Conn
	w    *batchWriter

	mu      sync.Mutex
	waiting []chan error // callers in write order; head is the oldest
	head    int
	err     error

	done chan struct{} // closed when both goroutines are gone
}

var errRawClosed = errors.New("raw client closed")

func dialRaw(addr string) (*rawClient, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &rawClient{conn: conn, done: make(chan struct{})}
	c.w = newBatchWriter(conn, c.fail)
	startReader(c.w, c.readLoop, c.done)
	return c, nil
}

// call sends frame and waits for its echo. reply is the caller's own
// channel, reused across its calls.
func (c *rawClient) call(frame []byte, reply chan error) error {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	// Queued under c.mu, so that frames go out in the order of waiting.
	c.waiting = append(c.waiting, reply)
	c.w.queue(frame)
	c.mu.Unlock()
	return <-reply
}

func (c *rawClient) readLoop() {
	br := bufio.NewReaderSize(c.conn, 64<<10)
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			c.fail(err)
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[:]))
		if _, err := br.Discard(n); err != nil {
			c.fail(err)
			return
		}
		c.mu.Lock()
		if c.head == len(c.waiting) {
			c.mu.Unlock()
			c.fail(errors.New("raw server sent a frame nobody waits for"))
			return
		}
		w := c.waiting[c.head]
		c.waiting[c.head] = nil
		c.head++
		if c.head == len(c.waiting) {
			c.waiting, c.head = c.waiting[:0], 0
		}
		c.mu.Unlock()
		w <- nil
	}
}

// fail ends the client: every waiting caller gets err.
func (c *rawClient) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		c.w.stop()
		c.conn.Close()
	}
	waiting := c.waiting[c.head:]
	c.waiting, c.head = nil, 0
	c.mu.Unlock()
	for _, w := range waiting {
		w <- err
	}
}

func (c *rawClient) close() {
	c.fail(errRawClosed)
	<-c.done
}

// startReader runs a client's readLoop on a goroutine of its own and
// closes done once it and the client's writer w have both returned.
func startReader(w *batchWriter, readLoop func(), done chan struct{}) {
	go func() {
		readLoop()
		<-w.done
		close(done)
	}()
}

// batchWriter writes the frames queued on it from one goroutine: as many
// as were queued since its last write, in one syscall, as kiev's writer
// does. Queued frames are copied, so callers reuse their buffers at once.
type batchWriter struct {
	conn   net.Conn
	onFail func(error) // called once, from the writer, if a write fails

	mu      sync.Mutex
	out     []byte // frames not yet written
	spare   []byte // the buffer of the last write, for the next swap
	stopped bool

	kick chan struct{} // wakes the writer; closed by stop
	done chan struct{} // closed when the writer has returned
}

func newBatchWriter(conn net.Conn, onFail func(error)) *batchWriter {
	w := &batchWriter{conn: conn, onFail: onFail, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go w.loop()
	return w
}

// queue copies frame to the queue. It drops it once the writer has
// stopped; the owner has failed its calls by then.
func (w *batchWriter) queue(frame []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.out = append(w.out, frame...)
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// stop ends the writer; what is still queued is dropped.
func (w *batchWriter) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.stopped = true
		close(w.kick)
	}
}

func (w *batchWriter) loop() {
	defer close(w.done)
	for range w.kick {
		// Let the callers about to queue do so first, so that one write
		// carries them all, as kiev's writer does: without it, on one CPU
		// the writer writes one frame at a time.
		runtime.Gosched()
		buf := w.take()
		if buf == nil { // an earlier write took them
			continue
		}
		if _, err := w.conn.Write(buf); err != nil {
			w.onFail(err)
			return
		}
		w.giveBack(buf)
	}
}

// take returns the frames queued, or nil if there are none, and makes the
// spare buffer the queue. The spare is spare no more until the write of
// the frames taken hands their buffer back: queue and spare must never be
// one buffer, or callers would append to the buffer being written.
func (w *batchWriter) take() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.out) == 0 {
		return nil
	}
	buf := w.out
	w.out, w.spare = w.spare[:0], nil
	return buf
}

// giveBack keeps the buffer of a finished write for the next take.
func (w *batchWriter) giveBack(buf []byte) {
	w.mu.Lock()
	w.spare = buf[:0]
	w.mu.Unlock()
}

// recordingConn keeps what is written to it while recording.
type recordingConn struct {
	net.Conn
	mu  sync.Mutex
	on  bool
	rec []byte
}

func (r *recordingConn) Write(p []byte) (int, error) {
	r.mu.Lock()
	if r.on {
		r.rec = append(r.rec, p...)
	}
	r.mu.Unlock()
	return r.Conn.Write(p)
}

func (r *recordingConn) record(on bool) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = on
	b := r.rec
	r.rec = nil
	return b
}

// captureKievRequest returns the bytes a kiev client writes for one call
// of method with args: one Request frame, length prefix included.
func captureKievRequest(addr, method string, args, reply func() any, opts ...kiev.DialOption) ([]byte, error) {
	var rc *recordingConn
	dialer := func(ctx context.Context, network, a string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, a)
		if err != nil {
			return nil, err
		}
		rc = &recordingConn{Conn: c}
		return rc, nil
	}
	c, err := kiev.Dial(addr, append(opts, kiev.WithContextDialer(dialer))...)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Call(ctx, method, args(), reply()); err != nil { // connects
		return nil, err
	}
	// A heartbeat may slip in; a clean capture is one Request frame.
	for range 5 {
		rc.record(true)
		err := c.Call(ctx, method, args(), reply())
		b := rc.record(false)
		if err != nil {
			return nil, err
		}
		const typeRequest = 1
		if len(b) > 5 && int(binary.BigEndian.Uint32(b))+4 == len(b) && b[4] == typeRequest {
			return b, nil
		}
	}
	return nil, errors.New("could not capture a kiev Request frame alone")
}

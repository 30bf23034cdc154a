package main

// The raw-TCP limit: one server stream per connection, each message a
// 4-byte big-endian length and its bytes, written through a 64 KiB buffer
// that goes out when full. The client asks for a stream with a 20-byte
// header (id, size, count, hold) and reads each message into one reused
// buffer. No multiplexing ids, codec, multiplexing or flow control beyond TCP's own: no
// framework streaming over TCP can beat it.

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
)

// rawHeader is the size of a stream's request: id, size, count, hold.
const rawHeader = 20

// maxRawMessage bounds a message the raw client accepts.
const maxRawMessage = 16 << 20

// rawServer serves raw streams on l until stop.
type rawServer struct {
	l     net.Listener
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func serveRaw(l net.Listener) (stop func()) {
	s := &rawServer{l: l, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s.stop
}

func (s *rawServer) accept() {
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
			_ = rawWatch(c)
			c.Close()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

func (s *rawServer) stop() {
	s.l.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// rawWatch serves one stream: the request, then the messages.
func rawWatch(c net.Conn) error {
	var req [rawHeader]byte
	if _, err := io.ReadFull(c, req[:]); err != nil {
		return err
	}
	a := watchArgs{
		ID:    int64(binary.BigEndian.Uint64(req[0:])),
		Size:  int(binary.BigEndian.Uint32(req[8:])),
		Count: int(binary.BigEndian.Uint32(req[12:])),
		Hold:  binary.BigEndian.Uint32(req[16:]) == 1,
	}
	if a.Size > maxRawMessage {
		return fmt.Errorf("raw: a message of %d bytes asked, over %d", a.Size, maxRawMessage)
	}
	bw := bufio.NewWriterSize(c, 64<<10)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(a.Size))
	data := blob(a.Size)
	// The stream ends when the client closes the connection: a write
	// fails, or, once a held stream has sent everything, the read below.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		io.Copy(io.Discard, c)
		cancel()
	}()
	n := 0
	err := serveWatch(ctx, a, func() error {
		bw.Write(hdr[:])
		if _, err := bw.Write(data); err != nil {
			return err
		}
		if n++; n == a.Count { // the last message goes out before a hold
			return bw.Flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}

// rawClient dials a connection per stream.
type rawClient struct{ addr string }

func (r *rawClient) get(context.Context, watchArgs) error { return errUnsupported }

func (r *rawClient) chat(context.Context) (chatStream, error) { return nil, errUnsupported }

func (r *rawClient) close() {}

func (r *rawClient) watch(ctx context.Context, a watchArgs) (recvStream, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", r.addr)
	if err != nil {
		return nil, err
	}
	var req [rawHeader]byte
	binary.BigEndian.PutUint64(req[0:], uint64(a.ID))
	binary.BigEndian.PutUint32(req[8:], uint32(a.Size))
	binary.BigEndian.PutUint32(req[12:], uint32(a.Count))
	if a.Hold {
		binary.BigEndian.PutUint32(req[16:], 1)
	}
	if _, err := c.Write(req[:]); err != nil {
		c.Close()
		return nil, err
	}
	s := &rawStream{c: c, br: bufio.NewReaderSize(c, 64<<10)}
	s.stop = context.AfterFunc(ctx, func() { c.Close() })
	return s, nil
}

type rawStream struct {
	c    net.Conn
	br   *bufio.Reader
	buf  []byte
	stop func() bool
}

func (s *rawStream) recv(context.Context) (int, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(s.br, hdr[:]); err != nil {
		return 0, err // io.EOF at the end of a stream of Count messages
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n > maxRawMessage {
		return 0, fmt.Errorf("raw: a message of %d bytes, over %d", n, maxRawMessage)
	}
	if cap(s.buf) < n {
		s.buf = make([]byte, n)
	}
	if _, err := io.ReadFull(s.br, s.buf[:n]); err != nil {
		return 0, err
	}
	return n, nil
}

func (s *rawStream) close() {
	s.stop()
	s.c.Close()
}

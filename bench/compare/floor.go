package main

// The multiplexing floor: the raw-TCP echo plus what every RPC framework
// that multiplexes calls on one connection and runs each on a goroutine
// must do, and nothing else. It sends the same bytes as raw-tcp (kiev's
// Request frames, each with an id of its own), and
//
//   - the client matches each reply to its caller by id, through a map,
//     since replies may come back in any order;
//   - the server copies each request out of its read buffer, which it
//     reuses, and hands it to a goroutine of its own, as net/rpc and
//     grpc-go do;
//   - that goroutine queues the echo on the connection's batch writer;
//   - the client hands each caller its reply's bytes, copied out of the
//     read buffer.
//
// There is no codec, no handler, no scheduler, no metrics. What separates
// it from raw-tcp is the price of the model; what separates a framework
// from it is the framework's own work.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// floorIDAt is where a kiev frame holds its call id: after the length
// prefix, the type and the flags (PROTOCOL.md, "Frames").
const floorIDAt = 6

// floorServe reads frames from c and echoes each from a goroutine of its
// own, until c fails.
func floorServe(c net.Conn) {
	w := newBatchWriter(c, func(error) { c.Close() })
	defer func() {
		c.Close()
		w.stop()
		<-w.done
	}()
	br := bufio.NewReaderSize(c, 64<<10)
	for {
		frame, err := readFloorFrame(br)
		if err != nil {
			return
		}
		go w.queue(frame)
	}
}

// readFloorFrame reads one frame, length prefix included, into a slice of
// its own.
func readFloorFrame(br *bufio.Reader) ([]byte, error) {
	hdr, err := br.Peek(4)
	if err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr))
	if n > maxRawFrame || n < floorIDAt+8-4 {
		return nil, fmt.Errorf("floor frame of %d bytes, outside %d–%d", n, floorIDAt+8-4, maxRawFrame)
	}
	frame := make([]byte, 4+n)
	if _, err := io.ReadFull(br, frame); err != nil {
		return nil, err
	}
	return frame, nil
}

// floorClient is the floor's client: callers queue their frame, under an
// id of their own, on a batch writer; one reader hands each reply to the
// caller its id names.
type floorClient struct {
	conn net.Conn
	w    *batchWriter

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan floorReply
	err     error

	done chan struct{} // closed when both goroutines are gone
}

// floorReply is a reply's bytes, or why there is none.
type floorReply struct {
	frame []byte
	err   error
}

var errFloorClosed = errors.New("floor client closed")

func dialFloor(addr string) (*floorClient, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &floorClient{conn: conn, pending: make(map[uint64]chan floorReply), done: make(chan struct{})}
	c.w = newBatchWriter(conn, c.fail)
	startReader(c.w, c.readLoop, c.done)
	return c, nil
}

// call sends frame under a new id and returns the reply's bytes. buf is
// the caller's own scratch for the frame, reply its own channel; both are
// reused across its calls.
func (c *floorClient) call(frame []byte, buf *[]byte, reply chan floorReply) ([]byte, error) {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = reply
	c.mu.Unlock()
	b := append((*buf)[:0], frame...)
	binary.BigEndian.PutUint64(b[floorIDAt:], id)
	*buf = b
	c.w.queue(b)
	r := <-reply
	return r.frame, r.err
}

func (c *floorClient) readLoop() {
	br := bufio.NewReaderSize(c.conn, 64<<10)
	for {
		frame, err := readFloorFrame(br)
		if err != nil {
			c.fail(err)
			return
		}
		id := binary.BigEndian.Uint64(frame[floorIDAt:])
		c.mu.Lock()
		reply := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if reply == nil {
			c.fail(fmt.Errorf("floor server answered call %d, which nobody waits for", id))
			return
		}
		reply <- floorReply{frame: frame}
	}
}

// fail ends the client: every waiting caller gets err.
func (c *floorClient) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		c.w.stop()
		c.conn.Close()
	}
	pending := c.pending
	c.pending = nil // no call registers once c.err is set
	c.mu.Unlock()
	for _, reply := range pending {
		reply <- floorReply{err: err}
	}
}

func (c *floorClient) close() {
	c.fail(errFloorClosed)
	<-c.done
}

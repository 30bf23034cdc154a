package transport

import (
	"encoding/binary"
	"net"
	"sync"
	"time"
)

// FastCGI record types that start and end a request's input.
const (
	fcgiBeginRequest = 1
	fcgiAbortRequest = 2
	fcgiStdin        = 5
)

// FastCGIConn is a connection of a web server to ServeFastCGI. It follows
// the FastCGI records it reads, to time out its reads as a web server
// sends them:
//
//   - the first record of the connection must arrive whole within the
//     header timeout of the connection's start;
//   - a record, once its first byte has arrived, must arrive whole within
//     the header timeout of that byte, however its bytes dribble in;
//   - while a request's input is coming (from its FCGI_BEGIN_REQUEST to
//     its empty FCGI_STDIN, or its FCGI_ABORT_REQUEST), its next record
//     must start within the header timeout of the last one, or of the
//     responder's next read if it was busy;
//   - otherwise, while a request runs and after it is answered (nginx's
//     fastcgi_keep_conn), the connection may carry no byte either way for
//     the idle timeout.
//
// A Read past its deadline fails, and net/http/fcgi then closes the
// connection.
type FastCGIConn struct {
	net.Conn
	header, idle time.Duration

	mu        sync.Mutex // guards the fields below
	in        recordScan // the records read
	fresh     bool       // no record has been read whole yet
	receiving bool       // a request's input has begun and not ended
}

// NewFastCGIConn returns nc, which has just been accepted, with its first
// read deadline set: a FastCGIConn with the header and idle timeouts.
func NewFastCGIConn(nc net.Conn, header, idle time.Duration) *FastCGIConn {
	c := &FastCGIConn{Conn: nc, header: header, idle: idle, fresh: true}
	_ = nc.SetReadDeadline(time.Now().Add(header))
	return c
}

func (c *FastCGIConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if !c.in.within() && !c.fresh {
		// Between records the wait starts now: the responder may have been
		// busy with the last one.
		c.setDeadline(time.Now())
	}
	c.mu.Unlock()
	n, err := c.Conn.Read(p)
	if n > 0 {
		now := time.Now()
		c.mu.Lock()
		c.in.scan(p[:n], now, c.readEnded)
		c.setDeadline(now)
		c.mu.Unlock()
	}
	return n, err
}

// Write writes p; a byte written while a request runs or after it is
// answered puts the idle timeout off.
func (c *FastCGIConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.mu.Lock()
		if !c.in.within() && !c.fresh && !c.receiving {
			c.setDeadline(time.Now())
		}
		c.mu.Unlock()
	}
	return n, err
}

// setDeadline sets the read deadline as the state at now asks. REQUIRES
// c.mu is held.
func (c *FastCGIConn) setDeadline(now time.Time) {
	switch {
	case c.in.within():
		_ = c.Conn.SetReadDeadline(c.in.start.Add(c.header))
	case c.fresh:
		// The deadline NewFastCGIConn set stands.
	case c.receiving:
		_ = c.Conn.SetReadDeadline(now.Add(c.header))
	default:
		_ = c.Conn.SetReadDeadline(now.Add(c.idle))
	}
}

// readEnded notes the end of a record read. REQUIRES c.mu is held.
func (c *FastCGIConn) readEnded(typ byte, empty bool) {
	switch {
	case typ == fcgiBeginRequest:
		c.receiving = true
	case typ == fcgiAbortRequest, typ == fcgiStdin && empty:
		c.receiving = false
	}
	c.fresh = false
}

// recordScan follows the FastCGI records in a stream of bytes.
type recordScan struct {
	hdr   [8]byte   // the header of the record being scanned
	hdrN  int       // its bytes scanned
	rest  int       // the record's content and padding bytes yet to scan
	start time.Time // when the record began
}

// within says whether part of a record has been scanned.
func (r *recordScan) within() bool { return r.hdrN > 0 || r.rest > 0 }

// scan follows the records through b, which arrived at now, and calls
// ended with the type of each record that ends in b, and whether its
// content was empty.
func (r *recordScan) scan(b []byte, now time.Time, ended func(typ byte, empty bool)) {
	for len(b) > 0 {
		if !r.within() {
			r.start = now
		}
		if r.hdrN < len(r.hdr) {
			k := copy(r.hdr[r.hdrN:], b)
			r.hdrN += k
			b = b[k:]
			if r.hdrN < len(r.hdr) {
				return
			}
			// version, type, request id (2), content length (2), padding
			// length, reserved
			r.rest = int(binary.BigEndian.Uint16(r.hdr[4:6])) + int(r.hdr[6])
		} else {
			k := min(r.rest, len(b))
			r.rest -= k
			b = b[k:]
		}
		if r.rest == 0 {
			r.hdrN = 0
			ended(r.hdr[1], r.hdr[4] == 0 && r.hdr[5] == 0)
		}
	}
}

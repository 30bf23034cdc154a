package kiev_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"strings"
	"sync/atomic"

	"github.com/kievrpc/kiev"
)

// Reports is an example service with large, repetitive replies.
type Reports struct{}

// Get returns a report of n lines.
func (Reports) Get(ctx context.Context, n int, reply *string) error {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"line":%d,"status":"ok","region":"eu-west"}`+"\n", i)
	}
	*reply = b.String()
	return nil
}

// countingConn counts the bytes a client reads.
type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// Both sides enable compression: replies (and requests) of 1 KiB and more
// then travel compressed, here with zstd, the client's choice among the
// server's algorithms. A peer without WithCompression, or a kiev from
// before it, gets every body as it is.
func ExampleWithCompression() {
	srv := kiev.NewServer(kiev.WithCompression(kiev.Zstd, kiev.S2))
	if err := srv.Register(Reports{}); err != nil {
		log.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()

	var read atomic.Int64 // bytes on the wire, to show the gain
	dialer := func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		return countingConn{nc, &read}, err
	}
	c, err := kiev.Dial(l.Addr().String(), kiev.WithCompression(kiev.Zstd), kiev.WithContextDialer(dialer))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	var report string
	if err := c.Call(context.Background(), "Reports.Get", 1000, &report); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("a %d KiB report, in less than a tenth of its size on the wire: %v\n", len(report)>>10, read.Load() < int64(len(report))/10)
	// Output: a 44 KiB report, in less than a tenth of its size on the wire: true
}

// WithCallCompression sets the compression of the calls of a context,
// both ways: here none for a reply that is already compressed, and zstd
// for a short one the threshold would leave as it is.
func ExampleWithCallCompression() {
	srv := kiev.NewServer(kiev.WithCompression(kiev.Zstd))
	if err := srv.Register(Reports{}); err != nil {
		log.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()
	c, err := kiev.Dial(l.Addr().String(), kiev.WithCompression(kiev.Zstd))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	var report string
	if err := c.Call(kiev.WithCallCompression(ctx, kiev.NoCompression), "Reports.Get", 1000, &report); err != nil {
		log.Fatal(err)
	}
	if err := c.Call(kiev.WithCallCompression(ctx, kiev.Zstd), "Reports.Get", 10, &report); err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.Count(report, "\n"), "lines")
	// Output: 10 lines
}

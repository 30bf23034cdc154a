package kiev_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/internal/servetest"
)

// Args and Reply are the payloads of the Arith test service.
type Args struct {
	A, B int
}

type Reply struct {
	C int
}

// Arith is the test service.
type Arith struct {
	block   chan struct{} // Block waits on it
	started chan struct{} // Block signals here when it starts
}

func (t *Arith) Add(args Args, reply *Reply) error {
	reply.C = args.A + args.B
	return nil
}

func (t *Arith) Mul(ctx context.Context, args *Args, reply *Reply) error {
	reply.C = args.A * args.B
	return nil
}

func (t *Arith) Div(args Args, reply *Reply) error {
	if args.B == 0 {
		return errors.New("divide by zero")
	}
	reply.C = args.A / args.B
	return nil
}

func (t *Arith) Panic(args Args, reply *Reply) error {
	panic("boom")
}

// Block waits until the test releases it or the call's context ends, and
// reports which.
func (t *Arith) Block(ctx context.Context, args Args, reply *Reply) error {
	if t.started != nil {
		t.started <- struct{}{}
	}
	select {
	case <-t.block:
		reply.C = args.A
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Meta echoes a metadata value and the deadline it saw.
func (t *Arith) Meta(ctx context.Context, key string, reply *string) error {
	*reply = kiev.MetadataFrom(ctx).Get(key)
	return nil
}

// startServer serves srv on a loopback listener and stops it when the
// test ends.
func startServer(t testing.TB, srv *kiev.Server) string {
	t.Helper()
	return servetest.Start(t, srv)
}

func newArithServer(t testing.TB, svc *Arith, opts ...kiev.ServerOption) string {
	t.Helper()
	srv := kiev.NewServer(opts...)
	if svc == nil {
		svc = &Arith{}
	}
	if err := srv.Register(svc); err != nil {
		t.Fatal(err)
	}
	return startServer(t, srv)
}

func dial(t testing.TB, addr string, opts ...kiev.DialOption) *kiev.Client {
	t.Helper()
	c, err := kiev.Dial(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Deadline reports how long the handler's ctx had left when it ran, or -1
// if it had no deadline.
func (t *Arith) Deadline(ctx context.Context, args Args, reply *time.Duration) error {
	d, ok := ctx.Deadline()
	if !ok {
		*reply = -1
		return nil
	}
	*reply = time.Until(d)
	return nil
}

// Echo replies with the bytes it was sent.
func (t *Arith) Echo(b []byte, reply *[]byte) error {
	*reply = b
	return nil
}

// Big returns a reply of args.A bytes.
func (t *Arith) Big(args Args, reply *[]byte) error {
	*reply = make([]byte, args.A)
	return nil
}

// rawServer accepts one connection on a loopback listener and hands it to
// serve, for tests that play a misbehaving peer. It stops when the test
// ends.
func rawServer(t *testing.T, serve func(nc net.Conn)) string {
	t.Helper()
	l := listen(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		nc, err := l.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		serve(nc)
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
	})
	return l.Addr().String()
}

// listen opens a loopback listener for a test server.
func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

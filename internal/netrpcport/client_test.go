// A port of Go's net/rpc/client_test.go (Copyright 2014 The Go Authors,
// BSD-style license) to kiev. What changed, and why, is marked "kiev:".

package netrpcport_test

import (
	"errors"
	"net/rpc" // kiev: only for the codec types, rpc.Request and rpc.Response
	"testing"

	"github.com/kievrpc/kiev"
)

type shutdownCodec struct {
	responded chan int
	closed    bool
}

func (c *shutdownCodec) WriteRequest(*rpc.Request, any) error { return nil }
func (c *shutdownCodec) ReadResponseBody(any) error           { return nil }
func (c *shutdownCodec) ReadResponseHeader(*rpc.Response) error {
	c.responded <- 1
	return errors.New("shutdownCodec ReadResponseHeader")
}
func (c *shutdownCodec) Close() error {
	c.closed = true
	return nil
}

func TestCloseCodec(t *testing.T) {
	codec := &shutdownCodec{responded: make(chan int)}
	client := kiev.NewClientWithCodec(codec)
	<-codec.responded
	client.Close()
	if !codec.closed {
		t.Error("client.Close did not close codec")
	}
}

// Test that errors in gob shut down the connection. Issue 7689.
//
// kiev: skipped. The test sends a reply whose only field is unexported,
// which gob cannot encode, and checks that the gob error closes the
// connection ("reading body unexpected EOF"). kiev's codec is msgpack,
// not gob: such a reply encodes as an empty struct, and an encoding error
// is answered as an error reply on a connection that stays up. The
// docs/netrpc.md ("Moving from net/rpc") names this test.
func TestGobError(t *testing.T) {
	t.Skip("kiev: gob-specific (a gob encoding error closes the connection); kiev uses msgpack, and answers an encoding error with an error reply; see docs/netrpc.md, \"Moving from net/rpc\"")
}

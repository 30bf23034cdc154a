package connlimit

import (
	"errors"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestLimitListenerHoldsAtMostN checks the listener of the admin server
// and of ServeFastCGI: with n connections open, the next is accepted only once one closes, and Close
// ends an Accept that waits for a slot.
func TestLimitListenerHoldsAtMostN(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(inner, 2)
	for range 3 {
		nc, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
	}
	a, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Accept(); err != nil {
		t.Fatal(err)
	}
	third := make(chan net.Conn, 1)
	go func() {
		nc, _ := l.Accept()
		third <- nc
	}()
	select {
	case <-third:
		t.Fatal("a third connection was accepted while two were open")
	case <-time.After(50 * time.Millisecond): // a bounded look for what must not happen
	}
	a.Close()
	a.Close() // a second Close frees no second slot
	if nc := <-third; nc == nil {
		t.Fatal("the third connection was not accepted once one closed")
	}
	if len(l.slots) != 2 {
		t.Errorf("%d slots taken; want 2", len(l.slots))
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		waiting <- err
	}()
	l.Close()
	if err := <-waiting; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept waiting for a slot returned %v after Close; want net.ErrClosed", err)
	}
}

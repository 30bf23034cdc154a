// Package servetest serves a kiev.Server for a test: on a loopback port,
// until the test ends. It is for kiev's own tests only, in every module
// of the repository.
package servetest

import (
	"errors"
	"net"
	"testing"

	"github.com/kievrpc/kiev"
)

// Start serves srv on a new loopback TCP port and returns its address.
// When the test ends it closes srv, waits for Serve to return, and fails
// the test if Serve returned anything but kiev.ErrServerClosed.
func Start(t testing.TB, srv *kiev.Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	Serve(t, srv, l)
	return l.Addr().String()
}

// Serve serves srv on l, as Start does on a listener it opens.
func Serve(t testing.TB, srv *kiev.Server, l net.Listener) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, kiev.ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
}

package kiev_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/kievrpc/kiev"
)

// TestHistorySamplesWhileServing checks that the status page's sampler
// runs while the server serves: a server whose only listener was closed
// keeps no goroutine for it, one that serves again samples again, and
// Close stops it for good.
func TestHistorySamplesWhileServing(t *testing.T) {
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	srv.Register(&Arith{})
	if kiev.HistorySampling(srv) {
		t.Fatal("the sampler runs before Serve")
	}
	serve := func() (net.Listener, chan error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(l) }()
		// Serve has started once a call is answered.
		if err := dial(t, l.Addr().String()).Call(context.Background(), "Arith.Add", Args{1, 2}, &Reply{}); err != nil {
			t.Fatal(err)
		}
		return l, served
	}
	for range 2 {
		l, served := serve()
		if !kiev.HistorySampling(srv) {
			t.Fatal("the sampler does not run while the server serves")
		}
		l.Close()
		if err := <-served; err == nil {
			t.Fatal("Serve returned nil")
		}
		if kiev.HistorySampling(srv) {
			t.Fatal("the sampler runs on after the server's only Serve returned")
		}
	}
	_, served := serve()
	srv.Close()
	if err := <-served; !errors.Is(err, kiev.ErrServerClosed) {
		t.Fatalf("Serve returned %v; want ErrServerClosed", err)
	}
	if kiev.HistorySampling(srv) {
		t.Fatal("the sampler runs on after Close")
	}
}

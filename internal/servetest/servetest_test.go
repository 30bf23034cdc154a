package servetest_test

import (
	"context"
	"testing"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/internal/servetest"
)

type Echo struct{}

func (Echo) Echo(_ context.Context, s string, reply *string) error { *reply = s; return nil }

func TestStart(t *testing.T) {
	srv := kiev.NewServer()
	if err := srv.Register(Echo{}); err != nil {
		t.Fatal(err)
	}
	addr := servetest.Start(t, srv)
	c, err := kiev.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got string
	if err := c.Call(context.Background(), "Echo.Echo", "hi", &got); err != nil || got != "hi" {
		t.Fatalf("Echo.Echo = %q, %v; want hi", got, err)
	}
}

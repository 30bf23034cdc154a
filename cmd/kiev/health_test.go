package main

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/kievrpc/kiev"
)

func TestHealth(t *testing.T) {
	srv := kiev.NewServer()
	if err := srv.Register(Shop{}); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	addr := l.Addr().String()

	wantRun(t, exitOK, []string{"SERVING\n"}, nil, "health", addr)
	wantRun(t, exitOK, []string{"SERVING\n"}, nil, "health", addr, "Shop")
	wantRun(t, exitFailed, nil, []string{`kiev health: ` + addr + `: unknown service "Nope"; the server has Shop`}, "health", addr, "Nope")

	srv.RegisterHealth("db", func(context.Context) error { return errors.New("down") })
	stdout, _ := wantRun(t, exitFailed, nil, []string{"kiev health: the server does not serve"}, "health", addr)
	if stdout != "NOT_SERVING\n" {
		t.Errorf("kiev health with a failing check printed %q; want NOT_SERVING", stdout)
	}
	wantRun(t, exitUsage, nil, []string{"missing <target>"}, "health")
}

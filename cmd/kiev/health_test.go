package main

import (
	"context"
	"errors"
	"testing"
)

func TestHealth(t *testing.T) {
	srv, addr := serveShop(t)

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

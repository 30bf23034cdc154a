package kiev_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/kievrpc/kiev"
)

func TestMain(m *testing.M) {
	if name := os.Getenv(envProvider); name != "" {
		// This process is a provider that a discovery test started.
		os.Exit(runProvider(name))
	}
	if os.Getenv(envFastCGIChild) != "" {
		// This process is the server that a FastCGI test started.
		os.Exit(runFastCGIChild())
	}
	goleak.VerifyTestMain(m)
}

func TestCallBothMethodShapes(t *testing.T) {
	c := dial(t, newArithServer(t, nil))
	ctx := context.Background()
	var r Reply
	if err := c.Call(ctx, "Arith.Add", Args{7, 8}, &r); err != nil || r.C != 15 {
		t.Fatalf("Add = %v, %v; want 15", r.C, err)
	}
	if err := c.Call(ctx, "Arith.Mul", &Args{7, 8}, &r); err != nil || r.C != 56 {
		t.Fatalf("Mul = %v, %v; want 56", r.C, err)
	}
}

func TestHandlerErrorText(t *testing.T) {
	c := dial(t, newArithServer(t, nil))
	err := c.Call(context.Background(), "Arith.Div", Args{1, 0}, &Reply{})
	var se *kiev.ServerError
	if !errors.As(err, &se) || err.Error() != "divide by zero" || se.Code != kiev.CodeApplication {
		t.Fatalf("err = %#v, want ServerError \"divide by zero\"", err)
	}
}

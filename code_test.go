package kiev_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/kievrpc/kiev"
)

func TestCodeString(t *testing.T) {
	for _, tc := range []struct {
		code kiev.Code
		want string
	}{
		{kiev.CodeOK, "OK"},
		{kiev.CodeNotFound, "NotFound"},
		{kiev.CodeUnauthenticated, "Unauthenticated"},
		{42, "42"}, // a kiev code this version does not know
		{100, "100"},
		{404, "404"},
		{1 << 32 / 2, "2147483648"},
	} {
		if got := tc.code.String(); got != tc.want {
			t.Errorf("Code(%d).String() = %q; want %q", uint32(tc.code), got, tc.want)
		}
		if got := fmt.Sprintf("%v", tc.code); got != tc.want {
			t.Errorf("Code(%d) with %%v prints %q; want %q", uint32(tc.code), got, tc.want)
		}
	}
}

// Coder fails with the code it is sent.
type Coder struct{}

func (Coder) Fail(ctx context.Context, code int, reply *string) error {
	return kiev.Errorf(kiev.Code(code), "no such order")
}

// TestUserCodeReadsWell follows a handler's own code to where a user sees
// it: the caller's error and the server's access log. It printed as
// "Code(404)".
func TestUserCodeReadsWell(t *testing.T) {
	h := &records{}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(h)), kiev.WithAccessLog())
	srv.Register(Coder{})
	c := dial(t, startServer(t, srv))
	err := c.Call(context.Background(), "Coder.Fail", 404, new(string))
	var se *kiev.ServerError
	if !errors.As(err, &se) || se.Code != 404 {
		t.Fatalf("call failed with %v; want a ServerError of code 404", err)
	}
	if got := fmt.Sprintf("%v: %s", se.Code, se.Message); got != "404: no such order" {
		t.Errorf("the caller prints %q; want %q", got, "404: no such order")
	}
	attrs, _, ok := h.find("kiev: call")
	if !ok || attrs["code"] != "404" {
		t.Errorf("access log line %v (found %v); want code=404", attrs, ok)
	}
}

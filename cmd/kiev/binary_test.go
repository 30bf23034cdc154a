package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinary builds the kiev command and runs it as a user would.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the kiev binary; skipped with -short")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH to build kiev with: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "kiev")
	if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	addr := serve(t)

	kiev := func(stdin string, args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			t.Fatalf("running kiev: %v", err)
		}
		return out.String(), errOut.String(), code
	}

	stdout, stderr, code := kiev("", "call", "--meta", "who=binary", addr, "Shop.Place", `{"id": 9, "items": [{"qty": 3, "price": 2.5}]}`)
	var reply Receipt
	if err := json.Unmarshal([]byte(stdout), &reply); err != nil || code != 0 || stderr != "" {
		t.Fatalf("kiev call: exit %d, stdout %q (%v), stderr %q", code, stdout, err, stderr)
	}
	if reply.OrderID != 9 || reply.Total != 7.5 || reply.Meta["who"] != "binary" {
		t.Errorf("kiev call replied %+v; want order 9, total 7.5, metadata who=binary", reply)
	}

	// Arguments from standard input.
	stdout, _, code = kiev(`{"id": 10}`, "call", addr, "Shop.Place", "-")
	if code != 0 || !strings.Contains(stdout, `"order_id": 10`) {
		t.Errorf("kiev call with arguments on stdin: exit %d, stdout %q", code, stdout)
	}

	_, stderr, code = kiev("", "call", addr, "Shop.Nope")
	if code != exitFailed || !strings.Contains(stderr, "NotFound") {
		t.Errorf("kiev call of an unknown method: exit %d, stderr %q; want 1 and NotFound", code, stderr)
	}
	_, stderr, code = kiev("", "call", addr)
	if code != exitUsage || !strings.Contains(stderr, "kiev help call") {
		t.Errorf("kiev call without a method: exit %d, stderr %q; want 2 and a hint", code, stderr)
	}
	stdout, _, code = kiev("", "--help")
	if code != exitOK || !strings.Contains(stdout, "Commands:") {
		t.Errorf("kiev --help: exit %d, stdout %q", code, stdout)
	}
}

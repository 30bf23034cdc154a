package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/internal/servetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Shop is the service the tests call.
type Shop struct{}

type Order struct {
	ID       int64    `json:"id"`
	Customer Customer `json:"customer"`
	Items    []Item   `json:"items"`
	Notes    map[string]string
	Discount float64 `json:"discount"`
}

type Customer struct {
	Name    string
	Address Address
}

type Address struct {
	City string `json:"city"`
}

type Item struct {
	SKU   string  `json:"sku"`
	Qty   int     `json:"qty"`
	Price float64 `json:"price"`
}

type Receipt struct {
	OrderID  int64             `json:"order_id"`
	Total    float64           `json:"total"`
	City     string            `json:"city"`
	Meta     map[string]string `json:"meta"`
	Priority int               `json:"priority"`
}

// Place totals the order and reports the metadata and priority it saw.
func (Shop) Place(ctx context.Context, o Order, r *Receipt) error {
	if o.ID == 0 {
		return kiev.Errorf(100, "order has no id")
	}
	r.OrderID = o.ID
	for _, it := range o.Items {
		r.Total += float64(it.Qty) * it.Price
	}
	r.Total -= o.Discount
	r.City = o.Customer.Address.City
	r.Meta = kiev.MetadataFrom(ctx)
	r.Priority = int(kiev.PriorityFrom(ctx))
	return nil
}

// Wait returns when its call's ctx ends.
func (Shop) Wait(ctx context.Context, _ struct{}, r *int) error {
	<-ctx.Done()
	return ctx.Err()
}

// Node contains itself.
type Node struct {
	Name string
	Kids []*Node `json:"kids,omitempty"`
}

// Tree echoes a tree.
func (Shop) Tree(n *Node, r *Node) error {
	*r = *n
	return nil
}

// serve starts a kiev server with Shop on a loopback port and returns
// its address; the server closes when the test ends.
func serve(t *testing.T, opts ...kiev.ServerOption) string {
	t.Helper()
	_, addr := serveShop(t, opts...)
	return addr
}

// serveShop is serve, returning the server too.
func serveShop(t *testing.T, opts ...kiev.ServerOption) (*kiev.Server, string) {
	t.Helper()
	srv := kiev.NewServer(opts...)
	if err := srv.Register(Shop{}); err != nil {
		t.Fatal(err)
	}
	return srv, servetest.Start(t, srv)
}

// kievRun runs the command in-process and returns what it printed and its
// exit code.
func kievRun(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// wantRun runs the command and checks its exit code and that its stdout
// and stderr hold the given strings.
func wantRun(t *testing.T, code int, inStdout, inStderr []string, args ...string) (stdout, stderr string) {
	t.Helper()
	stdout, stderr, got := kievRun(t, args...)
	if got != code {
		t.Errorf("kiev %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), got, code, stdout, stderr)
	}
	for _, s := range inStdout {
		if !strings.Contains(stdout, s) {
			t.Errorf("kiev %s: stdout lacks %q:\n%s", strings.Join(args, " "), s, stdout)
		}
	}
	for _, s := range inStderr {
		if !strings.Contains(stderr, s) {
			t.Errorf("kiev %s: stderr lacks %q:\n%s", strings.Join(args, " "), s, stderr)
		}
	}
	return stdout, stderr
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		_, stderr := wantRun(t, exitOK, []string{"Usage:", "call", "describe", "health", "list", "stat", "Exit status"}, nil, args...)
		if stderr != "" {
			t.Errorf("kiev %v wrote to stderr: %s", args, stderr)
		}
	}
	for _, cmd := range []string{"call", "describe", "list", "stat"} {
		wantRun(t, exitOK, []string{"Usage: kiev " + cmd, "Flags:", "Examples:"}, nil, "help", cmd)
		wantRun(t, exitOK, []string{"Usage: kiev " + cmd}, nil, cmd, "--help")
		wantRun(t, exitOK, []string{"Usage: kiev " + cmd}, nil, cmd, "-h")
	}
	wantRun(t, exitOK, []string{"-timeout duration", "-meta key=value", "-priority n", "(default 10s)"}, nil, "help", "call")
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"Usage:", "Commands:"}},
		{[]string{"nope"}, []string{`kiev: unknown command "nope"; the commands are call, describe, health, list, stat`, "Run 'kiev help' for usage."}},
		{[]string{"help", "nope"}, []string{`unknown command "nope"`}},
		{[]string{"--timeout", "1s", "call"}, []string{"flag --timeout comes before a command"}},
		{[]string{"call"}, []string{"kiev call: missing <target> and <Service.Method>", "Run 'kiev help call' for usage."}},
		{[]string{"call", "127.0.0.1:1"}, []string{"missing <Service.Method>"}},
		{[]string{"call", "127.0.0.1:1", "Shop.Place", "{}", "extra"}, []string{`too many arguments: ["extra"]`}},
		{[]string{"call", "--bogus", "127.0.0.1:1", "Shop.Place"}, []string{"flag provided but not defined: -bogus", "kiev help call"}},
		{[]string{"call", "--priority", "10", "127.0.0.1:1", "Shop.Place"}, []string{"--priority 10 is out of range; use 0"}},
		{[]string{"call", "--timeout", "soon", "127.0.0.1:1", "Shop.Place"}, []string{`invalid value "soon" for flag -timeout`}},
		{[]string{"call", "--meta", "novalue", "127.0.0.1:1", "Shop.Place"}, []string{`"novalue" is not key=value`}},
		{[]string{"call", "--codec", "protobuf", "127.0.0.1:1", "Shop.Place"}, []string{"protobuf needs generated protobuf types", "use msgpack"}},
		{[]string{"call", "--codec", "json", "127.0.0.1:1", "Shop.Place"}, []string{`unknown --codec "json"; use msgpack`}},
		{[]string{"call", "127.0.0.1:1", "Place"}, []string{`method "Place" is not of the form Service.Method`}},
		{[]string{"call", "Shop", "Shop.Place"}, []string{`target "Shop" is a service name`, "zookeeper://host:2181/Shop"}},
		{[]string{"call", "ftp://x:1", "Shop.Place"}, []string{`unknown scheme "ftp"`}},
		{[]string{"describe"}, []string{"kiev describe: missing <target>"}},
		{[]string{"list", "127.0.0.1:2181"}, []string{"not a ZooKeeper URL; write zookeeper://host:2181"}},
		{[]string{"list", "zookeeper:///kiev"}, []string{"names no ZooKeeper server"}},
		{[]string{"stat"}, []string{"kiev stat: missing <addr>"}},
		{[]string{"stat", "--interval", "0s", "127.0.0.1:1"}, []string{"--interval 0s is not positive"}},
		{[]string{"stat", "ftp://x"}, []string{`unknown scheme "ftp"`}},
	} {
		_, stderr := wantRun(t, exitUsage, nil, tc.want, tc.args...)
		if n := strings.Count(stderr, "\n"); len(tc.args) > 0 && n > 2 {
			t.Errorf("kiev %v: %d lines on stderr; want the error and a hint:\n%s", tc.args, n, stderr)
		}
	}
}

func TestParseFlagsAnywhere(t *testing.T) {
	for _, args := range [][]string{
		{"--timeout", "2s", "a", "b"},
		{"a", "--timeout", "2s", "b"},
		{"a", "b", "--timeout=2s"},
		{"-timeout", "2s", "--", "a", "b"},
	} {
		c := &callCmd{}
		fs := newTestFlagSet(c)
		pos, err := parseFlags(fs, args)
		if err != nil || c.timeout != 2*time.Second || fmt.Sprint(pos) != "[a b]" {
			t.Errorf("parseFlags(%q) = %q, %v, timeout %v; want [a b], nil, 2s", args, pos, err, c.timeout)
		}
	}
	c := &callCmd{}
	pos, err := parseFlags(newTestFlagSet(c), []string{"a", "--", "-5", "--timeout"})
	if err != nil || fmt.Sprint(pos) != "[a -5 --timeout]" {
		t.Errorf("after --, parseFlags = %q, %v; want every argument positional", pos, err)
	}
}

func newTestFlagSet(r runner) *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	r.flags(fs)
	return fs
}

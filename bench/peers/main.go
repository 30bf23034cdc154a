// Command peers serves and drives the peers of bench/compare that live in
// a module of their own, so that their dependencies stay out of every
// other module of the repository: rpcx, arpc and kitex (kitex twice: its
// default connection pool, and its multiplexed transport).
//
// It is not run by hand. bench/compare builds it when -systems names a
// peer, and runs it as it runs itself: `peers -serve` is a server process
// that serves every peer, each on its own 127.0.0.1:0 listener, prints one
// JSON line of addresses and serves its counters on a control listener;
// `peers -load` is the client process, which reads those addresses, then
// one cell a line on stdin, and answers each with its measurement (the
// load generator is bench/internal/loadgen, the same code as compare's).
// Every peer echoes the payloads of bench/internal/payload, unchanged, in
// its default configuration (bench/README.md, "Peers", says which, and
// each peer's file).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kievrpc/kiev/bench/internal/loadgen"
)

func main() {
	os.Exit(peersMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func peersMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	serve := fs.Bool("serve", false, "run as the server process")
	load := fs.Bool("load", false, "run as the client process")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	quietLogs()
	var err error
	switch {
	case *serve:
		err = serveMain(ctx, stdin, stdout)
	case *load:
		err = loadgen.Main(ctx, stdin, stdout, newDialer)
	default:
		fmt.Fprintln(stderr, "peers: say -serve or -load; bench/compare runs this program (go run ./compare -systems rpcx,arpc,kitex,kitex-mux)")
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "peers:", err)
		return 1
	}
	return 0
}

// serveMain is the server process: it serves until stdin ends (the
// coordinator is gone) or a signal comes.
func serveMain(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	s, err := startServers()
	if err != nil {
		return err
	}
	defer s.stop()
	if err := json.NewEncoder(stdout).Encode(s.addrs); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, stdin)
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

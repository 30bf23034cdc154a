package main

// The coordinator's side of a server process: starting it (pinned with
// -pin), reading its counters, changing its dependency, stopping it.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kievrpc/kiev/bench/internal/proc"
)

// child is a server process, with the addresses it listens on.
type child struct {
	*proc.Process
	addr  string     // the system's
	probe string     // the raw echo's, for the machine's floor
	mu    sync.Mutex // one command at a time
}

const childTimeout = 10 * time.Second // bound on starting, answering and stopping

// command starts exe with args, on the servers' CPU with pin.
func command(exe string, args []string, pin bool) *exec.Cmd {
	if pin {
		return exec.Command("taskset", append([]string{"-c", serverCPU(), exe}, args...)...)
	}
	return exec.Command(exe, args...)
}

// startChild starts exe with args and waits for the address it listens on.
func startChild(exe string, args []string, pin bool, stderr io.Writer) (*child, error) {
	p, err := proc.Start(command(exe, args, pin), stderr)
	if err != nil {
		return nil, err
	}
	c := &child{Process: p}
	line, err := c.readLine()
	if err != nil {
		c.stop()
		return nil, fmt.Errorf("server %s: %w", strings.Join(args, " "), err)
	}
	if _, err := fmt.Sscanf(line, "addr %s probe %s", &c.addr, &c.probe); err != nil {
		c.stop()
		return nil, fmt.Errorf("server %s printed %q, want its addresses (addr A probe P)", strings.Join(args, " "), line)
	}
	return c, nil
}

func (c *child) readLine() (string, error) { return c.ReadLine(childTimeout) }

// stats asks the server for its counters; full, with its dependency's
// account.
func (c *child) stats(full bool) (serverStats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var st serverStats
	cmd := "stats\n"
	if full {
		cmd = "stats full\n"
	}
	if _, err := io.WriteString(c.Stdin, cmd); err != nil {
		return st, err
	}
	line, err := c.readLine()
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal([]byte(line), &st)
}

// setService changes the service time of the server's dependency.
func (c *child) setService(d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := fmt.Fprintf(c.Stdin, "service %v\n", d); err != nil {
		return err
	}
	line, err := c.readLine()
	if err != nil {
		return err
	}
	if line != "ok" {
		return fmt.Errorf("service %v: the server answered %q", d, line)
	}
	return nil
}

func (c *child) stop() { c.Stop(childTimeout) }

// calibrateBurn runs a calibration process on the servers' CPU and
// returns how many rounds of burn take d there.
func calibrateBurn(exe string, d time.Duration, pin bool, stderr io.Writer) (int, error) {
	p, err := proc.Start(command(exe, []string{"-calibrate=" + d.String()}, pin), stderr)
	if err != nil {
		return 0, err
	}
	defer p.Stop(childTimeout)
	line, err := p.ReadLine(childTimeout)
	if err != nil {
		return 0, fmt.Errorf("calibration: %w", err)
	}
	var n int
	if _, err := fmt.Sscanf(line, "iters %d", &n); err != nil || n < 1 {
		return 0, fmt.Errorf("calibration printed %q, want iters N", line)
	}
	return n, nil
}

// serverCPU is the CPU the servers are pinned to: the machine's last,
// which pinSelf passes on, since the pinned coordinator sees fewer CPUs.
func serverCPU() string { return os.Getenv(envPinned) }

// envPinned holds, in a coordinator already running under taskset, the
// CPU kept for the servers.
const envPinned = "KIEV_OVERLOAD_PINNED"

// pinSelf runs the coordinator again under taskset, on every CPU but the
// servers', unless it already does. It returns only on failure.
func pinSelf(exe string, args []string) error {
	if os.Getenv(envPinned) != "" {
		return nil
	}
	if runtime.NumCPU() < 2 {
		return errors.New("needs at least 2 CPUs")
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return fmt.Errorf("taskset not found (Debian package util-linux): %w", err)
	}
	cpus := "0"
	if n := runtime.NumCPU(); n > 2 {
		cpus = "0-" + strconv.Itoa(n-2)
	}
	env := append(os.Environ(), envPinned+"="+strconv.Itoa(runtime.NumCPU()-1))
	return syscall.Exec(taskset, append([]string{"taskset", "-c", cpus, exe}, args...), env)
}

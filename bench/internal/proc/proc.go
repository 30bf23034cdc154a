// Package proc runs the helper processes of the benchmarks (a server, a
// load generator) and talks to them over their stdin and stdout, outside
// the RPC systems they measure.
package proc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is a started helper process.
type Process struct {
	Stdin io.WriteCloser

	cmd    *exec.Cmd
	lines  chan string   // the lines it prints on stdout
	exited chan struct{} // closed once it has exited and been waited for
	quit   chan struct{} // closed by Stop: no one reads lines any more
	once   sync.Once
}

// Start starts cmd in a process group of its own, which the kernel kills
// if this process dies (the child also sees its stdin end). Its stderr
// goes to stderr; its stdout is read line by line by ReadLine.
func Start(cmd *exec.Cmd, stderr io.Writer) (*Process, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// A pipe of our own rather than cmd.StdoutPipe, which Wait closes
	// under the reader.
	stdout, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		stdout.Close()
		return nil, err
	}
	p := &Process{Stdin: stdin, cmd: cmd, lines: make(chan string), exited: make(chan struct{}), quit: make(chan struct{})}
	go func() {
		defer stdout.Close()
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			case <-p.quit:
				return
			}
		}
	}()
	go func() {
		cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// ReadLine returns the next line the process prints, waiting at most
// timeout.
func (p *Process) ReadLine(timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case l := <-p.lines:
		return l, nil
	case <-p.exited:
		return "", errors.New("exited (its error is above)")
	case <-t.C:
		return "", fmt.Errorf("no answer within %v", timeout)
	}
}

// Stop ends the process: its stdin closed and SIGTERM to its group, then
// SIGKILL if it has not exited within timeout. It is safe to call twice.
func (p *Process) Stop(timeout time.Duration) {
	p.once.Do(func() {
		close(p.quit)
		p.Stdin.Close()
		pgid := p.cmd.Process.Pid // Setpgid: the group id is the pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-p.exited:
		case <-t.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.exited
		}
	})
}

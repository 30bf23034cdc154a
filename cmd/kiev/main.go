// Command kiev calls and inspects kiev servers from the shell, as grpcurl
// does for gRPC.
//
// Usage:
//
//	kiev call [flags] <target> <Service.Method> [json | -]
//	kiev describe [flags] <target> [Service]
//	kiev health [flags] <target> [Service]
//	kiev list [flags] <zookeeper://host:2181[/root]> [Service...]
//	kiev stat [flags] <admin-addr>
//	kiev help [command]
//
// A target is what kiev.Dial takes: "host:port", "tcp://host:port",
// "udp://host:port", "unix:///path/to/socket", or a service in ZooKeeper,
// "zookeeper://host:2181[/root]/Service".
//
// call sends the JSON arguments as msgpack, so a JSON object decodes into
// the server's argument struct by field name, and prints the reply as
// JSON. describe lists the methods a server offers with the shapes of
// their arguments and replies, from the reflection service every kiev
// server has (reflection.ServiceName). health asks a server's health
// service (health.ServiceName) whether it serves, and exits with 1 if
// not. list shows the services and
// providers in a ZooKeeper registry. stat shows a server's status page,
// refreshed every second.
//
// kiev exits with 0 on success, 1 when a call or a request fails, 2 for a
// mistake in the command line, and 130 when interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1   // a call, or a request to a registry or admin page, failed
	exitUsage       = 2   // the command line is wrong
	exitInterrupted = 130 // SIGINT or SIGTERM, as shells report 128+2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the kiev command with args (without the program name) and
// returns its exit code.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cl := &cli{stdin: os.Stdin, stdout: stdout, stderr: stderr}
	return cl.main(ctx, args)
}

// cli is one run of the command: where it reads and writes.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

// command is one subcommand.
type command struct {
	name      string
	synopsis  string // the arguments, after "kiev <name>"
	summary   string // one line for the command list
	help      string // what it does, and examples
	newRunner func() runner
}

// runner is one run of a command: its flags, then the work.
type runner interface {
	// flags defines the command's flags on fs.
	flags(fs *flag.FlagSet)
	// run does the work, given the positional arguments.
	run(ctx context.Context, cl *cli, args []string) error
}

// commands are the subcommands, in the order help lists them.
var commands = []*command{callCommand, describeCommand, healthCommand, listCommand, statCommand}

func lookupCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// usageError is a mistake in the command line. It makes kiev exit with 2
// and point at the help of the command.
type usageError struct {
	cmd string // "" for the top level
	msg string
}

func (e *usageError) Error() string { return e.msg }

func usagef(cmd, format string, args ...any) error {
	return &usageError{cmd: cmd, msg: fmt.Sprintf(format, args...)}
}

// errHelp reports that help was asked for and printed.
var errHelp = errors.New("help printed")

func (cl *cli) main(ctx context.Context, args []string) int {
	if len(args) == 0 {
		cl.printUsage(cl.stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help", "help":
		if name == "help" && len(rest) > 0 {
			if c := lookupCommand(rest[0]); c != nil {
				return cl.runCommand(ctx, c, []string{"-h"})
			}
			return cl.exit("", usagef("", "unknown command %q; the commands are %s", rest[0], commandNames()))
		}
		cl.printUsage(cl.stdout)
		return exitOK
	}
	c := lookupCommand(name)
	if c == nil {
		if strings.HasPrefix(name, "-") {
			return cl.exit("", usagef("", "flag %s comes before a command; write kiev <command> [flags], with a command among %s", name, commandNames()))
		}
		return cl.exit("", usagef("", "unknown command %q; the commands are %s", name, commandNames()))
	}
	return cl.runCommand(ctx, c, rest)
}

func commandNames() string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

func (cl *cli) runCommand(ctx context.Context, c *command, args []string) int {
	fs := flag.NewFlagSet("kiev "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // kiev prints its own messages
	fs.Usage = func() {}
	r := c.newRunner()
	r.flags(fs)
	pos, err := parseFlags(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		cl.printCommandUsage(c, fs)
		return exitOK
	}
	if err != nil {
		return cl.exit(c.name, &usageError{cmd: c.name, msg: err.Error()})
	}
	return cl.exit(c.name, r.run(ctx, cl, pos))
}

// exit prints err, if any, and returns the exit code it calls for.
func (cl *cli) exit(cmd string, err error) int {
	prefix := "kiev: "
	if cmd != "" {
		prefix = "kiev " + cmd + ": "
	}
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(cl.stderr, "%s%s\n", prefix, ue.msg)
		if ue.cmd != "" {
			fmt.Fprintf(cl.stderr, "Run 'kiev help %s' for usage.\n", ue.cmd)
		} else {
			fmt.Fprintln(cl.stderr, "Run 'kiev help' for usage.")
		}
		return exitUsage
	case errors.Is(err, errInterrupted):
		fmt.Fprintf(cl.stderr, "%sinterrupted\n", prefix)
		return exitInterrupted
	}
	fmt.Fprintf(cl.stderr, "%s%s\n", prefix, strings.TrimPrefix(err.Error(), "kiev: "))
	return exitFailed
}

// errInterrupted is returned by commands stopped by a signal.
var errInterrupted = errors.New("interrupted")

// interrupted returns errInterrupted if ctx, run's signal context, ended.
func interrupted(ctx context.Context) error {
	if ctx.Err() != nil {
		return errInterrupted
	}
	return nil
}

func (cl *cli) printUsage(w io.Writer) {
	fmt.Fprint(w, `kiev calls and inspects kiev servers.

Usage:
  kiev <command> [flags] [arguments]

Commands:
`)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	fmt.Fprintf(tw, "  help\tshow the help of a command\n")
	tw.Flush()
	fmt.Fprint(w, `
A target is host:port, tcp://host:port, udp://host:port,
unix:///path/to/socket, or zookeeper://host:2181[/root]/Service.
Flags take one dash or two (-timeout, --timeout) and may come before or
after the arguments; "--" ends them.

Exit status: 0 on success, 1 when a call or request fails, 2 for a wrong
command line, 130 when interrupted.

Run 'kiev help <command>' for the flags and arguments of a command.
`)
}

func (cl *cli) printCommandUsage(c *command, fs *flag.FlagSet) {
	w := cl.stdout
	fmt.Fprintf(w, "Usage: kiev %s %s\n\n%s\n", c.name, c.synopsis, strings.TrimSpace(c.help))
	fmt.Fprint(w, "\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// parseFlags parses args with fs, letting flags come after positional
// arguments too, and returns the positional arguments. Everything after
// "--" is positional.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if i := len(args) - len(rest) - 1; i >= 0 && args[i] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// wantArgs checks the number of positional arguments of cmd.
func wantArgs(cmd string, args []string, min, max int, names string) error {
	switch {
	case len(args) < min:
		return usagef(cmd, "missing %s", strings.Join(strings.Fields(names)[len(args):min], " and "))
	case max >= 0 && len(args) > max:
		return usagef(cmd, "too many arguments: %q; want %s", args[max:], names)
	}
	return nil
}

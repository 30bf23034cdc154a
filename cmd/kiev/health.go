package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/health"
)

var healthCommand = &command{
	name:     "health",
	synopsis: "[flags] <target> [Service]",
	summary:  "ask a server whether it serves, as a load balancer or a probe would",
	help: `
Health asks the target's health service (kiev.Health, which every kiev
server has, after gRPC's grpc.health.v1) whether the server serves, or
only Service, and prints SERVING or NOT_SERVING. It exits with 0 for
SERVING and 1 otherwise, so it fits a shell check or a container's
health command. The call goes at the highest priority, which an
overloaded server sheds last.

A server serves while it is not shutting down, the health checks its
program registered pass, and it has not set itself NOT_SERVING.

--watch prints the status, then every change, until interrupted (or
until --timeout, if set).

Examples:
  kiev health 127.0.0.1:7000
  kiev health udp://127.0.0.1:7001 Arith
  kiev health --watch --timeout 0 zookeeper://zk:2181/Arith`,
	newRunner: func() runner { return &healthCmd{} },
}

type healthCmd struct {
	watch   bool
	timeout time.Duration
}

func (c *healthCmd) flags(fs *flag.FlagSet) {
	fs.BoolVar(&c.watch, "watch", false, "print every change of the status, until interrupted")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "give up after `duration`; 0 waits as long as it takes")
}

func (c *healthCmd) run(ctx context.Context, cl *cli, args []string) error {
	if err := wantArgs("health", args, 1, 2, "<target> [Service]"); err != nil {
		return err
	}
	if c.timeout < 0 {
		return usagef("health", "--timeout %v is negative; use a duration such as 5s, or 0 for none", c.timeout)
	}
	target, service := args[0], ""
	if len(args) == 2 {
		service = args[1]
	}
	client, err := cl.dial("health", target, c.timeout)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := withTimeout(ctx, c.timeout)
	defer cancel()
	ctx = kiev.WithPriority(ctx, kiev.MaxPriority)

	var reply health.CheckResponse
	method := health.ServiceName + ".Check"
	if err := client.Call(ctx, method, health.CheckRequest{Service: service}, &reply); err != nil {
		return healthFailed(ctx, target, service, method, c.timeout, err)
	}
	fmt.Fprintln(cl.stdout, reply.Status)
	if !c.watch {
		if reply.Status != health.Serving {
			return errNotServing
		}
		return nil
	}
	method = health.ServiceName + ".Watch"
	for {
		last := reply.Status
		if err := client.Call(ctx, method, health.WatchRequest{Service: service, Last: last}, &reply); err != nil {
			if c.timeout > 0 && errors.Is(err, context.DeadlineExceeded) && interrupted(ctx) == nil {
				return nil // watched for --timeout
			}
			return healthFailed(ctx, target, service, method, c.timeout, err)
		}
		if reply.Status != last {
			fmt.Fprintln(cl.stdout, reply.Status)
		}
	}
}

// errNotServing makes kiev exit with 1 for a server that does not serve;
// it printed the status already.
var errNotServing = errors.New("the server does not serve")

// healthFailed says why a health call failed.
func healthFailed(ctx context.Context, target, service, method string, timeout time.Duration, err error) error {
	var se *kiev.ServerError
	if errors.As(err, &se) && se.Code == kiev.CodeNotFound {
		if strings.Contains(se.Message, `"`+health.ServiceName+`"`) || strings.Contains(se.Message, "no service "+health.ServiceName) {
			return fmt.Errorf("%s has no health service (%s); its kiev is too old", target, health.ServiceName)
		}
		return fmt.Errorf("%s: %s", target, strings.TrimPrefix(se.Message, "kiev: "))
	}
	return callFailed(ctx, target, method, timeout, err)
}

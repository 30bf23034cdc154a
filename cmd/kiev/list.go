package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/registry/zookeeper"
)

var listCommand = &command{
	name:     "list",
	synopsis: "[flags] <zookeeper://host:2181[,host2:2181][/root]> [Service...]",
	summary:  "list the services in a registry and their providers",
	help: `
List prints the services registered in a ZooKeeper registry, or only the
services named, with each of their providers: its address, weight, codecs
and wire protocol version. The path of the URL is the registry's root,
/kiev if there is none (zookeeper.Config.Root); a service with no
provider shows "-".

Examples:
  kiev list zookeeper://127.0.0.1:2181
  kiev list --json zookeeper://zk1:2181,zk2:2181/team-a/kiev Arith`,
	newRunner: func() runner { return &listCmd{} },
}

type listCmd struct {
	json    bool
	timeout time.Duration
}

func (c *listCmd) flags(fs *flag.FlagSet) {
	fs.BoolVar(&c.json, "json", false, "print the services and providers as JSON")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "give up after `duration`; 0 waits as long as it takes")
}

// serviceProviders is one service and its providers, as --json prints it.
type serviceProviders struct {
	Service   string              `json:"service"`
	Providers []registry.Instance `json:"providers"`
}

func (c *listCmd) run(ctx context.Context, cl *cli, args []string) error {
	if err := wantArgs("list", args, 1, -1, "<registry>"); err != nil {
		return err
	}
	if c.timeout < 0 {
		return usagef("list", "--timeout %v is negative; use a duration such as 5s, or 0 for none", c.timeout)
	}
	cfg, err := parseRegistry(args[0])
	if err != nil {
		return usagef("list", "%v", err)
	}
	sigCtx := ctx // ends only when interrupted
	ctx, cancel := withTimeout(ctx, c.timeout)
	defer cancel()
	where := fmt.Sprintf("%s in ZooKeeper at %s", cfg.Root, strings.Join(cfg.Servers, ","))

	names := args[1:]
	if len(names) == 0 {
		if names, err = zkServices(ctx, cfg); err != nil {
			return c.failed(sigCtx, cfg, err)
		}
	}
	reg, err := zookeeper.New(cfg)
	if err != nil {
		return err
	}
	defer reg.Close()
	var all []serviceProviders
	for _, name := range names {
		ins, err := providers(ctx, reg, name)
		if err != nil {
			return c.failed(sigCtx, cfg, fmt.Errorf("reading the providers of %s: %w", name, err))
		}
		all = append(all, serviceProviders{Service: name, Providers: ins})
	}
	if c.json {
		if all == nil {
			all = []serviceProviders{}
		}
		return printJSON(cl.stdout, all)
	}
	if len(all) == 0 {
		fmt.Fprintf(cl.stderr, "kiev list: no services under %s\n", where)
		return nil
	}
	tw := tabwriter.NewWriter(cl.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tPROVIDER\tWEIGHT\tCODECS\tVERSION")
	for _, sp := range all {
		if len(sp.Providers) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\n", sp.Service)
		}
		for _, in := range sp.Providers {
			codecs, version := "-", "-"
			if len(in.Codecs) > 0 {
				codecs = strings.Join(in.Codecs, ",")
			}
			if in.Version > 0 {
				version = strconv.Itoa(in.Version)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", sp.Service, in.ID(), max(in.Weight, 1), codecs, version)
		}
	}
	return tw.Flush()
}

// failed explains an error reading ZooKeeper. ctx is run's signal
// context.
func (c *listCmd) failed(ctx context.Context, cfg zookeeper.Config, err error) error {
	if err := interrupted(ctx); err != nil {
		return err
	}
	servers := strings.Join(cfg.Servers, ",")
	switch {
	case errors.Is(err, zk.ErrNoServer):
		return fmt.Errorf("cannot connect to ZooKeeper at %s; is it running there?", servers)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, zk.ErrClosing), errors.Is(err, zk.ErrConnectionClosed):
		return fmt.Errorf("no answer from ZooKeeper at %s within %v; is it running there? (--timeout waits longer)", servers, c.timeout)
	}
	return err
}

// parseRegistry parses "zookeeper://h1:2181,h2:2181/root/path" into a
// ZooKeeper registry's Config.
func parseRegistry(s string) (zookeeper.Config, error) {
	var cfg zookeeper.Config
	scheme, _, ok := strings.Cut(s, "://")
	if !ok || (scheme != "zookeeper" && scheme != "zk") {
		return cfg, fmt.Errorf("registry %q is not a ZooKeeper URL; write zookeeper://host:2181[,host2:2181][/root] (ZooKeeper is the registry kiev list reads)", s)
	}
	u, err := url.Parse(s)
	if err != nil {
		return cfg, fmt.Errorf("registry %q: %v", s, err)
	}
	if u.Host == "" {
		return cfg, fmt.Errorf("registry %q names no ZooKeeper server; write zookeeper://host:2181[/root]", s)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return cfg, fmt.Errorf("registry %q: only servers and a root path are allowed; write zookeeper://host:2181[/root]", s)
	}
	cfg.Servers = strings.Split(u.Host, ",")
	cfg.Root = "/kiev"
	if p := strings.TrimSuffix(u.Path, "/"); p != "" {
		cfg.Root = p
	}
	return cfg, nil
}

// zkServices lists the services under cfg.Root: the children that have a
// providers node, as registry/zookeeper lays them out.
func zkServices(ctx context.Context, cfg zookeeper.Config) ([]string, error) {
	conn, events, err := zk.Connect(cfg.Servers, zookeeper.DefaultSessionTimeout, zk.WithLogger(quiet{}))
	if err != nil {
		return nil, err
	}
	defer func() {
		conn.Close()
		for range events { // closed once the connection's goroutines end
		}
	}()
	// Requests wait while there is no session; closing the connection
	// when ctx ends makes them fail.
	stop := context.AfterFunc(ctx, conn.Close)
	defer stop()

	children, _, err := conn.Children(cfg.Root)
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, zk.ErrNoNode):
		return nil, fmt.Errorf("ZooKeeper at %s has no node %s, so no services are registered under that root; check the path of the URL (the default root is /kiev)", strings.Join(cfg.Servers, ","), cfg.Root)
	case err != nil:
		return nil, fmt.Errorf("listing %s: %w", cfg.Root, err)
	}
	base := strings.TrimSuffix(cfg.Root, "/")
	var names []string
	for _, child := range children {
		ok, _, err := conn.Exists(base + "/" + child + "/providers")
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s/%s: %w", base, child, err)
		}
		if !ok {
			continue // not a service
		}
		name, err := url.PathUnescape(child)
		if err != nil {
			name = child
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

// providers returns the providers of service.
func providers(ctx context.Context, reg registry.Registry, service string) ([]registry.Instance, error) {
	w, err := reg.Watch(ctx, service)
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	return w.Next(ctx) // the current set, at once
}

// quiet discards the ZooKeeper client's log.
type quiet struct{}

func (quiet) Printf(string, ...any) {}

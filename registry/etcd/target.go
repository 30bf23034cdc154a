package etcd

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/registry"
)

// init teaches kiev.Dial the etcd:// scheme, so that a program needs only
// to import this package to dial etcd:// targets, as with a database/sql
// driver. kiev.RegisterScheme is safe for concurrent use.
func init() {
	kiev.RegisterScheme("etcd", parseTarget)
}

// howToWrite ends the errors of parseTarget.
const howToWrite = "write etcd://host:2379[,host2:2379][/root]/Service[?ttl=10s]"

// parseTarget parses a kiev.Dial target
// "etcd://h1:2379,h2:2379/root/path/Service?ttl=10s", where the path
// before the service is the registry's Root (its default, "/kiev", if
// there is none), and returns the service and a function that opens the
// registry, logging through the client's logger.
func parseTarget(u *url.URL) (string, func(*slog.Logger) (registry.Registry, error), error) {
	cfg, service, err := parseURL(u)
	if err != nil {
		return "", nil, fmt.Errorf("%v; %s", err, howToWrite)
	}
	open := func(log *slog.Logger) (registry.Registry, error) {
		c := cfg
		c.Logger = log
		return New(c)
	}
	return service, open, nil
}

// parseURL returns the Config and the service an etcd:// URL names.
func parseURL(u *url.URL) (Config, string, error) {
	switch {
	case u.User != nil:
		return Config{}, "", errors.New("credentials in the URL are not supported")
	case u.Host == "":
		return Config{}, "", errors.New("no etcd endpoint")
	}
	path := strings.Trim(u.Path, "/")
	if path == "" {
		return Config{}, "", errors.New("no service name")
	}
	cfg := Config{Endpoints: strings.Split(u.Host, ",")}
	for _, e := range cfg.Endpoints {
		if e == "" {
			return Config{}, "", fmt.Errorf("an empty endpoint in %q", u.Host)
		}
	}
	service := path
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		cfg.Root, service = "/"+path[:i], path[i+1:]
		if err := registry.CheckRoot(cfg.Root); err != nil {
			return Config{}, "", err
		}
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "ttl":
			d, err := time.ParseDuration(q.Get(k))
			if err != nil || d < time.Second || d%time.Second != 0 {
				return Config{}, "", fmt.Errorf("ttl=%q is not a whole number of seconds such as 10s", q.Get(k))
			}
			cfg.TTL = d
		default:
			return Config{}, "", fmt.Errorf("unknown parameter %q (known: ttl)", k)
		}
	}
	return cfg, service, nil
}

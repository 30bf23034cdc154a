// Package registry is kiev's service discovery: servers register an
// Instance for each service they serve, and clients watch a service's
// full set of providers.
//
// Three implementations ship with kiev: registry/memory, in-process and
// the embedded default; registry/zookeeper, on a ZooKeeper ensemble; and
// registry/etcd, on an etcd cluster, in a module of its own. Package
// registry/registrytest holds the conformance suite every implementation
// must pass.
//
// # Layout in a shared store
//
// The registries that keep providers in a hierarchical store,
// registry/zookeeper (as nodes) and registry/etcd (as keys), lay them out
// alike, with the helpers of this package, so that tools and other
// implementations can read either:
//
//	<root>/<service>/providers/<network>-<address>
//
// ([ProvidersPath], [NodeName]). The service name and the address are
// escaped as URL path segments (url.PathEscape), so that each makes one
// path component: 127.0.0.1:7000 over tcp is "tcp-127.0.0.1:7000", and
// /run/a.sock over unix is "unix-%2Frun%2Fa.sock". A provider's data is
// JSON ([EncodeNode]): a format version "v" beside the fields of
// Instance, with their JSON names:
//
//	{"v":1,"service":"Arith","network":"tcp","address":"10.0.0.7:7000","codecs":["msgpack"],"weight":2}
//
// Readers ([DecodeNode]) ignore fields they do not know and accept any "v"
// of 1 or more, reading the fields of version 1; so a later kiev may add
// fields (and bump "v") while older clients keep reading its providers
// during a rollout. A change that older readers must not misread needs a
// new layout, not a new "v".
package registry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
)

// Errors returned by registries.
var (
	// ErrClosed is returned by a Registry, and by its Watchers, after
	// Close.
	ErrClosed = errors.New("kiev/registry: the registry is closed")
	// ErrStopped is returned by Watcher.Next after Watcher.Stop.
	ErrStopped = errors.New("kiev/registry: the watcher is stopped")
	// ErrInvalid is wrapped by the errors of instances that cannot be
	// registered, which say what is missing.
	ErrInvalid = errors.New("kiev/registry: invalid instance")
)

// Instance is one provider of one service: a server that serves Service
// at Address over Network.
type Instance struct {
	// Service is the name the service was registered under, e.g. "Arith".
	Service string `json:"service"`
	// Network is "tcp", "udp" or "unix".
	Network string `json:"network"`
	// Address is where clients reach the provider: "host:port", or a
	// socket path for "unix".
	Address string `json:"address"`
	// Codecs lists the codec names the provider accepts, e.g.
	// ["msgpack", "protobuf"]. Empty means unknown.
	Codecs []string `json:"codecs,omitempty"`
	// Weight is the provider's capacity relative to the others; weighted
	// balancers send it calls in proportion. 0 means 1.
	Weight int `json:"weight,omitempty"`
	// Version is the newest kiev wire protocol version the provider
	// speaks.
	Version int `json:"version,omitempty"`
	// Metadata holds free-form labels, e.g. zone or build.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// ID identifies the instance among the providers of its service: its
// network and address, as in "tcp://10.0.0.7:7000". Registering an
// instance whose ID is already registered replaces it.
func (in Instance) ID() string { return in.Network + "://" + in.Address }

// Validate reports what makes the instance impossible to register.
func (in Instance) Validate() error {
	switch {
	case in.Service == "":
		return fmt.Errorf("%w: no Service name", ErrInvalid)
	case strings.ContainsAny(in.Service, "/\x00"):
		return fmt.Errorf("%w: service name %q contains '/' or NUL", ErrInvalid, in.Service)
	case in.Address == "":
		return fmt.Errorf("%w: service %s has no Address", ErrInvalid, in.Service)
	case in.Weight < 0:
		return fmt.Errorf("%w: service %s at %s has negative Weight %d", ErrInvalid, in.Service, in.Address, in.Weight)
	}
	switch in.Network {
	case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
		if _, _, err := net.SplitHostPort(in.Address); err != nil {
			return fmt.Errorf("%w: service %s: address %q is not host:port: %v", ErrInvalid, in.Service, in.Address, err)
		}
	case "unix":
	default:
		return fmt.Errorf("%w: service %s: network %q is not tcp, udp or unix", ErrInvalid, in.Service, in.Network)
	}
	return nil
}

// Equal reports whether two instances are the same in every field.
func (in Instance) Equal(o Instance) bool {
	return in.Service == o.Service && in.Network == o.Network && in.Address == o.Address &&
		slices.Equal(in.Codecs, o.Codecs) && in.Weight == o.Weight && in.Version == o.Version &&
		maps.Equal(in.Metadata, o.Metadata)
}

// Registry registers providers and watches services.
//
// A Registry is safe for concurrent use by many goroutines. Register and
// Deregister may block on the network, within their ctx. Close releases
// everything: registrations made through the Registry are withdrawn, and
// its Watchers return ErrClosed.
type Registry interface {
	// Register publishes in until Deregister or Close. If the registry
	// loses and regains its backend (a restart, an expired session), it
	// publishes in again by itself. Registering an instance with the ID
	// of one already registered replaces it. If ctx ends before the
	// backend confirms, Register returns ctx's error; the instance stays
	// wanted and is published as soon as the backend can be reached,
	// unless Deregister withdraws it.
	Register(ctx context.Context, in Instance) error
	// Deregister withdraws the instance with in's Service and ID. It is
	// not an error to withdraw one that is not registered.
	Deregister(ctx context.Context, in Instance) error
	// Watch starts watching the providers of service. The Watcher's first
	// Next returns the current set at once, even if empty.
	Watch(ctx context.Context, service string) (Watcher, error)
	// Close withdraws every registration made through the Registry, stops
	// its Watchers and releases its connections.
	Close() error
}

// Watcher follows the providers of one service.
//
// Next is called by one goroutine at a time; Stop may be called from any
// goroutine, at any time, more than once.
type Watcher interface {
	// Next blocks until the provider set differs from the one it last
	// returned, or ctx ends, and returns the full set, sorted by ID. The
	// first call returns the current set at once. While the backend is
	// unreachable, Next reports nothing: the last set returned stays the
	// best knowledge. After Stop, Next returns ErrStopped; after the
	// Registry's Close, ErrClosed.
	Next(ctx context.Context) ([]Instance, error)
	// Stop ends the watch and releases its resources.
	Stop()
}

// Sort orders instances by ID, the order Watcher.Next returns.
func Sort(ins []Instance) {
	slices.SortFunc(ins, func(a, b Instance) int { return strings.Compare(a.ID(), b.ID()) })
}

// SameSet reports whether a and b, both sorted by ID, hold equal
// instances.
func SameSet(a, b []Instance) bool {
	return slices.EqualFunc(a, b, Instance.Equal)
}

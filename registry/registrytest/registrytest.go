// Package registrytest is the conformance suite of registry.Registry:
// every implementation runs Run in its tests.
package registrytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kievrpc/kiev/registry"
)

// Timeout bounds each wait for a registry to deliver a change.
var Timeout = 15 * time.Second

// Run tests the registries newRegistry makes. Registries made within one
// test must share their backend, as processes connected to the same
// ensemble do, and must start with no registrations for the services the
// test uses (each test uses service names made from its own name). Run
// closes every registry it makes.
func Run(t *testing.T, newRegistry func(t *testing.T) registry.Registry) {
	tests := []struct {
		name string
		f    func(*testing.T, func(*testing.T) registry.Registry)
	}{
		{"EmptyAtFirst", testEmptyAtFirst},
		{"RegisterDeregister", testRegisterDeregister},
		{"FieldsRoundTrip", testFieldsRoundTrip},
		{"ReplaceSameID", testReplaceSameID},
		{"ServicesApart", testServicesApart},
		{"DeregisterUnknown", testDeregisterUnknown},
		{"Invalid", testInvalid},
		{"SeenByOthers", testSeenByOthers},
		{"CloseWithdraws", testCloseWithdraws},
		{"StopWatcher", testStopWatcher},
		{"ContextEnds", testContextEnds},
		{"ConcurrentRegister", testConcurrentRegister},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.f(t, newRegistry) })
	}
}

// open makes a registry that is closed when the test ends.
func open(t *testing.T, newRegistry func(*testing.T) registry.Registry) registry.Registry {
	t.Helper()
	r := newRegistry(t)
	t.Cleanup(func() { r.Close() })
	return r
}

// service returns a service name unique to the test.
func service(t *testing.T, suffix string) string {
	return fmt.Sprintf("svc-%s-%d%s", sanitize(t.Name()), time.Now().UnixNano()%1e9, suffix)
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '/' || c == ' ' {
			b[i] = '_'
		}
	}
	return string(b)
}

func instance(svc string, port int) registry.Instance {
	return registry.Instance{
		Service: svc,
		Network: "tcp",
		Address: fmt.Sprintf("127.0.0.1:%d", port),
		Codecs:  []string{"msgpack", "protobuf"},
		Weight:  1,
		Version: 1,
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)
	return ctx
}

func watch(t *testing.T, r registry.Registry, svc string) registry.Watcher {
	t.Helper()
	w, err := r.Watch(ctxFor(t), svc)
	if err != nil {
		t.Fatalf("Watch(%q): %v", svc, err)
	}
	t.Cleanup(w.Stop)
	return w
}

func register(t *testing.T, r registry.Registry, in registry.Instance) {
	t.Helper()
	if err := r.Register(ctxFor(t), in); err != nil {
		t.Fatalf("Register(%s %s): %v", in.Service, in.ID(), err)
	}
}

func deregister(t *testing.T, r registry.Registry, in registry.Instance) {
	t.Helper()
	if err := r.Deregister(ctxFor(t), in); err != nil {
		t.Fatalf("Deregister(%s %s): %v", in.Service, in.ID(), err)
	}
}

// await calls Next until it returns want. A registry may skip
// intermediate sets, but every set it returns must be sorted and must
// differ from the one before.
func await(t *testing.T, w registry.Watcher, want ...registry.Instance) {
	t.Helper()
	registry.Sort(want)
	ctx := ctxFor(t)
	var last []registry.Instance
	for first := true; ; first = false {
		got, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("Next: %v while waiting for %s; last set was %s", err, ids(want), ids(last))
		}
		if !sorted(got) {
			t.Fatalf("Next returned a set not sorted by ID: %s", ids(got))
		}
		if !first && registry.SameSet(got, last) {
			t.Fatalf("Next returned the same set twice: %s", ids(got))
		}
		if registry.SameSet(got, want) {
			return
		}
		last = got
	}
}

func sorted(set []registry.Instance) bool {
	for i := 1; i < len(set); i++ {
		if set[i-1].ID() >= set[i].ID() {
			return false
		}
	}
	return true
}

func ids(set []registry.Instance) string {
	s := "["
	for i, in := range set {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s(w%d)", in.ID(), in.Weight)
	}
	return s + "]"
}

func testEmptyAtFirst(t *testing.T, newRegistry func(*testing.T) registry.Registry) {
	r := open(t, newRegistry)
	w := watch(t, r, service(t, ""))
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	got, err := w.Next(ctx)
	if err != nil || len(got) != 0 {
		t.Fatalf("first Next on a service with no providers = %s, %v; want an empty set at once", ids(got), err)
	}
}

func testRegisterDeregister(t *testing.T, newRegistry func(*testing.T) registry.Registry) {
	r := open(t, newRegistry)
	svc := service(t, "")
	w := watch(t, r, svc)
	await(t, w)
	a, b, c := instance(svc, 7001), instance(svc, 7002), instance(svc, 7003)
	register(t, r, b)
	await(t, w, b)
	register(t, r, a)
	register(t, r, c)
	await(t, w, a, b, c)
	deregister(t, r, b)
	await(t, w, a, c)
	deregister(t, r, a)
	deregister(t, r, c)
	await(t, w)
}

func testFieldsRoundTrip(t *testing.T, newRegistry func(*testing.T) registry.Registry) {
	r := open(t, newRegistry)
	svc := service(t, "")
	in := registry.Instance{
		Service:  svc,
		Network:  "tcp",
		Address:  "[::1]:7443",
		Codecs:   []string{"protobuf"},
		Weight:   7,
		Version:  3,
		Metadata: map[string]string{"zone": "eu-1", "build": "v1.2.3", "empty": ""},
	}
	register(t, r, in)
	unix := registry.Instance{Service: svc, Network: "unix", Address: "/tmp/kiev test/x.sock"}
	register(t, r, unix)
	w := watch(t, r, svc)
	await(t, w, in, unix)
}

func testReplaceSameID(t *testing.T, newRegistry func(*testing.T) registry.Registry) {
	r := open(t, newRegistry)
	svc := service(t, "")
	w := watch(t, r, svc)
	in := instance(svc, 7001)
	register(t, r, in)
	await(t, w, in)
	in.Weight = 5
	in.Metadata = map[string]string{"zone": "b"}
	register(t, r, in)
	await(t, w, in)
	// Registering the same instance again changes nothing, so the next
	// set the watcher sees is the one after the deregistration.
	register(t, r, in)
	deregister(t, r, in)
	await(t, w)
}

func testServicesApart(t *testing.T, newRegistry func(*testing.T) registry.Registry) {
	r := open(t, newRegistry)
	s1, s2 := service(t, "-a"), service(t, "-b")
	w1, w2 := watch(t, r, s1), watch(t, r, s2)
	a, b := instance(s1, 7001), instance(s2, 7001)
	register(t, r, a)
	register(t, r, b)
	await(t, w1, a)
	await(t, w2, b)
}

func testDeregisterUnknown(t *testing.T, newRegistry func(*testing.T) registry.Registry) {
	r := open(t, newRegistry)
	deregister(t, r, instance(service(t, ""), 7001))
}

func testInvalid(t *testing.T, newRegistry func(*testing.T) registry.Registry) {
	r := open(t, newRegistry)
	svc := service(t, "")
	for _, in := range []registry.Instance{
		{Network: "tcp", Address: "127.0.0.1:1"},
		{Service: svc, Network: "tcp"},
		{Service: svc, Network: "tcp", Address: "no-port"},
		{Service: svc, Network: "carrier-pigeon", Address: "127.0.0.1:1"},
		{Service: svc + "/x", Network: "tcp", Address: "127.0.0.1:1"},
		{Service: svc, Network: "tcp", Address: "127.0.0.1:1", Weight: -1},
	} {
		if err := r.Register(ctxFor(t), in); !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("Register(%+v) = %v; want an error wrapping ErrInvalid", in, err)
		}
	}
	w := watch(t, r, svc)
	await(t, w)
}

func testSeenByOthers(t *testing.T, newRegistry func(*testing.T) registry.Registry) {
	server, client := open(t, newRegistry), open(t, newRegistry)
	svc := service(t, "")
	w := watch(t, client, svc)
	await(t, w)
	in := instance(svc, 7001)
	register(t, server, in)
	await(t, w, in)
	deregister(t, server, in)
	await(t, w)
}

func testCloseWithdraws(t *testing.T, newRegistry func(*testing.T) registry.Registry) {
	server, client := newRegistry(t), open(t, newRegistry)
	svc := service(t, "")
	a, b := instance(svc, 7001), instance(svc, 7002)
	register(t, server, a)
	register(t, client, b)
	w := watch(t, client, svc)
	await(t, w, a, b)
	if err := server.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	await(t, w, b)
	if err := server.Register(ctxFor(t), a); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Register after Close = %v; want ErrClosed", err)
	}
	if _, err := server.Watch(ctxFor(t), svc); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Watch after Close = %v; want ErrClosed", err)
	}
}

func testStopWatcher(t *testing.T, newRegistry func(*testing.T) registry.Registry) {
	r := open(t, newRegistry)
	svc := service(t, "")
	w := watch(t, r, svc)
	await(t, w)
	errc := make(chan error, 1)
	go func() {
		_, err := w.Next(ctxFor(t))
		errc <- err
	}()
	w.Stop()
	if err := <-errc; !errors.Is(err, registry.ErrStopped) {
		t.Errorf("Next blocked during Stop returned %v; want ErrStopped", err)
	}
	w.Stop()
	if _, err := w.Next(ctxFor(t)); !errors.Is(err, registry.ErrStopped) {
		t.Errorf("Next after Stop = %v; want ErrStopped", err)
	}

	w2 := watch(t, r, svc)
	await(t, w2)
	go func() {
		_, err := w2.Next(ctxFor(t))
		errc <- err
	}()
	r.Close()
	if err := <-errc; !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Next blocked during the registry's Close returned %v; want ErrClosed", err)
	}
}

func testContextEnds(t *testing.T, newRegistry func(*testing.T) registry.Registry) {
	r := open(t, newRegistry)
	w := watch(t, r, service(t, ""))
	await(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := w.Next(ctx)
		errc <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Next whose ctx was canceled returned %v; want context.Canceled", err)
	}
}

func testConcurrentRegister(t *testing.T, newRegistry func(*testing.T) registry.Registry) {
	svc := service(t, "")
	const n = 16
	watchers := make([]registry.Watcher, 3)
	for i := range watchers {
		watchers[i] = watch(t, open(t, newRegistry), svc)
	}
	var all []registry.Instance
	var wg sync.WaitGroup
	for i := range n {
		in := instance(svc, 7000+i)
		all = append(all, in)
		r := open(t, newRegistry)
		wg.Go(func() {
			if err := r.Register(ctxFor(t), in); err != nil {
				t.Errorf("Register: %v", err)
			}
		})
	}
	wg.Wait()
	for _, w := range watchers {
		await(t, w, all...)
	}
}

package zookeeper_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/kievrpc/kiev/internal/zktest"
	"github.com/kievrpc/kiev/registry"
)

// TestSessionExpiry cuts a registry off from ZooKeeper (a proxy holds its
// connections silent) until the server expires its session and deletes its
// provider node, then lets it back: it publishes the node again, in its
// new session, by itself.
func TestSessionExpiry(t *testing.T) {
	addr := zktest.Shared(t)
	proxy := zktest.NewProxy(t, addr)
	cfg := config(t, proxy.Addr())
	cfg.SessionTimeout = 2 * time.Second
	r := open(t, cfg)
	in := instance("Expiring", 7001)
	register(t, r, in)

	obs := dial(t, addr)
	path := providerPath(cfg.Root, in)
	before := waitNode(t, obs, path, true, time.Second)

	proxy.Pause()
	paused := time.Now()
	waitNode(t, obs, path, false, 30*time.Second)
	vanished := time.Now()
	proxy.Resume()
	resumed := time.Now()
	after := waitNode(t, obs, path, true, 30*time.Second)
	back := time.Now()

	if after.EphemeralOwner == before.EphemeralOwner || after.EphemeralOwner == 0 {
		t.Fatalf("node owned by session %#x before the expiry and %#x after; want a new session's", before.EphemeralOwner, after.EphemeralOwner)
	}
	data, _, err := obs.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("session expired %v after the pause; node back %v after resuming (%v after it vanished): %s",
		vanished.Sub(paused).Round(time.Millisecond), back.Sub(resumed).Round(time.Millisecond),
		back.Sub(vanished).Round(time.Millisecond), data)

	// The registry works on in its new session.
	more := instance("Expiring", 7002)
	register(t, r, more)
	w := watch(t, r, "Expiring")
	await(t, w, nil, in, more)
}

// TestStaleNode starts a registry while the node of its instance is still
// held by another session, as when a server restarts before ZooKeeper has
// expired its previous session: the registry replaces the node with its
// own, which stays when the other session ends.
func TestStaleNode(t *testing.T) {
	addr := zktest.Shared(t)
	cfg := config(t, addr)
	in := instance("Restarted", 7001)
	path := providerPath(cfg.Root, in)

	old := dial(t, addr)
	stale := in
	stale.Weight = 9 // what the previous incarnation published
	createAll(t, old, path, nodeJSON(t, stale))
	marker := cfg.Root + "/marker" // goes when the old session does
	if _, err := old.Create(marker, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}

	r := open(t, cfg)
	register(t, r, in)
	obs := dial(t, addr)
	_, stat, err := obs.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	if stat.EphemeralOwner == old.SessionID() {
		t.Fatalf("the node is still the stale one, of session %#x", stat.EphemeralOwner)
	}
	w := watch(t, r, "Restarted")
	await(t, w, nil, in)

	// The old session ends; ZooKeeper deletes its ephemeral nodes, which
	// no longer include the provider's.
	ownerBefore := stat.EphemeralOwner
	old.Close()
	waitNode(t, obs, marker, false, 10*time.Second)
	after := waitNode(t, obs, path, true, time.Second)
	if after.EphemeralOwner != ownerBefore {
		t.Fatalf("node owner changed from %#x to %#x when the old session closed", ownerBefore, after.EphemeralOwner)
	}
	// Deregister deletes the node: it is the registry's own.
	if err := r.Deregister(ctxFor(t), in); err != nil {
		t.Fatal(err)
	}
	waitNode(t, obs, path, false, time.Second)
}

// TestStaleNodeDeregister checks that Deregister leaves alone a node that
// another session holds.
func TestStaleNodeDeregister(t *testing.T) {
	addr := zktest.Shared(t)
	cfg := config(t, addr)
	in := instance("Other", 7001)
	path := providerPath(cfg.Root, in)
	r := open(t, cfg)
	register(t, r, in)

	// Another session takes the node over, as a second registry with the
	// same instance would.
	other := dial(t, addr)
	_, stat, err := other.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Multi(
		&zk.DeleteRequest{Path: path, Version: stat.Version},
		&zk.CreateRequest{Path: path, Data: nodeJSON(t, in), Acl: zk.WorldACL(zk.PermAll), Flags: zk.FlagEphemeral},
	); err != nil {
		t.Fatal(err)
	}
	if err := r.Deregister(ctxFor(t), in); err != nil {
		t.Fatal(err)
	}
	_, stat, err = other.Get(path)
	if err != nil || stat.EphemeralOwner != other.SessionID() {
		t.Fatalf("after Deregister, Get = %+v, %v; want the other session's node", stat, err)
	}
}

// TestServerRestart stops the ZooKeeper server under a provider and a
// client: while it is down the client's watcher reports nothing (not an
// empty set), and once it is back the registration is whole and new ones
// show.
func TestServerRestart(t *testing.T) {
	srv := zktest.Start(t)
	cfg := config(t, srv.Addr())
	cfg.SessionTimeout = 5 * time.Second
	server, client := open(t, cfg), open(t, cfg)
	a := instance("Restart", 7001)
	register(t, server, a)
	w := watch(t, client, "Restart")
	await(t, w, nil, a)

	srv.Stop()
	// Nothing to wait on but the absence of a delivery: give it a while.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	got, err := w.Next(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next while ZooKeeper is down = %v, %v; want nothing until the deadline", ids(got), err)
	}
	// Register blocks while the server is down and completes after.
	b := instance("Restart", 7002)
	errc := make(chan error, 1)
	go func() { errc <- server.Register(ctxFor(t), b) }()

	srv.Start()
	if err := <-errc; err != nil {
		t.Fatalf("Register across the restart: %v", err)
	}
	await(t, w, []registry.Instance{a}, a, b)
	c := instance("Restart", 7003)
	register(t, server, c)
	await(t, w, []registry.Instance{a}, a, b, c)
}

// createAll creates the ephemeral node path holding data, and the
// persistent nodes above it.
func createAll(t testing.TB, c *zk.Conn, path string, data []byte) {
	t.Helper()
	for i := 1; i < len(path); i++ {
		if path[i] != '/' {
			continue
		}
		if _, err := c.Create(path[:i], nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("Create(%s): %v", path[:i], err)
		}
	}
	if _, err := c.Create(path, data, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("Create(%s): %v", path, err)
	}
}

func nodeJSON(t testing.TB, in registry.Instance) []byte {
	t.Helper()
	b, err := json.Marshal(struct {
		V int `json:"v"`
		registry.Instance
	}{1, in})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConnectionCut drops the registry's connection without the session
// expiring: the client reconnects within the session, the node stays the
// same, and the registry goes on working.
func TestConnectionCut(t *testing.T) {
	addr := zktest.Shared(t)
	proxy := zktest.NewProxy(t, addr)
	cfg := config(t, proxy.Addr())
	r := open(t, cfg)
	in := instance("Cut", 7001)
	register(t, r, in)
	w := watch(t, r, "Cut")
	await(t, w, nil, in)
	obs := dial(t, addr)
	path := providerPath(cfg.Root, in)
	before := waitNode(t, obs, path, true, time.Second)

	proxy.Cut()
	more := instance("Cut", 7002)
	register(t, r, more)
	await(t, w, []registry.Instance{in}, in, more)
	after := waitNode(t, obs, path, true, time.Second)
	if after.EphemeralOwner != before.EphemeralOwner || after.Czxid != before.Czxid {
		t.Fatalf("node changed across a reconnection: %+v, then %+v", before, after)
	}
}

// TestCloseCutOff closes a registry whose connection hangs: Close gives up
// on ZooKeeper within its bound rather than waiting for the client's
// timeouts.
func TestCloseCutOff(t *testing.T) {
	addr := zktest.Shared(t)
	proxy := zktest.NewProxy(t, addr)
	r := open(t, config(t, proxy.Addr()))
	register(t, r, instance("Hung", 7001))
	watch(t, r, "Hung")
	proxy.Pause()
	start := time.Now()
	r.Close()
	d := time.Since(start)
	t.Logf("Close took %v", d.Round(time.Millisecond))
	if d > 5*time.Second {
		t.Errorf("Close took %v; want at most 5s", d)
	}
	proxy.Resume()
}

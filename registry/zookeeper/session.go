package zookeeper

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// Retries after a failure that is not a lost connection wait from
// minBackoff, doubling up to maxBackoff.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// maxRaces bounds how often one publish or withdrawal retries after
// another client changed the node between its read and its write.
const maxRaces = 5

var errRaces = errors.New("the node kept changing between read and write")

// keep is the keeper: the one goroutine that writes to ZooKeeper. It makes
// the provider nodes match r.nodes whenever a Register or Deregister asks
// (r.nodes.Woken) and checks every node at each new session, then retries
// what failed. On Close it withdraws the nodes, then waits for the
// client's goroutines to end, which the closing of its event channel
// tells.
func (r *Registry) keep() {
	defer close(r.keeperDone)
	events := r.events
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	var retrying bool
	backoff := minBackoff
	authed := false
	for {
		select {
		case <-r.done:
			r.withdrawAll()
			close(r.withdrawn)
			if events != nil {
				for range events {
				}
			}
			return
		case <-r.nodes.Woken():
		case <-retry.C:
			retrying = false
		case _, ok := <-events:
			// Session changes come through onEvent; the channel is
			// drained so that it never holds stale events.
			if !ok {
				events = nil
			}
			continue
		}
		if r.conn.State() != zk.StateHasSession {
			continue // onEvent wakes the keeper when the session is back
		}
		if err := r.reconcile(&authed); err != nil {
			if !retrying {
				retrying = true
				retry.Reset(backoff)
				backoff = min(2*backoff, maxBackoff)
			}
			continue
		}
		backoff = minBackoff
	}
}

// reconcile makes the nodes that need it match r.nodes: every node after a
// new session began, otherwise those changed since they were last
// confirmed. It returns the first error; what failed is tried again later.
func (r *Registry) reconcile(authed *bool) error {
	if r.digest != nil && !*authed {
		// The client resends the credentials after each reconnection.
		if err := r.conn.AddAuth("digest", r.digest); err != nil {
			r.log.Warn("kiev/registry/zookeeper: authenticating with Digest", "err", err)
			return err
		}
		*authed = true
	}

	r.mu.Lock()
	full := r.fullPass
	r.fullPass = false
	r.mu.Unlock()
	jobs := r.nodes.Entries(full)

	var first error
	for _, j := range jobs {
		select {
		case <-r.done:
			return nil // Close withdraws everything
		default:
		}
		var err error
		if j.Want {
			err = r.publish(j.Key, j.Data)
		} else {
			err = r.withdraw(j.Key)
		}
		r.nodes.Confirm(j.Key, j.Gen, err)
		if err == nil {
			continue
		}
		r.log.Warn("kiev/registry/zookeeper: updating a provider node", "path", j.Key, "err", err)
		if first == nil {
			first = err
			if full {
				r.mu.Lock()
				r.fullPass = true // check every node again on retry
				r.mu.Unlock()
			}
		}
		if r.conn.State() != zk.StateHasSession {
			break // the next session does it all again
		}
	}
	return first
}

// publish makes the node at path an ephemeral node of the registry's
// session holding data. A node of another session, or of its own holding
// other data, is replaced in one transaction, so that watchers never see
// the provider missing.
func (r *Registry) publish(path string, data []byte) error {
	for range maxRaces {
		got, stat, err := r.conn.Get(path)
		if errors.Is(err, zk.ErrNoNode) {
			err = r.create(path, data, zk.FlagEphemeral)
			if errors.Is(err, zk.ErrNodeExists) {
				continue
			}
			return err
		}
		if err != nil {
			return err
		}
		sid := r.conn.SessionID()
		if stat.EphemeralOwner == sid && bytes.Equal(got, data) {
			return nil
		}
		if stat.EphemeralOwner != sid {
			r.log.Info("kiev/registry/zookeeper: replacing a provider node left by another session",
				"path", path, "owner", fmt.Sprintf("%#x", stat.EphemeralOwner))
		}
		// Multi returns the error of the operation that failed.
		_, err = r.conn.Multi(
			&zk.DeleteRequest{Path: path, Version: stat.Version},
			&zk.CreateRequest{Path: path, Data: data, Acl: r.acl, Flags: zk.FlagEphemeral})
		if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists) {
			continue
		}
		return err
	}
	return errRaces
}

// create creates the node at path and the persistent nodes it needs
// above it, leaving those that exist alone.
func (r *Registry) create(path string, data []byte, flags int32) error {
	_, err := r.conn.Create(path, data, flags, r.acl)
	if !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	parent := path[:strings.LastIndexByte(path, '/')]
	if parent == "" {
		return err
	}
	if err := r.create(parent, nil, 0); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return fmt.Errorf("creating %s: %w", parent, err)
	}
	_, err = r.conn.Create(path, data, flags, r.acl)
	return err
}

// withdraw deletes the node at path if the registry's session owns it.
func (r *Registry) withdraw(path string) error {
	for range maxRaces {
		ok, stat, err := r.conn.Exists(path)
		if err != nil {
			return err
		}
		if !ok || stat.EphemeralOwner != r.conn.SessionID() {
			return nil
		}
		err = r.conn.Delete(path, stat.Version)
		if errors.Is(err, zk.ErrBadVersion) {
			continue
		}
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		return err
	}
	return errRaces
}

// withdrawAll deletes every node of the registry's, for Close.
func (r *Registry) withdrawAll() {
	if r.conn.State() != zk.StateHasSession {
		return
	}
	for _, n := range r.nodes.Entries(true) {
		if err := r.withdraw(n.Key); err != nil {
			r.log.Debug("kiev/registry/zookeeper: withdrawing on Close", "path", n.Key, "err", err)
			return
		}
	}
}

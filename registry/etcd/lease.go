package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kievrpc/kiev/registry"
)

// Retries after a failure wait from minBackoff, doubling up to maxBackoff.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// lease is the keeper's lease: the one the registry's keys are attached
// to, and what is left to do about it.
type lease struct {
	id    clientv3.LeaseID // 0: none granted, or the last one was lost
	alive <-chan *clientv3.LeaseKeepAliveResponse
	stop  context.CancelFunc // ends the renewals

	full   bool             // write every key, under a new lease
	lost   time.Time        // when the last lease was lost, until every key is written again
	lostID clientv3.LeaseID // the lease that was lost
}

// keep is the keeper: the one goroutine that writes to etcd. It makes the
// keys match r.keys whenever a Register or Deregister asks (r.keys.Woken),
// grants a lease when a key needs one, drains the lease's renewals and,
// when the lease is lost, writes every key again under a new one; then it
// retries what failed. On Close it revokes the lease.
func (r *Registry) keep() {
	defer close(r.keeperDone)
	var l lease
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	var retrying bool
	backoff := minBackoff
	for {
		select {
		case <-r.done: // first, lest a renewal or a kick be picked
			r.revoke(&l)
			return
		default:
		}
		select {
		case <-r.done:
			r.revoke(&l)
			return
		case <-r.keys.Woken():
		case <-retry.C:
			retrying = false
		case _, ok := <-l.alive:
			if ok {
				continue // a renewal
			}
			r.leaseLost(&l, "no renewal was confirmed within its TTL: the registry was cut off from etcd for that long, or etcd expired or lost the lease")
		}
		if err := r.reconcile(&l); err != nil {
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

// leaseLost forgets a lease etcd no longer holds, so that the next
// reconcile grants a new one and writes every key under it, and makes the
// watchers read their sets again (etcd may have lost its data).
func (r *Registry) leaseLost(l *lease, why string) {
	if l.id == 0 {
		return
	}
	l.stop()
	select {
	case <-r.done:
		l.alive = nil // Close ended the renewals; it revokes the lease
		return
	default:
	}
	n := r.keys.Wanted()
	r.log.Warn("kiev/registry/etcd: lease lost; granting a new one and registering again",
		"lease", leaseHex(l.id), "ttl", time.Duration(r.ttl)*time.Second, "registrations", n, "why", why)
	if l.lost.IsZero() {
		l.lost, l.lostID = time.Now(), l.id
	}
	l.id, l.alive, l.stop, l.full = 0, nil, nil, true
	r.resyncAll()
}

// closing reports whether Close has begun.
func (r *Registry) closing() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// reconcile makes the keys that need it match r.keys: every key under a
// new lease, otherwise those changed since they were last confirmed. It
// returns the first error; what failed is tried again later.
func (r *Registry) reconcile(l *lease) error {
	r.mu.Lock()
	check := r.reconnected
	r.reconnected = false
	r.mu.Unlock()
	if check {
		r.checkLease(l)
	}
	jobs := r.keys.Entries(l.full)
	if l.id == 0 && slices.ContainsFunc(jobs, func(j registry.Entry) bool { return j.Want }) {
		if err := r.grant(l); err != nil {
			if r.closing() {
				return nil // Close cut the request short
			}
			r.log.Warn("kiev/registry/etcd: granting a lease", "err", err)
			r.keys.Fail(err)
			return err
		}
		jobs = r.keys.Entries(l.full) // every key, under the new lease
	}

	var first error
	for _, j := range jobs {
		if r.closing() {
			return nil // Close revokes the lease
		}
		var err error
		if j.Want {
			if l.id == 0 {
				continue // never: a put makes reconcile grant a lease first, and a key without one would outlive the registry
			}
			err = r.put(l.id, j.Key, j.Data)
		} else {
			err = r.withdraw(l.id, j.Key)
		}
		if r.closing() {
			return nil // Close cut the request short, and revokes the lease
		}
		r.keys.Confirm(j.Key, j.Gen, err)
		if err == nil {
			continue
		}
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			r.leaseLost(l, "etcd no longer holds it")
			return err
		}
		r.log.Warn("kiev/registry/etcd: updating a provider key", "key", j.Key, "err", err)
		if first == nil {
			first = err
		}
	}
	if first != nil || !l.full {
		return first
	}
	l.full = false
	wants := 0
	for _, j := range jobs {
		if j.Want {
			wants++
		}
	}
	if !l.lost.IsZero() && l.id != 0 {
		r.log.Warn("kiev/registry/etcd: registered again under a new lease",
			"lease", leaseHex(l.id), "lost", leaseHex(l.lostID), "registrations", wants,
			"after", time.Since(l.lost).Round(time.Millisecond))
	}
	l.lost, l.lostID = time.Time{}, 0 // without a lease, nothing was left to register
	return nil
}

// checkLease asks etcd whether it still holds the lease, after the client
// reconnected: a restarted member that lost its data holds none, and the
// renewals would tell only at the next one, a third of the TTL later.
func (r *Registry) checkLease(l *lease) {
	if l.id == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, requestTimeout)
	defer cancel()
	resp, err := r.client.TimeToLive(ctx, l.id)
	switch {
	case err != nil:
		r.log.Debug("kiev/registry/etcd: checking the lease after reconnecting", "lease", leaseHex(l.id), "err", err)
	case resp.TTL <= 0:
		r.leaseLost(l, "etcd no longer holds it after the client reconnected")
	}
}

// grant grants a new lease and starts renewing it.
func (r *Registry) grant(l *lease) error {
	ctx, cancel := context.WithTimeout(r.ctx, requestTimeout)
	defer cancel()
	resp, err := r.client.Grant(ctx, r.ttl)
	if err != nil {
		return err
	}
	kaCtx, stop := context.WithCancel(r.ctx)
	alive, err := r.client.KeepAlive(kaCtx, resp.ID)
	if err != nil {
		stop()
		return err
	}
	r.log.Debug("kiev/registry/etcd: lease granted", "lease", leaseHex(resp.ID), "ttl", time.Duration(resp.TTL)*time.Second)
	l.id, l.alive, l.stop, l.full = resp.ID, alive, stop, true
	return nil
}

// put writes the key under the lease. A key of another lease (a previous
// incarnation of the process) is replaced in the same write, so that
// watchers never see the provider missing.
func (r *Registry) put(id clientv3.LeaseID, k string, data []byte) error {
	ctx, cancel := context.WithTimeout(r.ctx, requestTimeout)
	defer cancel()
	resp, err := r.client.Put(ctx, k, string(data), clientv3.WithLease(id), clientv3.WithPrevKV())
	if err != nil {
		return err
	}
	if prev := resp.PrevKv; prev != nil && prev.Lease != 0 && clientv3.LeaseID(prev.Lease) != id {
		r.log.Info("kiev/registry/etcd: replaced a provider key of another lease", "key", k, "lease", leaseHex(clientv3.LeaseID(prev.Lease)))
	}
	return nil
}

// withdraw deletes the key if it is attached to the lease.
func (r *Registry) withdraw(id clientv3.LeaseID, k string) error {
	if id == 0 {
		return nil // no key of the registry's lives without a lease
	}
	ctx, cancel := context.WithTimeout(r.ctx, requestTimeout)
	defer cancel()
	_, err := r.client.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(k), "=", id)).
		Then(clientv3.OpDelete(k)).
		Commit()
	return err
}

// revoke revokes the lease for Close, which deletes the registry's keys,
// waiting at most closeTimeout.
func (r *Registry) revoke(l *lease) {
	if l.id == 0 {
		return
	}
	l.stop()
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_, err := r.client.Revoke(ctx, l.id)
	switch {
	case err == nil:
		r.log.Debug("kiev/registry/etcd: lease revoked", "lease", leaseHex(l.id))
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		r.log.Debug("kiev/registry/etcd: the lease had expired already", "lease", leaseHex(l.id))
	default:
		r.log.Warn("kiev/registry/etcd: Close could not revoke the lease; its providers go when it expires",
			"lease", leaseHex(l.id), "ttl", time.Duration(r.ttl)*time.Second, "err", err)
	}
}

// leaseHex formats a lease ID as etcdctl prints it.
func leaseHex(id clientv3.LeaseID) string { return fmt.Sprintf("%x", int64(id)) }

package etcd

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kievrpc/kiev/registry"
)

// watcher follows one service. Its goroutine, run, reads the providers,
// follows an etcd watch from the revision after the read, and publishes
// the set whenever it changed; Next hands the published sets to its caller.
type watcher struct {
	r       *Registry
	service string
	prefix  string // of the providers' keys, with its trailing '/'

	*registry.Feed // Next and Stop; run publishes to it

	// Owned by run: the providers by key name, and the malformed keys
	// already logged, by name, with the revision of the value logged.
	set map[string]registry.Instance
	bad map[string]int64
}

var _ registry.Watcher = (*watcher)(nil)

// errCompacted ends follow when etcd no longer has the revisions the
// watch needs: the set must be read again.
var errCompacted = errors.New("the revisions to watch from were compacted")

func newWatcher(r *Registry, service string) *watcher {
	return &watcher{
		r:       r,
		service: service,
		prefix:  r.providersPrefix(service),
		Feed:    registry.NewFeed(r.done),
		set:     make(map[string]registry.Instance),
		bad:     make(map[string]int64),
	}
}

// run reads the set and follows it, over and over: after a failed read
// (etcd is unreachable) it publishes nothing and reads again after a
// backoff, or at once when the client reconnects.
func (w *watcher) run() {
	defer w.r.watchers.Done()
	ctx, cancel := context.WithCancel(w.r.ctx)
	defer cancel()
	go func() {
		select {
		case <-w.Stopped():
		case <-ctx.Done():
		}
		cancel()
	}()
	backoff := minBackoff
	for !w.Ended() {
		resync := w.r.resyncChan()
		rev, err := w.read(ctx)
		if err != nil {
			if !w.Ended() {
				w.r.log.Warn("kiev/registry/etcd: reading providers", "service", w.service, "err", err)
			}
			t := time.NewTimer(backoff)
			backoff = min(2*backoff, maxBackoff)
			select {
			case <-resync:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
			continue
		}
		backoff = minBackoff
		w.publish()
		err = w.follow(ctx, rev+1, resync)
		switch {
		case w.Ended():
		case errors.Is(err, errCompacted):
			w.r.log.Info("kiev/registry/etcd: the watch fell behind etcd's compaction; reading the providers again", "service", w.service)
		case err != nil:
			w.r.log.Warn("kiev/registry/etcd: watching providers; reading them again", "service", w.service, "err", err)
		}
	}
}

// read reads every provider into w.set and returns the revision of the
// read.
func (w *watcher) read(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := w.r.client.Get(ctx, w.prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	clear(w.set)
	seen := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		name := string(kv.Key[len(w.prefix):])
		seen[name] = true
		w.apply(name, kv)
	}
	for name := range w.bad {
		if !seen[name] {
			delete(w.bad, name)
		}
	}
	return resp.Header.Revision, nil
}

// follow watches the providers from revision from, applying each change
// to w.set and publishing the new set, until the watcher ends (it returns
// nil), etcd compacted the revisions it needs (errCompacted), resync is
// closed (nil), or a watch fails for another reason (its error). A watch
// channel that closes without an error is watched again from the revision
// reached.
func (w *watcher) follow(ctx context.Context, from int64, resync <-chan struct{}) error {
	backoff := minBackoff
	for {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		ch := w.r.client.Watch(wctx, w.prefix, clientv3.WithPrefix(), clientv3.WithRev(from))
		next, err := w.events(ch, from, resync)
		cancel()
		if err != nil || next < 0 {
			return err
		}
		if next > from {
			backoff = minBackoff
		}
		from = next
		// The channel closed without an error: watch again from where it
		// ended, after a pause in case it keeps closing at once.
		t := time.NewTimer(backoff)
		backoff = min(2*backoff, maxBackoff)
		select {
		case <-t.C:
		case <-resync:
			t.Stop()
			return nil
		case <-ctx.Done():
			t.Stop()
			return nil
		}
	}
}

// events applies the responses of one watch. It returns the revision to
// watch from next when the channel closes without an error, or -1 when
// the watcher must stop following (resync closed, or it ended), or the
// watch's error.
func (w *watcher) events(ch clientv3.WatchChan, from int64, resync <-chan struct{}) (int64, error) {
	for {
		select {
		case resp, ok := <-ch:
			if !ok {
				if w.Ended() {
					return -1, nil
				}
				return from, nil
			}
			if err := resp.Err(); err != nil {
				if errors.Is(err, rpctypes.ErrCompacted) {
					return -1, errCompacted
				}
				return -1, err
			}
			for _, ev := range resp.Events {
				name := string(ev.Kv.Key[len(w.prefix):])
				if ev.Type == mvccpb.DELETE {
					delete(w.set, name)
					delete(w.bad, name)
					continue
				}
				w.apply(name, ev.Kv)
			}
			if rev := resp.Header.Revision; rev >= from {
				from = rev + 1
			}
			if len(resp.Events) > 0 {
				w.publish()
			}
		case <-resync:
			return -1, nil
		case <-w.Stopped():
			return -1, nil
		case <-w.r.done:
			return -1, nil
		}
	}
}

// apply puts the provider of the key name, whose value kv holds, in w.set,
// or, if the value is malformed, takes name out of it and logs it once for
// each value.
func (w *watcher) apply(name string, kv *mvccpb.KeyValue) {
	in, err := registry.DecodeNode(kv.Value, w.service, name)
	if err == nil {
		w.set[name] = in
		delete(w.bad, name)
		return
	}
	delete(w.set, name)
	if rev, ok := w.bad[name]; ok && rev == kv.ModRevision {
		return
	}
	w.bad[name] = kv.ModRevision
	w.r.log.Warn("kiev/registry/etcd: skipping a malformed provider key",
		"key", w.prefix+name, "err", err)
}

// publish makes w.set the current set if it differs from it, and wakes
// Next.
func (w *watcher) publish() {
	set := make([]registry.Instance, 0, len(w.set)) // not nil: nil means none read yet
	for _, in := range w.set {
		set = append(set, in)
	}
	registry.Sort(set)
	w.Publish(set)
}

package zookeeper

import (
	"errors"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/kievrpc/kiev/internal/zkconn"
	"github.com/kievrpc/kiev/registry"
)

// watcher follows one service. Its goroutine, run, reads the providers
// with a children watch, reads again after each event, and publishes the
// set when it changed; Next hands the published sets to its caller.
type watcher struct {
	r       *Registry
	service string
	path    string // of the providers node

	*registry.Feed // Next and Stop; run publishes to it

	// Owned by run: malformed nodes already logged, by name, with the
	// Mzxid of the data that was logged.
	bad map[string]int64
}

var _ registry.Watcher = (*watcher)(nil)

func newWatcher(r *Registry, service string) *watcher {
	return &watcher{
		r:       r,
		service: service,
		path:    r.providersPath(service),
		Feed:    registry.NewFeed(r.done),
		bad:     make(map[string]int64),
	}
}

// run reads the set, publishes it and waits for ZooKeeper's watch to fire,
// over and over. A read that fails (the connection is lost, or the session
// expired) publishes nothing: it is tried again when the next session is
// established, or after a backoff.
func (w *watcher) run() {
	defer w.r.watchers.Done()
	zkconn.Settle(w.r.conn) // before the first watch
	backoff := minBackoff
	for !w.Ended() {
		up := w.r.sessionUp()
		set, event, err := w.read()
		if err != nil {
			// A read cut short by Close (the watch had just fired) is
			// no failure; one cut by a lost session is told by onEvent.
			if !w.Ended() && w.r.conn.State() == zk.StateHasSession {
				w.r.log.Warn("kiev/registry/zookeeper: reading providers", "service", w.service, "err", err)
			}
			t := time.NewTimer(backoff)
			backoff = min(2*backoff, maxBackoff)
			select {
			case <-up:
			case <-t.C:
			case <-w.Stopped():
			case <-w.r.done:
			}
			t.Stop()
			continue
		}
		backoff = minBackoff
		w.Publish(set)
		// Any event means reading again: the children changed, the
		// providers node appeared or went, or the watch was lost with
		// the session (EventNotWatching). While the connection is down
		// the client keeps the watch and sets it again on reconnection.
		select {
		case <-event:
		case <-w.Stopped():
		case <-w.r.done:
		}
	}
}

// read returns the current providers and a channel that fires at the next
// change. If the providers node does not exist yet, the set is empty and
// the channel fires when it is created.
func (w *watcher) read() ([]registry.Instance, <-chan zk.Event, error) {
	conn := w.r.conn
	for {
		names, _, event, err := conn.ChildrenW(w.path)
		if errors.Is(err, zk.ErrNoNode) {
			exists, _, event, err := conn.ExistsW(w.path)
			if err != nil {
				return nil, nil, err
			}
			if exists {
				continue // created since ChildrenW
			}
			return []registry.Instance{}, event, nil
		}
		if err != nil {
			return nil, nil, err
		}
		set := make([]registry.Instance, 0, len(names))
		for _, name := range names {
			data, stat, err := conn.Get(w.path + "/" + name)
			if errors.Is(err, zk.ErrNoNode) {
				continue // gone since ChildrenW; the watch fires for it
			}
			if err != nil {
				return nil, nil, err
			}
			in, err := registry.DecodeNode(data, w.service, name)
			if err != nil {
				w.skip(name, stat, err)
				continue
			}
			delete(w.bad, name)
			set = append(set, in)
		}
		for name := range w.bad {
			if !slices.Contains(names, name) {
				delete(w.bad, name)
			}
		}
		registry.Sort(set)
		return set, event, nil
	}
}

// skip logs a malformed provider node, once for each version of its data.
func (w *watcher) skip(name string, stat *zk.Stat, err error) {
	if mzxid, ok := w.bad[name]; ok && mzxid == stat.Mzxid {
		return
	}
	w.bad[name] = stat.Mzxid
	w.r.log.Warn("kiev/registry/zookeeper: skipping a malformed provider node",
		"path", w.path+"/"+name, "err", err)
}

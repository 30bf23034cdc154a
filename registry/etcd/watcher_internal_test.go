package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kievrpc/kiev/registry/etcd/internal/etcdtest"
)

// A watch from a revision that etcd has compacted ends with errCompacted,
// which makes the watcher read the set again.
func TestFollowCompacted(t *testing.T) {
	srv := etcdtest.Start(t)
	r, err := New(Config{Endpoints: []string{srv.Addr()}, Root: "/compacted"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w := newWatcher(r, "Svc")
	first, err := r.client.Put(ctx, w.prefix+"x", "1")
	if err != nil {
		t.Fatal(err)
	}
	last, err := r.client.Put(ctx, w.prefix+"x", "2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.client.Compact(ctx, last.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if err := w.follow(ctx, first.Header.Revision, make(chan struct{})); !errors.Is(err, errCompacted) {
		t.Fatalf("follow from compacted revision %d = %v; want errCompacted", first.Header.Revision, err)
	}
}

package zookeeper_test

import (
	"strings"
	"testing"

	"github.com/kievrpc/kiev/internal/zktest"
	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/registry/zookeeper"
)

// Registries that connect, register, watch and close cleanly log nothing
// above Debug, and the ZooKeeper client library's own lines (its
// connections, sessions and ending loops) reach their logger at Debug.
// Each round closes the watching registry right after a provider left,
// while its watcher may be reading the new set: a read cut short by Close
// was once logged as a warning, in about half the rounds.
func TestCleanCloseLogsOnlyDebug(t *testing.T) {
	addr := zktest.Shared(t)
	root := testRoot(t)
	for i := range 5 {
		provLog, provLines := testLogger(t)
		prov := open(t, zookeeper.Config{Servers: []string{addr}, Root: root, Logger: provLog})
		watchLog, watchLines := testLogger(t)
		watching := open(t, zookeeper.Config{Servers: []string{addr}, Root: root, Logger: watchLog})

		w, err := watching.Watch(ctxFor(t), "Echo")
		if err != nil {
			t.Fatalf("Watch: %v", err)
		}
		in := instance("Echo", 7000+i)
		register(t, prov, in)
		for {
			set, err := w.Next(ctxFor(t))
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			if len(set) == 1 && set[0].ID() == in.ID() {
				break
			}
		}
		if err := prov.Deregister(ctxFor(t), in); err != nil {
			t.Fatalf("Deregister: %v", err)
		}
		watching.Close()
		prov.Close()
		if _, err := w.Next(ctxFor(t)); err != registry.ErrClosed {
			t.Fatalf("Next after Close: %v, want registry.ErrClosed", err)
		}

		for _, l := range []struct {
			name string
			log  *logBuffer
		}{{"provider", provLines}, {"watcher", watchLines}} {
			lines := l.log.lines()
			for _, line := range lines {
				if !strings.Contains(line, "level=DEBUG") {
					t.Errorf("round %d: the %s's registry logged above Debug: %s", i, l.name, line)
				}
			}
			for _, want := range []string{`msg="zk: connected to `, `msg="zk: recv loop terminated`} {
				if l.log.count(want) == 0 {
					t.Errorf("round %d: the %s's registry did not log the library's %s at Debug; it logged:\n%s",
						i, l.name, want, strings.Join(lines, "\n"))
				}
			}
		}
	}
}

// lines returns the lines logged so far.
func (b *logBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.FieldsFunc(b.buf.String(), func(r rune) bool { return r == '\n' })
}

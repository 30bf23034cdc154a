package zookeeper

import (
	"sync"

	"github.com/go-zookeeper/zk"
)

// hostProvider is the client library's DNSHostProvider, except that after
// the ensemble expired the session it lets the client reconnect at once.
// The library pauses 1 s each time it has tried every server; with a
// single server that is every reconnection, and after an expiry it would
// only delay publishing the registrations again, since the server that
// reported the expiry is up.
type hostProvider struct {
	*zk.DNSHostProvider

	mu  sync.Mutex
	now bool
}

func (h *hostProvider) Next() (server string, retryStart bool) {
	server, retryStart = h.DNSHostProvider.Next()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.now {
		h.now, retryStart = false, false
	}
	return server, retryStart
}

// reconnectNow makes the next reconnection skip the pause.
func (h *hostProvider) reconnectNow() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.now = true
}

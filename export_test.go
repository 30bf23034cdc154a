package kiev

import (
	"context"
	"net"
	"time"
)

// WaitProviders waits until c balances over n usable providers, or ctx
// ends.
func WaitProviders(ctx context.Context, c *Client, n int) error {
	for {
		st := c.group.state.Load()
		if len(st.ready) == n && st.picker != nil {
			return nil
		}
		select {
		case <-st.changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// SetInterfaceAddrs swaps the source of the machine's addresses for
// advertiseAddr, until the returned function restores it.
func SetInterfaceAddrs(f func() ([]net.Addr, error)) (restore func()) {
	old := interfaceAddrs
	interfaceAddrs = f
	return func() { interfaceAddrs = old }
}

// AdvertiseAddr exposes advertiseAddr.
var AdvertiseAddr = advertiseAddr

// PacketLocalAddr returns the local address of c's UDP socket.
func PacketLocalAddr(c *Client) net.Addr {
	t, err := c.single.open(context.Background())
	if err != nil {
		return nil
	}
	return t.(*packetTransport).sock.LocalAddr()
}

// InlineCounts reports how many calls srv ran on their connection's
// reader, and how many times its watchdog took a lent reader over.
func InlineCounts(srv *Server) (runs, takeovers uint64) {
	return srv.inline.Counts()
}

// InlineMaxCost sets the average run time under which a server's calls
// may run on their reader when alone.
func InlineMaxCost(d time.Duration) ServerOption {
	return serverOption(func(o *serverOptions) { o.inline.MaxCost = d })
}

// BurstMaxCost sets the average run time under which a server's calls of
// a burst run on their reader.
func BurstMaxCost(d time.Duration) ServerOption {
	return serverOption(func(o *serverOptions) { o.inline.BurstMaxCost = d })
}

// BurstBudget sets the estimated run time a burst may run on its reader.
func BurstBudget(d time.Duration) ServerOption {
	return serverOption(func(o *serverOptions) { o.inline.BurstBudget = d })
}

// SampleHistory takes a sample of srv's counters into the history its
// status page charts, as its sampler does every admin.HistoryEvery.
func SampleHistory(srv *Server) { srv.hist.Add(srv.counters(time.Now())) }

// HistorySampling reports whether srv's history sampler runs.
func HistorySampling(srv *Server) bool {
	srv.hist.mu.Lock()
	defer srv.hist.mu.Unlock()
	return srv.hist.stop != nil
}

// StreamsLeaked is how many of c's streams were dropped unclosed.
func StreamsLeaked(c *Client) int64 { return c.streamsLeaked.Load() }

// WithSSEKeepalive sets how long an event stream over HTTP goes quiet
// before the front writes a comment (transport.DefaultSSEKeepalive).
func WithSSEKeepalive(d time.Duration) ServerOption {
	return serverOption(func(o *serverOptions) { o.sseKeepalive = d })
}

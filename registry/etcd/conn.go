package etcd

import "google.golang.org/grpc/connectivity"

// watchConnection follows the state of the client's connection to etcd
// until Close. When the connection comes back after it was lost, it makes
// every watcher read its set again (etcd may have restarted without its
// data, or from a snapshot, so that the revisions a watch resumes from
// mean nothing there), and wakes the keeper to check the lease and retry
// what failed.
func (r *Registry) watchConnection() {
	defer r.monitor.Done()
	conn := r.client.ActiveConnection()
	prev := conn.GetState()
	ready, down := false, false
	for {
		if !conn.WaitForStateChange(r.ctx, prev) {
			return // Close
		}
		state := conn.GetState()
		switch state {
		case connectivity.Ready:
			if down {
				r.log.Info("kiev/registry/etcd: connected to etcd again; reading the providers again")
				r.resyncAll()
				r.mu.Lock()
				r.reconnected = true
				r.mu.Unlock()
				r.keys.Wake()
			}
			ready, down = true, false
		case connectivity.Idle:
			// grpc-go idles a connection that had no request for a
			// while, or whose transport closed.
			if ready && !down {
				down = true
				r.log.Debug("kiev/registry/etcd: the connection to etcd is idle")
			}
		case connectivity.Connecting, connectivity.TransientFailure:
			if ready && !down {
				down = true
				r.log.Warn("kiev/registry/etcd: lost the connection to etcd; reconnecting, and keeping the providers last read")
			}
		case connectivity.Shutdown:
			return
		}
		prev = state
	}
}

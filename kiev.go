package kiev

import "net"

// DefaultServer is the Server used by the package-level Register,
// RegisterName, Serve and ListenAndServe, as in net/rpc.
var DefaultServer = NewServer()

// Register publishes svc's methods on DefaultServer; see Server.Register.
func Register(svc any) error { return DefaultServer.Register(svc) }

// RegisterName publishes svc's methods on DefaultServer under name; see
// Server.RegisterName.
func RegisterName(name string, svc any) error { return DefaultServer.RegisterName(name, svc) }

// Serve serves DefaultServer on l; see Server.Serve.
func Serve(l net.Listener) error { return DefaultServer.Serve(l) }

// ListenAndServe serves DefaultServer on a new listener; see
// Server.ListenAndServe.
func ListenAndServe(network, addr string) error { return DefaultServer.ListenAndServe(network, addr) }

package kiev

import (
	"log/slog"
	"net/url"

	"github.com/kievrpc/kiev/internal/target"
	"github.com/kievrpc/kiev/registry"
)

// RegisterScheme makes Dial accept targets of the form scheme://..., each
// naming a service in a registry that the client opens, as zookeeper://
// targets do. The packages of registries that live in modules of their own
// call it from an init function, so that importing the package is all a
// program needs, as with database/sql drivers: importing
// github.com/kievrpc/kiev/registry/etcd makes
// kiev.Dial("etcd://10.0.0.1:2379/Arith") work.
//
// Each Dial of such a target calls parse with the target as url.Parse
// reads it. parse returns the service that the URL names and a function
// that opens its registry, or an error that says how to write the URL.
// Dial calls open once, with the client's logger (see WithLogger), and the
// client closes the registry when it is closed.
//
// RegisterScheme is safe for concurrent use. It panics if parse is nil, or
// if scheme is not a lower-case URL scheme (a letter, then letters,
// digits, '+', '-' or '.'), is one Dial knows itself (tcp, udp, unix,
// zookeeper, zk, dns), or is already registered.
func RegisterScheme(scheme string, parse func(u *url.URL) (service string, open func(logger *slog.Logger) (registry.Registry, error), err error)) {
	target.Register(scheme, parse)
}

package zookeeper

import "github.com/kievrpc/kiev/registry"

// The provider nodes follow the layout and format of package registry
// (registry.ProvidersPath, registry.NodeName, registry.EncodeNode and
// registry.DecodeNode).

// providersPath returns the path of the node whose children are the
// providers of service.
func (r *Registry) providersPath(service string) string {
	return registry.ProvidersPath(r.root, service)
}

// nodePath returns the path of in's provider node.
func (r *Registry) nodePath(in registry.Instance) string {
	return r.providersPath(in.Service) + "/" + registry.NodeName(in)
}

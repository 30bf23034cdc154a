package zookeeper

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/kievrpc/kiev/registry"
)

// formatVersion is the "v" this package writes in provider nodes.
const formatVersion = 1

// providersDir is the child of a service's node that holds its providers.
const providersDir = "providers"

// nodeData is the JSON of a provider node: the format version and the
// instance's fields, side by side.
type nodeData struct {
	V int `json:"v"`
	registry.Instance
}

// encodeNode returns the data of in's provider node.
func encodeNode(in registry.Instance) ([]byte, error) {
	return json.Marshal(nodeData{V: formatVersion, Instance: in})
}

// decodeNode parses the data of the provider node name under service's
// providers. It ignores fields it does not know, so that providers running
// a newer kiev can add fields, and rejects data that lacks the fields of
// version 1 or that does not match the node's name.
func decodeNode(data []byte, service, name string) (registry.Instance, error) {
	var d nodeData
	if err := json.Unmarshal(data, &d); err != nil {
		return registry.Instance{}, fmt.Errorf("data is not a provider's JSON: %v", err)
	}
	if d.V < 1 {
		return registry.Instance{}, errors.New(`data has no format version ("v")`)
	}
	in := d.Instance
	if in.Service == "" {
		in.Service = service
	}
	if in.Service != service {
		return registry.Instance{}, fmt.Errorf("data names service %q", in.Service)
	}
	if err := in.Validate(); err != nil {
		return registry.Instance{}, err
	}
	if want := nodeName(in); want != name {
		return registry.Instance{}, fmt.Errorf("instance %s belongs in node %q", in.ID(), want)
	}
	return in, nil
}

// nodeName returns the name of in's provider node: its network and its
// escaped address, so that it holds no '/' and is unique per ID.
func nodeName(in registry.Instance) string {
	return in.Network + "-" + url.PathEscape(in.Address)
}

// segment escapes a service name into one path component.
func segment(service string) string {
	switch service {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	return url.PathEscape(service)
}

// providersPath returns the path of the node whose children are the
// providers of service.
func (r *Registry) providersPath(service string) string {
	return r.root + "/" + segment(service) + "/" + providersDir
}

// nodePath returns the path of in's provider node.
func (r *Registry) nodePath(in registry.Instance) string {
	return r.providersPath(in.Service) + "/" + nodeName(in)
}

// checkRoot reports what makes root unusable as a ZooKeeper path.
func checkRoot(root string) error {
	if !strings.HasPrefix(root, "/") {
		return fmt.Errorf("Root %q does not start with '/'", root)
	}
	if root == "/" {
		return nil
	}
	if strings.HasSuffix(root, "/") {
		return fmt.Errorf("Root %q ends with '/'", root)
	}
	for _, c := range strings.Split(root[1:], "/") {
		switch {
		case c == "":
			return fmt.Errorf("Root %q has an empty component", root)
		case c == "." || c == "..":
			return fmt.Errorf("Root %q has a %q component", root, c)
		case strings.ContainsFunc(c, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			return fmt.Errorf("Root %q holds a control character", root)
		}
	}
	return nil
}

// checkService reports what makes service unusable as a service name.
func checkService(service string) error {
	if service == "" || strings.ContainsAny(service, "/\x00") {
		return fmt.Errorf("%w: service name %q is empty or contains '/' or NUL", registry.ErrInvalid, service)
	}
	return nil
}

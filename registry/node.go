package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// FormatVersion is the "v" that EncodeNode writes.
const FormatVersion = 1

// ProvidersDir is the child of a service's node (or key prefix) under
// which its providers lie.
const ProvidersDir = "providers"

// nodeData is the JSON of a provider node: the format version and the
// instance's fields, side by side.
type nodeData struct {
	V int `json:"v"`
	Instance
}

// EncodeNode returns the data of in's provider node: its JSON, with
// FormatVersion as "v".
func EncodeNode(in Instance) ([]byte, error) {
	return json.Marshal(nodeData{V: FormatVersion, Instance: in})
}

// DecodeNode parses the data of the provider node called name among the
// providers of service. It ignores fields it does not know, so that
// providers running a newer kiev can add fields, and rejects data that
// lacks the fields of version 1, that fails Instance.Validate, or that
// does not belong in a node called name (see NodeName). Data without a
// "service" field is taken as service's.
func DecodeNode(data []byte, service, name string) (Instance, error) {
	var d nodeData
	if err := json.Unmarshal(data, &d); err != nil {
		return Instance{}, fmt.Errorf("data is not a provider's JSON: %v", err)
	}
	if d.V < 1 {
		return Instance{}, errors.New(`data has no format version ("v")`)
	}
	in := d.Instance
	if in.Service == "" {
		in.Service = service
	}
	if in.Service != service {
		return Instance{}, fmt.Errorf("data names service %q", in.Service)
	}
	if err := in.Validate(); err != nil {
		return Instance{}, err
	}
	if want := NodeName(in); want != name {
		return Instance{}, fmt.Errorf("instance %s belongs in node %q", in.ID(), want)
	}
	return in, nil
}

// NodeName returns the name of in's provider node: its network and its
// escaped address, so that it holds no '/' and is unique per ID.
func NodeName(in Instance) string {
	return in.Network + "-" + url.PathEscape(in.Address)
}

// ProvidersPath returns the path under which the providers of service lie
// in a registry whose root is root ("/kiev", or "/" for none; see
// CheckRoot): root, the escaped service name, and ProvidersDir. It has no
// trailing '/'.
func ProvidersPath(root, service string) string {
	return strings.TrimSuffix(root, "/") + "/" + segment(service) + "/" + ProvidersDir
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

// CheckRoot reports what makes root unusable as the root of the layout:
// it must start with '/', and unless it is "/" itself, must not end with
// one, nor have empty, "." or ".." components or control characters.
func CheckRoot(root string) error {
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

// CheckService reports what makes service unusable as a service name in
// Watch or Deregister: it is empty, or holds '/' or NUL. The error wraps
// ErrInvalid.
func CheckService(service string) error {
	if service == "" || strings.ContainsAny(service, "/\x00") {
		return fmt.Errorf("%w: service name %q is empty or contains '/' or NUL", ErrInvalid, service)
	}
	return nil
}

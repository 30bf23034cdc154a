package reflection

import (
	"context"
	"reflect"
	"slices"
	"strings"
)

// ServiceName is the name of the reflection service every kiev.Server
// serves besides its own: a service that describes the others.
//
// Its methods are
//
//	List(ctx, args struct{}, reply *[]ServiceInfo)   // every service but kiev's own
//	Describe(ctx, service string, reply *ServiceInfo) // one service, by name
//
// Describe of an unknown service fails with a *kiev.ServerError of code
// kiev.CodeNotFound that names the services the server has. The shapes
// say how the msgpack codec encodes each type: struct fields carry their
// wire names (the msgpack tag, else the json tag, else the Go name), and
// embedded structs are flattened into their parent, as the codec does.
// The service is never published in a registry.
const ServiceName = "kiev.Reflection"

// ServiceInfo describes one service: its name and its methods, sorted by
// name.
type ServiceInfo struct {
	Name    string       `json:"name"`
	Methods []MethodInfo `json:"methods"`
}

// MethodInfo describes one method: its name within its service, such as
// "Add", and the shapes of its argument and reply. A stream method
// streams one way or both: Args is then the shape of each message the
// client sends, if ClientStreaming, and Reply the shape of each message
// the server sends, if ServerStreaming. So a server stream
// (ctx, q Query, out kiev.Out[Event]) has Args Query and Reply Event,
// with ServerStreaming; a client stream (ctx, in kiev.In[Chunk], sum
// *Sum) Args Chunk and Reply Sum, with ClientStreaming; a bidirectional
// one (ctx, in kiev.In[Msg], out kiev.Out[Msg]) both.
type MethodInfo struct {
	Name            string    `json:"name"`
	Args            TypeShape `json:"args"`
	Reply           TypeShape `json:"reply"`
	ClientStreaming bool      `json:"client_streaming,omitempty"`
	ServerStreaming bool      `json:"server_streaming,omitempty"`
}

// Server is what the reflection service reads of the server it
// describes. Its methods are called from the service's handlers, at any
// time and from many goroutines at once.
type Server interface {
	// Services returns the names of the server's services, kiev's own
	// (such as ServiceName) left out.
	Services() []string
	// Methods returns the methods of the service named name, kiev's own
	// services included, or false if the server has no such service.
	Methods(name string) ([]Method, bool)
	// NotFound returns the error that Describe answers for a service the
	// server does not have.
	NotFound(name string) error
}

// Method is one method of a service, as a Server reports it. For a
// stream method, Args is the type of the client's messages if
// ClientStreaming, and Reply that of the server's if ServerStreaming
// (see MethodInfo).
type Method struct {
	Name                             string // within its service, such as "Add"
	Args, Reply                      reflect.Type
	ClientStreaming, ServerStreaming bool
}

// Service is the receiver of ServiceName, which a server registers as
// its own.
type Service struct{ srv Server }

// NewService returns the reflection service of srv.
func NewService(srv Server) *Service { return &Service{srv: srv} }

// List returns every service of the server but kiev's own (such as
// ServiceName and the health service), sorted by name.
func (r *Service) List(ctx context.Context, _ struct{}, reply *[]ServiceInfo) error {
	names := r.srv.Services()
	slices.Sort(names)
	infos := make([]ServiceInfo, 0, len(names))
	for _, name := range names {
		if info, ok := r.describe(name); ok {
			infos = append(infos, info)
		}
	}
	*reply = infos
	return nil
}

// Describe returns the service named service.
func (r *Service) Describe(ctx context.Context, service string, reply *ServiceInfo) error {
	info, ok := r.describe(service)
	if !ok {
		return r.srv.NotFound(service)
	}
	*reply = info
	return nil
}

// describe returns the description of the service named name, or false
// if there is none.
func (r *Service) describe(name string) (ServiceInfo, bool) {
	ms, ok := r.srv.Methods(name)
	if !ok {
		return ServiceInfo{}, false
	}
	slices.SortFunc(ms, func(a, b Method) int { return strings.Compare(a.Name, b.Name) })
	info := ServiceInfo{Name: name, Methods: make([]MethodInfo, 0, len(ms))}
	for _, m := range ms {
		info.Methods = append(info.Methods, MethodInfo{Name: m.Name, Args: ShapeOf(m.Args), Reply: ShapeOf(m.Reply),
			ClientStreaming: m.ClientStreaming, ServerStreaming: m.ServerStreaming})
	}
	return info, true
}

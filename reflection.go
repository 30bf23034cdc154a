package kiev

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kievrpc/kiev/reflection"
)

// registerReflection adds the reflection service (reflection.ServiceName)
// to a new server.
func (s *Server) registerReflection() {
	s.registerBuiltin(reflection.ServiceName, "Reflection", reflection.NewService(reflectionSource{s}))
}

// registerBuiltin adds one of kiev's own services, rcvr of type typeName,
// to a new server under name. Its name holds a dot, which Register
// refuses, so it goes into the tables here.
func (s *Server) registerBuiltin(name, typeName string, rcvr any) {
	methods, _, err := buildService(typeName, rcvr, true)
	if err != nil {
		panic(err) // a builtin service breaks the method contract
	}
	for mname, m := range methods {
		m.name = name + "." + mname
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.services[name] = methods
	all := make(map[string]*method, len(*s.methods.Load())+len(methods))
	for k, v := range *s.methods.Load() {
		all[k] = v
	}
	for _, m := range methods {
		all[m.name] = m
	}
	s.methods.Store(&all)
}

// reflectionSource is what the reflection service reads of a Server.
type reflectionSource struct{ s *Server }

func (r reflectionSource) Services() []string { return r.s.serviceNames() }

func (r reflectionSource) Methods(name string) ([]reflection.Method, bool) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	methods, ok := s.services[name]
	ms := make([]reflection.Method, 0, len(methods))
	for mname, m := range methods {
		ms = append(ms, reflectMethod(mname, m))
	}
	return ms, ok
}

// reflectMethod describes m, named name in its service: a stream's
// messages by the type In or Out carries (T of In[T], read from its
// Recv, which returns it; of Out[T], from its Send, which takes it).
func reflectMethod(name string, m *method) reflection.Method {
	rm := reflection.Method{Name: name, Args: m.argType, Reply: m.replyType}
	if m.kind == ClientStream || m.kind == BidiStream {
		recv, _ := m.inType.MethodByName("Recv")
		rm.Args, rm.ClientStreaming = recv.Type.Out(0), true
	}
	if m.kind == ServerStream || m.kind == BidiStream {
		send, _ := m.outType.MethodByName("Send")
		rm.Reply, rm.ServerStreaming = send.Type.In(2), true
	}
	return rm
}

func (r reflectionSource) NotFound(name string) error {
	return &ServerError{Code: CodeNotFound, Message: r.s.unknownService(name)}
}

// serviceNames returns the names of the server's services, sorted, kiev's
// own left out.
func (s *Server) serviceNames() []string {
	s.mu.Lock()
	names := make([]string, 0, len(s.services))
	for n := range s.services {
		if !isBuiltin(n) {
			names = append(names, n)
		}
	}
	s.mu.Unlock()
	slices.Sort(names)
	return names
}

// unknownService says that the server has no service name, and which it
// has.
func (s *Server) unknownService(name string) string {
	names := s.serviceNames()
	if len(names) == 0 {
		return fmt.Sprintf("kiev: unknown service %q; the server has no services", name)
	}
	return fmt.Sprintf("kiev: unknown service %q; the server has %s", name, strings.Join(names, ", "))
}

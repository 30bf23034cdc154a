package admin

import "context"

// ServiceName is the name of the admin service every kiev.Server serves
// besides its own, on its RPC addresses: it answers with the status, so
// that the kiev command's stat works with the address clients dial as
// well as with the admin address.
const ServiceName = "kiev.Admin"

// Service is the receiver of ServiceName, which a server registers as
// its own.
type Service struct {
	srv    Server
	refuse error
}

// NewService returns the admin service of srv. If refuse is not nil, the
// service answers every call with it: a server whose admin pages need
// credentials (kiev.WithAdminAuth) shows its status only there.
func NewService(srv Server, refuse error) *Service { return &Service{srv: srv, refuse: refuse} }

// Status returns the server's status, as the status page's JSON twin
// does, but for the health checks' errors: it names a failing check
// without its error, as /readyz does, since the RPC address is often
// reachable by more callers than the admin address, and a check's error
// may name a database or a host. The status page has them.
func (s *Service) Status(ctx context.Context, _ struct{}, reply *Status) error {
	if s.refuse != nil {
		return s.refuse
	}
	st := s.srv.Status(ctx)
	for i := range st.Health {
		if st.Health[i].Error != "" {
			st.Health[i].Error = "failing (its error is on the status page)"
		}
	}
	*reply = st
	return nil
}

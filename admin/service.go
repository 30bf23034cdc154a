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
// does.
func (s *Service) Status(ctx context.Context, _ struct{}, reply *Status) error {
	if s.refuse != nil {
		return s.refuse
	}
	*reply = s.srv.Status(ctx)
	return nil
}

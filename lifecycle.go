package kiev

import (
	"context"
	"errors"
	"sync"

	"github.com/kievrpc/kiev/health"
)

// hooks holds what a Server runs beside its calls: the functions that
// close its dependencies on Shutdown, and the health checks of those
// dependencies.
type hooks struct {
	mu       sync.Mutex // guards the fields below
	shutdown []func(context.Context) error
	ran      bool

	checks health.Checks // RegisterHealth's; safe for concurrent use
}

// OnShutdown registers f to run when the server stops, after the calls in
// flight have ended: on Shutdown, once they have drained, with Shutdown's
// ctx; on Close, once the connections are closed, with a 5-second ctx.
// Use it to close what handlers use, such as database clients, so that no
// handler finds them closed. Functions run once, in the order registered;
// their errors are logged, and Shutdown returns them joined.
func (s *Server) OnShutdown(f func(ctx context.Context) error) {
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	s.hooks.shutdown = append(s.hooks.shutdown, f)
}

// runShutdownHooks runs the OnShutdown functions, once.
func (s *Server) runShutdownHooks(ctx context.Context) error {
	s.hooks.mu.Lock()
	if s.hooks.ran {
		s.hooks.mu.Unlock()
		return nil
	}
	s.hooks.ran = true
	fs := s.hooks.shutdown
	s.hooks.mu.Unlock()
	var errs []error
	for _, f := range fs {
		if err := f(ctx); err != nil {
			s.opts.logger.Error("kiev: a shutdown hook failed", "err", err)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

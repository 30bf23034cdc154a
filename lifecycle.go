package kiev

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// hooks holds what a Server runs beside its calls: the functions that
// close its dependencies on Shutdown, and the health checks of those
// dependencies.
type hooks struct {
	mu       sync.Mutex
	shutdown []func(context.Context) error
	ran      bool
	health   map[string]func(context.Context) error
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

// RegisterHealth adds a health check under name, such as "redis" for a
// check that pings Redis. Health runs every check; the status page shows
// them. A check must return within its ctx. Registering a name again
// replaces its check.
func (s *Server) RegisterHealth(name string, check func(ctx context.Context) error) {
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	if s.hooks.health == nil {
		s.hooks.health = make(map[string]func(context.Context) error)
	}
	s.hooks.health[name] = check
}

// HealthResult is the outcome of one health check.
type HealthResult struct {
	Name string
	Err  error // nil when healthy
	Took time.Duration
}

// Health runs every registered health check at once, each within ctx, and
// returns their results sorted by name.
func (s *Server) Health(ctx context.Context) []HealthResult {
	s.hooks.mu.Lock()
	checks := maps.Clone(s.hooks.health)
	s.hooks.mu.Unlock()
	names := slices.Sorted(maps.Keys(checks))
	res := make([]HealthResult, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			start := time.Now()
			err := safeCheck(ctx, checks[name])
			res[i] = HealthResult{Name: name, Err: err, Took: time.Since(start)}
		})
	}
	wg.Wait()
	return res
}

// safeCheck runs a health check, turning a panic into an error.
func safeCheck(ctx context.Context, check func(context.Context) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("kiev: health check panicked: %v", p)
		}
	}()
	return check(ctx)
}

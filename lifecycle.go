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
	mu       sync.Mutex // guards the fields below
	shutdown []func(context.Context) error
	ran      bool
	health   map[string]func(context.Context) error
	healthV  uint64 // counts RegisterHealth calls, so a cached run knows it is stale

	// The last run of the checks for the status page (see cachedHealth).
	cacheMu sync.Mutex // guards the fields below
	cacheAt time.Time
	cacheV  uint64
	cached  []HealthResult
}

// HealthCacheTTL is how long the status page, its JSON and metrics reuse
// one run of the health checks: requests within it share the run, so
// fetching the page often cannot load the dependencies the checks probe.
// Server.Health always runs them.
const HealthCacheTTL = time.Second

// cachedHealth returns the results of the health checks, run again only
// when the last run is older than HealthCacheTTL or a check was
// registered since. Concurrent callers wait for one run.
func (s *Server) cachedHealth(ctx context.Context) []HealthResult {
	h := &s.hooks
	h.cacheMu.Lock()
	defer h.cacheMu.Unlock()
	h.mu.Lock()
	v := h.healthV
	h.mu.Unlock()
	if h.cached != nil && h.cacheV == v && time.Since(h.cacheAt) < HealthCacheTTL {
		return h.cached
	}
	res := s.Health(ctx)
	if ctx.Err() == nil { // a run cut short by its caller is not kept
		h.cached, h.cacheAt, h.cacheV = res, time.Now(), v
	}
	return res
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
// them, running them at most once per HealthCacheTTL. A check must return
// within its ctx. Registering a name again replaces its check.
func (s *Server) RegisterHealth(name string, check func(ctx context.Context) error) {
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	s.hooks.healthV++
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

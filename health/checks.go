package health

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// CacheTTL is how long the status page, its JSON, metrics and the health
// service reuse one run of the health checks: requests within it share
// the run, so asking often cannot load the dependencies the checks probe.
// Checks.Run always runs them.
const CacheTTL = time.Second

// Result is the outcome of one health check.
type Result struct {
	Name string
	Err  error // nil when healthy
	Took time.Duration
}

// Checks are a server's health checks of its dependencies, by name. The
// zero value holds none and is ready to use; its methods are safe for
// concurrent use.
type Checks struct {
	mu     sync.Mutex // guards the fields below
	checks map[string]func(context.Context) error
	v      uint64 // counts Add calls, so a cached run knows it is stale

	// The last run of the checks (see Cached).
	cacheMu sync.Mutex // guards the fields below
	cacheAt time.Time
	cacheV  uint64
	cached  []Result
}

// Add adds a check under name, such as "redis" for a check that pings
// Redis. Adding a name again replaces its check. A check must return
// within its ctx.
func (c *Checks) Add(name string, check func(ctx context.Context) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.v++
	if c.checks == nil {
		c.checks = make(map[string]func(context.Context) error)
	}
	c.checks[name] = check
}

// Run runs every check at once, each within ctx, and returns their
// results sorted by name. A check that panics fails with the panic's
// value.
func (c *Checks) Run(ctx context.Context) []Result {
	c.mu.Lock()
	checks := maps.Clone(c.checks)
	c.mu.Unlock()
	names := slices.Sorted(maps.Keys(checks))
	res := make([]Result, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			start := time.Now()
			err := safeCheck(ctx, checks[name])
			res[i] = Result{Name: name, Err: err, Took: time.Since(start)}
		})
	}
	wg.Wait()
	return res
}

// Cached returns the results of the checks, run again only when the last
// run is older than CacheTTL or a check was added since. Concurrent
// callers wait for one run.
func (c *Checks) Cached(ctx context.Context) []Result {
	c.cacheMu.Lock()
	defer c.cacheMu.Unlock()
	c.mu.Lock()
	v := c.v
	c.mu.Unlock()
	if c.cached != nil && c.cacheV == v && time.Since(c.cacheAt) < CacheTTL {
		return c.cached
	}
	res := c.Run(ctx)
	if ctx.Err() == nil { // a run cut short by its caller is not kept
		c.cached, c.cacheAt, c.cacheV = res, time.Now(), v
	}
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

package shed

import (
	"sync/atomic"
	"time"
)

// ServiceTime is a moving average of how long one kind of task (one RPC
// method) takes to run. The zero value is ready to use and safe for
// concurrent use.
type ServiceTime struct {
	avg atomic.Int64 // nanoseconds, an exponentially weighted moving average
	n   atomic.Int64 // observations
}

// minObservations is how many runs a ServiceTime needs before the
// scheduler trusts it to skip calls that could not finish in time.
const minObservations = 16

// Observe adds one run of duration d. It does nothing on a nil
// ServiceTime.
func (s *ServiceTime) Observe(d time.Duration) {
	if s == nil {
		return
	}
	s.n.Add(1)
	for {
		old := s.avg.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if s.avg.CompareAndSwap(old, next) {
			return
		}
	}
}

// Estimate returns the average run time, or 0 until enough runs were seen.
func (s *ServiceTime) Estimate() time.Duration {
	if s == nil || s.n.Load() < minObservations {
		return 0
	}
	return time.Duration(s.avg.Load())
}

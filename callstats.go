package kiev

import (
	"time"

	"github.com/kievrpc/kiev/internal/callstats"
)

// callStats counts calls (a method's, a client's, a provider's) for the
// metrics and the status page; see package callstats.
type callStats struct{ callstats.Stats }

// record counts one call that ended with code after d; d < 0 for a call
// that never ran.
func (s *callStats) record(now time.Time, d time.Duration, code Code) {
	s.Record(now, d, uint32(code))
}

// codeNames are the codes' names, by code, the labels of the metrics'
// counters by code.
var codeNames = func() (names [callstats.NumCodes]string) {
	for i := range names {
		names[i] = Code(i).String()
	}
	return names
}()

// callstats.NumCodes is numCodes: these fail to compile otherwise.
var (
	_ [callstats.NumCodes - numCodes]struct{}
	_ [numCodes - callstats.NumCodes]struct{}
)

package kiev

import (
	"time"

	"github.com/kievrpc/kiev/internal/throttle"
)

// Throttle configures client-side adaptive throttling, as in the Google
// SRE book: when a server keeps refusing calls with ErrOverloaded, the
// client refuses a share of new calls itself, at once and without sending
// them, so a struggling server is not also buried under calls it would
// refuse anyway.
//
// Over the last Window the client counts calls sent and calls the server
// accepted (answered with anything but ErrOverloaded), separately for
// each priority, and refuses a new call with probability
//
//	max(0, (calls - K*accepted) / (calls + 8))
//
// so nothing is refused while the server accepts more than 1/K of the
// calls. (The book adds 1 to the divisor; kiev adds 8, as gRPC does, so
// that a handful of refusals on a quiet client does not start refusing.) Priorities are counted apart because a server serves important
// calls first: a priority-9 call is not refused because priority-0 calls
// are.
type Throttle struct {
	// K is how many calls per accepted call the client sends before it
	// starts refusing (default 2). Lower is more aggressive.
	K float64
	// Window is how far back the counts go (default 1 second). The book
	// uses 2 minutes; kiev servers refuse cheaply and at once, so a short
	// memory lets a client stop refusing within a second of the server
	// recovering, while a sustained overload keeps it refusing.
	Window time.Duration
	// Disabled turns throttling off.
	Disabled bool
}

func newThrottlers(t Throttle) *[MaxPriority + 1]throttle.Throttler {
	if t.Disabled {
		return nil
	}
	if t.K <= 0 {
		t.K = 2
	}
	if t.Window <= 0 {
		t.Window = time.Second
	}
	var ts [MaxPriority + 1]throttle.Throttler
	for i := range ts {
		ts[i].Init(t.K, t.Window)
	}
	return &ts
}

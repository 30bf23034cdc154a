// Package shed is kiev's overload scheduler: the queue every call passes
// through before a handler runs. It keeps a server answering the calls
// that matter when it is offered more work than it can do, and says so
// at once to the calls it will not run.
//
// The design in plain sentences (DESIGN.md beside this file gives the
// reasons and the measurements):
//
//   - Every call has a priority from 0 to 9. Calls start highest
//     priority first, oldest first within a priority.
//   - A pool of workers runs the calls. Left elastic (Options.Workers
//     zero), it grows while its workers block on I/O and stops growing
//     when its own calls wait for a CPU. Options.MaxInFlight is a hard
//     ceiling on the calls running at once.
//   - Each method is bounded from its first call: a slow start of 64
//     calls in flight that doubles each round trip while its service
//     time holds, under a ceiling of twice the calls that ended in the
//     last floor time (Little's law). Methods of a millisecond or less,
//     which have no dependency to protect, are not bounded. A method whose
//     calls acquire a Resource is bounded by twice its capacity, its
//     adaptive limit included.
//   - Each method has an adaptive concurrency limit, off while its
//     service time stays near its floor. It starts when the service time
//     stays congested for two windows, or at once for a surge: more than
//     twice as many calls arriving as ending, two round trips in a row.
//     It doubles while calls wait and the service time is near the floor
//     (and holds while it is above the floor, not congested), falls with
//     congestion, probes the floor now and then (never taking fewer
//     calls in flight than the dependency serves at its floor, unless
//     the service time there is off the floor), and turns off when no
//     call meets it. A run that refused its work (a handler that
//     answered it is overloaded) is no sample of the service time.
//   - A rise in service time is blamed on the CPU only when goroutines
//     wait for a CPU (the median of the last readings): up to four times
//     that wait if the method's calls are the runnable ones, up to twice
//     it if they are blocked (they wait for a CPU as they wake). A surge
//     is blamed on the CPU only if its calls are the runnable ones: a
//     busy CPU does not hide a dependency whose calls are blocked.
//   - A method's calls over its bound or limit wait in its lane, which
//     costs no goroutine. Under the bound they wait while they can start
//     in time; under the limit, a call that cannot start in time is
//     refused on arrival (Reason Limited). A wait is predicted from the
//     calls ahead, the rate calls end, the time since the last end and
//     how long the oldest queued call has waited.
//   - A queue enters overload mode under sustained pressure (CoDel's
//     rule), and then holds only what starts within a few milliseconds,
//     each priority a share; a refusal comes at once, not after a wait.
//     Calls running beyond a lowered limit are not charged to the
//     shares: a call is admitted if it can start by its deadline once
//     they drained.
//   - A call whose deadline is closer than its method's expected run
//     time is not started; nor is one whose caller left.
//   - Each connection is a Flow: where a queue would refuse a light
//     flow's call, the heaviest flow's newest queued call gives way.
//   - A Resource is a dependency's slots (a connection pool) that
//     handlers acquire: granted in priority order, never to a call that
//     could not use it before its deadline.
//   - Each method limit keeps its last decisions, with the rule that
//     fired and what it read (ServiceTime.Limit, LimitStats.Decisions):
//     the status page shows them.
//
// A Scheduler is safe for concurrent use. kiev servers create one from
// the Options given to kiev.WithShed; a program rarely uses this package
// beyond Options, Stats and Resource.
package shed

import (
	"fmt"
	"runtime"
	"time"
)

// Levels is the number of priorities: 0 (shed first) to 9 (shed last).
const Levels = 10

// Defaults for Options fields left zero.
const (
	DefaultQueueSize = 1024
	DefaultMaxWait   = 100 * time.Millisecond
	DefaultTarget    = time.Millisecond
	DefaultInterval  = 100 * time.Millisecond

	// DefaultMaxInFlight is the default hard ceiling on calls running at
	// once: 10,000 goroutines, each with at least an 8 KiB stack and its
	// call's buffers, some 100 MiB in all.
	DefaultMaxInFlight = 10000
)

// DefaultWorkers is where the elastic limit starts: 64 per CPU. It was
// the fixed default before the pool became elastic.
func DefaultWorkers() int { return 64 * runtime.GOMAXPROCS(0) }

// Options configures a Scheduler. The zero value works: every zero field
// takes its default.
type Options struct {
	// Workers, when set, is a fixed cap on the calls that run at once.
	// Left zero, the pool is elastic: the limit starts at
	// DefaultWorkers() and follows what is congested, growing while
	// workers block on I/O and the CPU keeps up, and falling to the knee
	// when the calls running are CPU-bound and wait for a CPU (see the
	// package documentation). Set it only to bound a service by hand.
	Workers int

	// MaxInFlight is the hard ceiling on calls running at once, whatever
	// the elastic limit says: goroutines and memory
	// (DefaultMaxInFlight, 10,000). It must not be below Workers.
	MaxInFlight int

	// QueueSize is how many calls may wait (DefaultQueueSize, 1024).
	QueueSize int

	// MaxWait is the longest a call is let wait (DefaultMaxWait, 100ms):
	// a call predicted to start later is refused on arrival, and a queued
	// call without a deadline is dropped once it waited this long. A call
	// with a deadline that was admitted waits while it can finish by it.
	MaxWait time.Duration

	// Target is the wait limit in overload mode, CoDel's target delay
	// (DefaultTarget, 1ms), or two gaps between task completions if that
	// is longer. The overload queue holds what the workers start within
	// half of it, and a call admitted to it may be refused within a
	// quarter of it.
	Target time.Duration

	// Interval is how long the queue must stay non-empty before the
	// scheduler enters overload mode, and how long a quiet spell must last
	// before it leaves (DefaultInterval, 100ms).
	Interval time.Duration

	// Disabled turns the scheduler off: every call runs at once on a
	// goroutine of its own, as in net/rpc, with no queue, no limit and no
	// shedding. Use it only for comparison.
	Disabled bool
}

// Validate reports the first setting that is not valid: a negative
// number or duration, or a MaxInFlight below Workers. New panics with the
// same error; a program whose settings come from a file can check first.
func (o Options) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"Workers", int64(o.Workers)},
		{"MaxInFlight", int64(o.MaxInFlight)},
		{"QueueSize", int64(o.QueueSize)},
		{"MaxWait", int64(o.MaxWait)},
		{"Target", int64(o.Target)},
		{"Interval", int64(o.Interval)},
	} {
		if f.v < 0 {
			return fmt.Errorf("shed: Options.%s is negative (%d); use a positive value, or zero for the default", f.name, f.v)
		}
	}
	if o.MaxInFlight > 0 && o.Workers > o.MaxInFlight {
		return fmt.Errorf("shed: Options.MaxInFlight (%d) is below Workers (%d): the ceiling on calls running at once cannot be lower than the fixed cap; raise MaxInFlight or lower Workers", o.MaxInFlight, o.Workers)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = max(DefaultMaxInFlight, o.Workers)
	}
	if o.Workers <= 0 {
		o.Workers = 0 // elastic
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.Target <= 0 {
		o.Target = DefaultTarget
	}
	if o.Target > o.MaxWait {
		o.Target = o.MaxWait
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	return o
}

// Reason says why a call was dropped without running.
type Reason uint8

// Drop reasons.
const (
	// Evicted: a call of higher priority took its place in a full queue.
	Evicted Reason = iota
	// Refused: the queue was full of calls of its priority or higher.
	Refused
	// Expired: it waited in the queue longer than the wait limit.
	Expired
	// Deadline: its caller's deadline had passed, or was closer than the
	// method's recent service time, so it could not finish in time.
	Deadline
	// Canceled: its caller gave up while it waited. It gets no answer.
	Canceled
	// Limited: its method's adaptive limit was on, as its service time
	// rose above its floor (its dependency is slow), and the call could
	// not start in time: refused on arrival, or answered while it waited
	// in the method's lane (pushed out, or past its time).
	Limited

	numReasons
)

var reasonNames = [numReasons]string{"evicted", "refused", "expired", "deadline", "canceled", "limited"}

// String returns the reason's name, as used in metrics labels.
func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Task is one call as the scheduler sees it. kiev implements it; its
// methods must not block, except Run.
type Task interface {
	// Priority is 0 to 9; values out of range are clamped.
	Priority() int
	// Deadline is the caller's deadline, if it has one.
	Deadline() (time.Time, bool)
	// Canceled reports whether the caller has given up.
	Canceled() bool
	// Cost tracks how long this kind of task takes to run; nil if
	// unknown. The scheduler updates it after every run.
	Cost() *ServiceTime
	// Run runs the call and answers it.
	Run()
	// Drop answers the call without running it.
	Drop(Reason)
}

// TimedTask is a Task that shares clock reads with the scheduler, sparing
// it one around each run. The scheduler calls RunTimed instead of Run,
// with start the time it starts the task (a clock read it has just made:
// for a task run inline, the one that admitted it); RunTimed runs the
// task and returns when its work ended, a clock read the task makes for
// its own needs. The task's service time is end minus start; what the
// task does after end (a call sending its reply) is no task's.
//
// RunTimed also reports whether the run is a sample of the task's
// service time: false for a run that refused its work at once (a handler
// that answered it is overloaded, say because a Resource refused it a
// slot). Such a run says nothing of the dependency, and a method's limit
// that read it as a quick call would let more calls in.
type TimedTask interface {
	Task
	RunTimed(start time.Time) (end time.Time, sampled bool)
}

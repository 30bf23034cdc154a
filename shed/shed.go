// Package shed is kiev's overload scheduler: the queue every call passes
// through before a handler runs.
//
// # What limits what
//
// Overload has more than one cause, and each limit follows the signal of
// the resource it protects, so that protecting one never starves another:
//
//   - The CPU: the pool of workers is elastic (Options.Workers left
//     zero). Calls that wait on a database or another service hold a
//     goroutine but no CPU, so the pool grows as its workers block, by up
//     to a quarter each millisecond, while the Go runtime shows the CPU
//     keeping up. It stops growing when goroutines wait for a CPU (the
//     90th percentile of /sched/latencies:seconds above Options.Target,
//     with more runnable goroutines than CPUs, as many as half the calls
//     running, two readings in a row): then the calls running are what
//     wants the CPU, and what cannot start queues, where the queue rules
//     below hold CPU-bound work at the knee. Set Workers for a fixed cap
//     instead. Idle workers are kept for reuse, so calls rarely grow a
//     fresh goroutine's stack, and their number falls back after a burst.
//   - A method's dependency: each method has an adaptive concurrency
//     limit, a bulkhead (see ServiceTime), in the family of brpc's auto
//     concurrency limiter, Netflix's concurrency-limits and BBR. While
//     the method's service time stays near its floor it is off. When the
//     service time rises well above the floor (the dependency saturated
//     or slowed), two windows in a row, or its calls in flight surge, the
//     limit is what the dependency serves at its floor latency: by
//     Little's law, the calls completed per second times the floor, with
//     headroom. The method's calls beyond it wait in the method's own
//     queue, its lane, under the queue rules below, and those that cannot
//     start in time are refused at once (Reason Limited). Other methods
//     are not held. The limit grows while calls wait beyond it and the
//     service time is not congested, and probes (the limit halved, then
//     halved again while the service time keeps falling with it) find
//     the floor again, so that a dependency that became slower for good
//     is served at its new pace, and one saturated from its first call is
//     found out. A rise in service time that the CPU's wait explains (a
//     few times how long goroutines waited for a congested CPU) does not
//     start or lower a limit: a busy CPU raises every method's service
//     time, and it is the pool's to limit. Method limits act in the elastic
//     pool; a fixed pool (Workers set) works as it did before them.
//   - Memory and goroutines: Options.MaxInFlight is a hard ceiling on the
//     calls running at once, whatever the other limits say.
//   - Fairness between clients: each connection is a Flow. Each queue
//     weighs the flows by the rate it admits their calls, and where its
//     rules would refuse the call of a light flow, the heaviest flow's
//     newest queued call gives way instead (see Flow), so a flooding
//     client gets what the others leave.
//
// Stats shows the pool's limit; ServiceTime.Limit a method's.
//
// # The queues
//
// The pool's queue, and each method's lane, hold the calls that cannot
// start yet in 10 priority levels, 9 the most important. They keep a
// service answering the calls that matter when offered more work than it
// can do:
//
//   - Calls start highest priority first, oldest first within a
//     priority.
//   - A call predicted to start later than Options.MaxWait is refused on
//     arrival: the calls running beyond the limit end, and the calls
//     queued ahead of it (of its priority or higher) start, one every
//     service time divided by the slots, but only in the share of the
//     slots the more important calls arriving meanwhile leave it.
//   - When a queue is full, a new call evicts the newest queued call of
//     the lowest priority below its own; if there is none, the new call
//     is refused. Both get an immediate answer (kiev.ErrOverloaded).
//   - A queued call whose caller's deadline has passed, or is closer
//     than the method's recent service time, is answered without running;
//     one without a deadline, once it waited MaxWait.
//
// Under overload a queue changes mode, so that queueing delay stays a
// few milliseconds and nearly every call that will not run is told so on
// arrival, not after a wait:
//
//   - It enters overload mode when it has not been empty for
//     Options.Interval (CoDel's rule, as Facebook applies it to RPC
//     queues), or has stayed longer than the overload queue below for a
//     tenth of that (a surge). It leaves after an Interval in which fewer
//     calls arrived than the slots could have started. A method's lane
//     enters it only while more calls arrive than its limit starts,
//     averaged over a few Intervals: a dependency served right at its
//     capacity has a queue that comes and goes, which MaxWait bounds.
//   - In overload mode a call is admitted only if the calls that will
//     start before it, those of its priority or higher, are fewer than
//     its priority's share of a short queue: what the slots start in
//     half of Options.Target, scaled from a fifth of that for priority 0
//     to twice that for priority 9. Others are refused at once. A call
//     of priority p below 9 admitted in overload mode should start
//     within (p+1)/10 of Target: the less important calls are the ones
//     later arrivals push back, and one that will not start is best
//     answered soon. Priority 9 has room for at least a round of slots
//     and is bounded by its share alone, never shed for a wait.
//   - An admitted call pushes out the newest queued calls of lower
//     priority that it leaves with more calls ahead of them than their
//     share, as they would not start in time.
//   - A call admitted in overload mode can be refused only within a
//     quarter of Target of its arrival (its refusal window): pushed out,
//     or found unable to start by its time when a slot frees up. One
//     still queued after that is kept and runs while it can finish in
//     time. A refusal is thus always quick, never the end of a wait: the
//     caller learns at once to go elsewhere, and a call that waited is
//     served.
//
// Calls are served first in, first out within a priority. Facebook's
// adaptive LIFO serves the newest first under overload; with the queue
// kept to a few milliseconds of work it only starved the oldest calls
// until they expired, so kiev does not use it. bench/overload measures
// the result against net/rpc and grpc-go.
//
// A task that would start at once anyway may run on the submitting
// goroutine instead of a worker (Scheduler.RunInline): a kiev server does
// so for a quick call alone on its connection, and for the calls of a
// burst read together whose method costs about a hand-off, sparing the
// wake-up of a worker, and gives the call back to the workers' rules in
// every other case. A disabled scheduler never does.
//
// An elastic pool enters overload mode only once it can no longer grow
// (the CPU is congested by its calls, or it reached MaxInFlight): a queue
// that waits for the pool to grow is no sign of overload.
//
// A Scheduler is safe for concurrent use. kiev servers create one from
// the Options given to kiev.WithShed; a program rarely uses this package
// beyond Options and Stats.
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
type TimedTask interface {
	Task
	RunTimed(start time.Time) (end time.Time)
}

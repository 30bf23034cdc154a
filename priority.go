package kiev

import (
	"context"
	"fmt"
)

// Priority says how important a call is to the server's overload
// scheduler: 0 is shed first, 9 last. See package shed.
type Priority uint8

// Priorities.
const (
	MinPriority Priority = 0
	MaxPriority Priority = 9

	// DefaultPriority is the priority of a call that does not say: the
	// middle, so that callers can mark work both less and more important.
	DefaultPriority Priority = 5
)

type priorityKey struct{}

// WithPriority returns a context whose calls carry priority p. Values
// above MaxPriority are treated as MaxPriority.
//
// A handler's ctx carries the priority of its call, so calls a handler
// makes with its ctx inherit it, as they inherit the remaining deadline:
// a whole call chain is shed consistently. Call WithPriority on the
// handler's ctx to change it for the calls that follow.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, min(p, MaxPriority))
}

// PriorityFrom returns the priority calls made with ctx carry: the one set
// with WithPriority, the one of the call a handler's ctx belongs to, or
// DefaultPriority.
func PriorityFrom(ctx context.Context) Priority {
	if p, ok := ctx.Value(priorityKey{}).(Priority); ok {
		return p
	}
	return DefaultPriority
}

// String returns "priority N".
func (p Priority) String() string { return fmt.Sprintf("priority %d", uint8(p)) }

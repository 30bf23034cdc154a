package kiev

import (
	"context"
	"maps"
)

// Metadata holds string key/value pairs that travel with a call, such as
// trace ids and auth tokens. Keys are matched exactly; lowercase keys are
// the convention.
type Metadata map[string]string

// Get returns the value for key, or "" if there is none. It is safe on a
// nil Metadata.
func (md Metadata) Get(key string) string { return md[key] }

type incomingKey struct{}

type outgoingKey struct{}

// WithMetadata returns a context whose calls carry the given key/value
// pairs in addition to any set earlier on ctx; a later value for a key
// replaces an earlier one. It panics if kv has an odd number of elements,
// as that is a bug in the caller.
//
// Metadata a handler received is not forwarded by calls it makes: read it
// with MetadataFrom and pass on what should travel further.
func WithMetadata(ctx context.Context, kv ...string) context.Context {
	if len(kv)%2 != 0 {
		panic("kiev: WithMetadata needs key/value pairs; got an odd number of strings")
	}
	prev, _ := ctx.Value(outgoingKey{}).(Metadata)
	md := make(Metadata, len(prev)+len(kv)/2)
	maps.Copy(md, prev)
	for i := 0; i < len(kv); i += 2 {
		md[kv[i]] = kv[i+1]
	}
	return context.WithValue(ctx, outgoingKey{}, md)
}

// MetadataFrom returns the metadata the caller sent with the call that a
// handler's ctx belongs to. It returns nil (on which Get works) when there
// is none. The map must not be modified.
func MetadataFrom(ctx context.Context) Metadata {
	md, _ := ctx.Value(incomingKey{}).(Metadata)
	return md
}

// OutgoingMetadata returns the metadata set on ctx with WithMetadata,
// which a call made with ctx will carry.
func OutgoingMetadata(ctx context.Context) Metadata {
	md, _ := ctx.Value(outgoingKey{}).(Metadata)
	return md
}

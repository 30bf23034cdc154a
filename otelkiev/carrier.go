package otelkiev

import (
	"context"

	"github.com/kievrpc/kiev"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// incoming is a propagation.TextMapCarrier over the metadata a call
// brought, which extraction only reads.
type incoming kiev.Metadata

func (md incoming) Get(key string) string { return md[key] }

// Set does nothing: the metadata a call brought is not to be changed.
func (md incoming) Set(key, value string) {}

func (md incoming) Keys() []string {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	return keys
}

// outgoing is a propagation.TextMapCarrier that gathers the pairs a
// propagator injects, for kiev.WithMetadata.
type outgoing struct{ kv []string }

func (o *outgoing) Get(key string) string {
	for i := 0; i < len(o.kv); i += 2 {
		if o.kv[i] == key {
			return o.kv[i+1]
		}
	}
	return ""
}

func (o *outgoing) Set(key, value string) {
	for i := 0; i < len(o.kv); i += 2 {
		if o.kv[i] == key {
			o.kv[i+1] = value
			return
		}
	}
	o.kv = append(o.kv, key, value)
}

func (o *outgoing) Keys() []string {
	keys := make([]string, 0, len(o.kv)/2)
	for i := 0; i < len(o.kv); i += 2 {
		keys = append(keys, o.kv[i])
	}
	return keys
}

var traceContext propagation.TraceContext

// inject returns ctx with the metadata that carries its span context to
// the server.
func (c *config) inject(ctx context.Context) context.Context {
	var o outgoing
	o.kv = make([]string, 0, 4)
	if c.propagator != nil {
		c.propagator.Inject(ctx, &o)
	} else if otel.GetTextMapPropagator().Inject(ctx, &o); len(o.kv) == 0 {
		traceContext.Inject(ctx, &o)
	}
	if len(o.kv) == 0 {
		return ctx
	}
	return kiev.WithMetadata(ctx, o.kv...)
}

// extract returns ctx with the span context (and whatever else the
// propagator carries) that the caller sent in md.
func (c *config) extract(ctx context.Context, md kiev.Metadata) context.Context {
	if len(md) == 0 {
		return ctx
	}
	if c.propagator != nil {
		return c.propagator.Extract(ctx, incoming(md))
	}
	ctx = otel.GetTextMapPropagator().Extract(ctx, incoming(md))
	if !trace.SpanContextFromContext(ctx).IsRemote() {
		ctx = traceContext.Extract(ctx, incoming(md))
	}
	return ctx
}

package otelkiev

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.38.0"
	"go.opentelemetry.io/otel/semconv/v1.38.0/rpcconv"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of otelkiev's tracers and meters.
const ScopeName = "github.com/kievrpc/kiev/otelkiev"

// An Option configures ServerInterceptor or ClientInterceptor.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithTracerProvider sets the TracerProvider the spans come from; by
// default the global one (otel.GetTracerProvider), which makes no spans
// until one is set.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithMeterProvider sets the MeterProvider the call durations are
// recorded on; by default the global one (otel.GetMeterProvider), which
// records nothing until one is set.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithPropagators sets the propagator that carries the span context, and
// whatever else it carries (baggage, say), in call metadata. By default it
// is the global one, or W3C Trace Context while that injects nothing (see
// the package doc).
func WithPropagators(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *config) { c.propagator = p })
}

// config is what the options set, and what follows from it.
type config struct {
	tp         trace.TracerProvider
	mp         metric.MeterProvider
	propagator propagation.TextMapPropagator // nil: the global, or W3C Trace Context

	tracer trace.Tracer
	meter  metric.Meter
}

func newConfig(opts []Option) *config {
	c := &config{}
	for _, o := range opts {
		o.apply(c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	c.tracer = c.tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL))
	c.meter = c.mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	return c
}

// system is rpc.system: kiev is its own protocol (PROTOCOL.md), which no
// value the conventions list names.
const system rpcconv.SystemAttr = "kiev"

package otelkiev

import (
	"context"
	"errors"
	"time"

	"github.com/kievrpc/kiev"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.38.0"
	"go.opentelemetry.io/otel/semconv/v1.38.0/rpcconv"
	"go.opentelemetry.io/otel/trace"
)

// ClientInterceptor returns a kiev.ClientInterceptor that runs each call
// in a client span, a child of the span in the call's ctx, sends the
// span's context to the server in the call's metadata, and records the
// call's duration as rpc.client.duration (see the package doc).
//
// The span covers the whole call, the client's retries on other
// providers included: each attempt that reaches a traced server is a
// server span under it.
func ClientInterceptor(opts ...Option) kiev.ClientInterceptor {
	c := newConfig(opts)
	duration, err := rpcconv.NewClientDuration(c.meter)
	if err != nil {
		otel.Handle(err)
	}
	return func(next kiev.Invoker) kiev.Invoker {
		return func(ctx context.Context, call *kiev.Call) error {
			start := time.Now()
			service, method := splitMethod(call.ServiceMethod)
			addr, port := serverAddress(call.Target)
			attrs := make([]attribute.KeyValue, 0, 6)
			attrs = append(attrs, systemAttr, semconv.RPCService(service), semconv.RPCMethod(method),
				semconv.ServerAddress(addr), PriorityKey.Int(int(kiev.PriorityFrom(ctx))))
			if port > 0 {
				attrs = append(attrs, semconv.ServerPort(port))
			}
			ctx, span := c.tracer.Start(ctx, service+"/"+method,
				trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))

			err := next(c.inject(ctx), call)

			var outcome attribute.KeyValue
			code, known := clientCode(err)
			switch {
			case known:
				outcome = CodeKey.String(code.String())
			case errors.Is(err, kiev.ErrUnavailable):
				outcome = semconv.ErrorTypeKey.String("Unavailable")
			default:
				outcome = semconv.ErrorTypeOther
			}
			if span.IsRecording() {
				span.SetAttributes(outcome)
				if err != nil {
					if s := shedOutcome(err); s != "" {
						span.SetAttributes(ShedKey.String(s))
					}
					span.SetStatus(codes.Error, err.Error())
				}
			}
			span.End()
			if duration.Enabled(ctx) {
				mattrs := metricAttrs(service, method, outcome)
				if port > 0 {
					mattrs = append(mattrs, semconv.ServerPort(port))
				}
				duration.Record(ctx, sinceMillis(start), system, addr, mattrs...)
			}
			return err
		}
	}
}

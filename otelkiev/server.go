package otelkiev

import (
	"context"
	"log/slog"
	"time"

	"github.com/kievrpc/kiev"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.38.0"
	"go.opentelemetry.io/otel/semconv/v1.38.0/rpcconv"
	"go.opentelemetry.io/otel/trace"
)

// ServerInterceptor returns a kiev.ServerInterceptor that runs each call
// in a server span, a child of the caller's span when the call's metadata
// carries one, with the call's trace and span ids on its log lines, and
// records its duration as rpc.server.duration (see the package doc). A
// stream's span covers the whole stream, with StreamKey set and an
// "rpc.message" event for each message; its duration is not recorded.
func ServerInterceptor(opts ...Option) kiev.ServerInterceptor {
	c := newConfig(opts)
	duration, err := rpcconv.NewServerDuration(c.meter)
	if err != nil {
		otel.Handle(err)
	}
	return func(next kiev.Handler) kiev.Handler {
		return func(ctx context.Context, req *kiev.Request) error {
			start := time.Now()
			service, method := splitMethod(req.ServiceMethod)
			attrs := make([]attribute.KeyValue, 0, 6)
			attrs = append(attrs, systemAttr, semconv.RPCService(service), semconv.RPCMethod(method),
				PriorityKey.Int(int(kiev.PriorityFrom(ctx))))
			attrs = peerAttrs(attrs, req.Peer)
			ctx, span := c.tracer.Start(c.extract(ctx, req.Metadata), service+"/"+method,
				trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
			if sc := span.SpanContext(); sc.IsValid() {
				ctx = kiev.WithLogAttrs(ctx, slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
			}
			if req.Stream != kiev.Unary && span.IsRecording() {
				span.SetAttributes(StreamKey.String(req.Stream.String()))
				req.OnMessage(func(ev kiev.MessageEvent) { messageEvent(span, ev) })
			}

			err := next(ctx, req)

			code := serverCode(err)
			// A method the server does not have: its name is the caller's
			// to choose, so it names no span and no series.
			if code == kiev.CodeNotFound && req.Args == nil {
				service, method = "", other
				span.SetName(other)
			}
			if span.IsRecording() {
				span.SetAttributes(CodeKey.String(code.String()))
				if s := shedOutcome(err); s != "" {
					span.SetAttributes(ShedKey.String(s))
				}
				if serverFault(code) {
					span.SetStatus(codes.Error, err.Error())
				}
			}
			span.End()
			// A stream's time is no call's duration (the conventions
			// leave streams out of rpc.server.duration).
			if req.Stream == kiev.Unary && duration.Enabled(ctx) {
				duration.Record(ctx, sinceMillis(start), system, metricAttrs(service, method, CodeKey.String(code.String()))...)
			}
			return err
		}
	}
}

// metricAttrs are a call's attributes on its duration, besides
// rpc.system (and on the client server.address): bounded, as series.
func metricAttrs(service, method string, more ...attribute.KeyValue) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 2+len(more))
	if service != "" {
		attrs = append(attrs, semconv.RPCService(service))
	}
	return append(append(attrs, semconv.RPCMethod(method)), more...)
}

// sinceMillis is the time since start in milliseconds, the unit of the
// conventions' rpc durations.
func sinceMillis(start time.Time) float64 {
	return float64(time.Since(start)) / float64(time.Millisecond)
}

package otelkiev

import (
	"context"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/shed"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.38.0"
	"go.opentelemetry.io/otel/trace"
)

// DropHook returns a function for kiev.WithDropHook that gives each call
// the server's overload scheduler drops without running it a server span
// of its own, a child of the caller's span when the call's metadata
// carries one: no interceptor sees such a call, since none runs. The span
// has the attributes of ServerInterceptor's, ShedKey set to the reason as
// shed.Reason names it ("refused", "evicted", "expired", "limited" or
// "deadline"), CodeKey "Overloaded" (or "DeadlineExceeded" for a call
// with too little time left) and status Error; it starts and ends as the
// call is dropped.
//
//	srv := kiev.NewServer(
//		kiev.WithServerInterceptor(otelkiev.ServerInterceptor()),
//		kiev.WithDropHook(otelkiev.DropHook()),
//	)
func DropHook(opts ...Option) func(ctx context.Context, req *kiev.Request, reason shed.Reason) {
	c := newConfig(opts)
	return func(ctx context.Context, req *kiev.Request, reason shed.Reason) {
		service, method := splitMethod(req.ServiceMethod)
		code := kiev.CodeOverloaded
		if reason == shed.Deadline {
			code = kiev.CodeDeadlineExceeded
		}
		attrs := make([]attribute.KeyValue, 0, 8)
		attrs = append(attrs, systemAttr, semconv.RPCService(service), semconv.RPCMethod(method),
			PriorityKey.Int(int(kiev.PriorityFrom(ctx))), ShedKey.String(reason.String()), CodeKey.String(code.String()))
		attrs = peerAttrs(attrs, req.Peer)
		_, span := c.tracer.Start(c.extract(ctx, req.Metadata), service+"/"+method,
			trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		span.SetStatus(codes.Error, "kiev: "+req.ServiceMethod+" was dropped unrun: "+reason.String())
		span.End()
	}
}

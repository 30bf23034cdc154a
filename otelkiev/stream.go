package otelkiev

import (
	"context"
	"errors"

	"github.com/kievrpc/kiev"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.38.0"
	"go.opentelemetry.io/otel/trace"
)

// StreamInterceptor returns a kiev.StreamInterceptor that runs each
// stream a client opens in a client span, from the open to the stream's
// end, a child of the span in the open's ctx; it sends the span's
// context to the server with the open, and adds an "rpc.message" event
// for each message sent and received (see the package doc).
//
//	c, err := kiev.Dial(addr,
//		kiev.WithClientInterceptor(otelkiev.ClientInterceptor()),
//		kiev.WithStreamInterceptor(otelkiev.StreamInterceptor()),
//	)
func StreamInterceptor(opts ...Option) kiev.StreamInterceptor {
	c := newConfig(opts)
	return func(next kiev.StreamOpener) kiev.StreamOpener {
		return func(ctx context.Context, desc *kiev.StreamDesc) (*kiev.Stream, error) {
			service, method := splitMethod(desc.ServiceMethod)
			addr, port := serverAddress(desc.Target)
			attrs := make([]attribute.KeyValue, 0, 6)
			attrs = append(attrs, systemAttr, semconv.RPCService(service), semconv.RPCMethod(method),
				semconv.ServerAddress(addr), PriorityKey.Int(int(kiev.PriorityFrom(ctx))))
			if port > 0 {
				attrs = append(attrs, semconv.ServerPort(port))
			}
			ctx, span := c.tracer.Start(ctx, service+"/"+method,
				trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
			if span.IsRecording() {
				desc.OnMessage(func(ev kiev.MessageEvent) { messageEvent(span, ev) })
			}
			desc.OnEnd(func(err error) { endClientStream(span, err) })
			s, err := next(c.inject(ctx), desc)
			if err != nil {
				endClientStream(span, err)
			}
			return s, err
		}
	}
}

// endClientStream ends a client stream's span with the stream's end,
// err: nil if it ended well. A stream closed first, by Close or its
// context, has CodeKey "Canceled" and no Error status: the client chose
// to end it.
func endClientStream(span trace.Span, err error) {
	if span.IsRecording() {
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
		span.SetAttributes(outcome)
		if err != nil && !errors.Is(err, context.Canceled) {
			if s := shedOutcome(err); s != "" {
				span.SetAttributes(ShedKey.String(s))
			}
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// messageEvent adds ev to span, as the RPC conventions' rpc.message
// event: its type, id (from 1, each way) and uncompressed size, the
// size its codec encoded it to.
func messageEvent(span trace.Span, ev kiev.MessageEvent) {
	typ := semconv.RPCMessageTypeReceived
	if ev.Sent {
		typ = semconv.RPCMessageTypeSent
	}
	span.AddEvent("rpc.message", trace.WithAttributes(typ,
		semconv.RPCMessageID(int(ev.Seq)), semconv.RPCMessageUncompressedSize(ev.Size)))
}

// Package otelkiev traces kiev calls with OpenTelemetry, and measures them
// with OpenTelemetry metrics beside kiev's own Prometheus ones.
//
// ServerInterceptor and ClientInterceptor make a span for each call, of
// kind server and client, named "Service/Method", with the attributes of
// the OpenTelemetry RPC conventions (semconv v1.38.0): rpc.system "kiev",
// rpc.service, rpc.method, the peer (network.peer.address and .port on
// the server; server.address and .port, from the Client's target, on the
// client), and kiev's own: rpc.kiev.code (the call's Code, as
// Code.String prints it: "OK", "Overloaded", "404"), kiev.priority, and
// kiev.shed for a call the server shed without running it.
//
//	srv := kiev.NewServer(kiev.WithServerInterceptor(otelkiev.ServerInterceptor()))
//	c, err := kiev.Dial(addr, kiev.WithClientInterceptor(otelkiev.ClientInterceptor()))
//
// Put the server interceptor first, so that its span covers the others,
// such as kiev.TokenAuth, and calls they refuse have a span too.
//
// # Streams
//
// A stream is one span on each side, from its open to its end:
// StreamInterceptor makes the client's (kiev.WithStreamInterceptor), and
// ServerInterceptor the server's, which runs around the whole stream and
// sets kiev.stream to its kind ("server stream", "client stream",
// "bidirectional stream"). Each message sent or received is an
// "rpc.message" event, as the RPC conventions have it: rpc.message.type
// SENT or RECEIVED, rpc.message.id counting each way from 1, and
// rpc.message.uncompressed_size, the bytes its codec encoded it to. A
// client stream's reply is a message the client received.
//
//	c, err := kiev.Dial(addr,
//		kiev.WithClientInterceptor(otelkiev.ClientInterceptor()),
//		kiev.WithStreamInterceptor(otelkiev.StreamInterceptor()),
//	)
//
// A stream's client span ends when the stream does: Recv returned io.EOF
// or an error, Close, or the end of the context it was opened with. A
// stream the client ended first (Close, or its context canceled) has
// rpc.kiev.code "Canceled" and no Error status. Streams record no
// rpc.server.duration or rpc.client.duration: as the conventions say, a
// stream's time is no call's.
//
// # Propagation
//
// The client interceptor injects the span's context into the call's
// metadata, and the server interceptor extracts it, so that the server's
// span is a child of the client's and a handler's calls, made with its
// ctx, are children of its span: one trace across every hop. With the W3C
// Trace Context propagator the metadata keys are "traceparent" and
// "tracestate". The propagator is the global one (otel.SetTextMapPropagator);
// while that injects nothing, as the default global, a no-op, does, W3C
// Trace Context is used, so traces join with nothing set up.
// WithPropagators sets another.
//
// kiev's HTTP front makes the standard traceparent and tracestate headers
// metadata of those names, so an HTTP call from a traced caller (a
// browser's instrumentation, a proxy) continues the caller's trace.
//
// # Status and shed calls
//
// A client span's status is Error for every failed call. A server span's
// is Error for the failures that are the server's, as the RPC conventions
// say: Application (the handler's error), NotFound, Shutdown,
// DeadlineExceeded, Internal, Overloaded, TooLarge, and a handler's own
// code unless it is 400 to 499; a call canceled by its caller, a
// BadRequest or an Unauthenticated call leaves it unset.
//
// The overload scheduler answers a call it sheds without running it, so
// no server interceptor sees it: with kiev.WithDropHook(DropHook()), the
// server makes a span for it all the same, whose kiev.shed says why
// ("refused", "evicted", "expired", "limited", "deadline"). The client's
// span says so too: kiev.shed is "overloaded" for an ErrOverloaded
// answer (the queue was full, a more important call took its place, or it
// waited too long; the status description, the error's text, says which)
// and "limited" for ErrLimited (refused at the method's adaptive limit).
// A client that throttles itself refuses with ErrOverloaded too, and its
// span has no server child. A handler or interceptor that returns
// ErrOverloaded sheds its call as the scheduler would; its server span
// has kiev.shed "overloaded" too.
//
// # Logs
//
// The server interceptor adds the span's trace_id and span_id, in hex,
// to the call's log attributes (kiev.WithLogAttrs), so that the lines a
// handler logs with kiev.Logger(ctx), or with its ctx through a
// kiev.NewContextHandler, carry them.
//
// # Metrics
//
// Each interceptor records its calls' durations on the MeterProvider
// (WithMeterProvider; the global one by default, a no-op until one is
// set): rpc.server.duration and rpc.client.duration, histograms in
// milliseconds, by rpc.system, rpc.service, rpc.method and rpc.kiev.code,
// and on the client server.address and server.port. A method the server
// does not have counts as rpc.method "_OTHER", and its server span is
// named "_OTHER", so that callers cannot make series or span names at
// will.
package otelkiev

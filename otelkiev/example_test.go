package otelkiev_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/otelkiev"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

type Arith struct{}

type Args struct{ A, B int }

func (Arith) Mul(ctx context.Context, args Args, reply *int) error {
	*reply = args.A * args.B
	return nil
}

// A traced call: the client's span, and the server's, its child, in one
// trace. In production the TracerProvider exports to a collector (OTLP),
// and is usually set once with otel.SetTracerProvider instead of passed.
func Example() {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(context.Background())

	srv := kiev.NewServer(
		kiev.WithServerInterceptor(otelkiev.ServerInterceptor(otelkiev.WithTracerProvider(tp))),
		kiev.WithLogger(slog.New(slog.DiscardHandler)))
	srv.Register(Arith{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()

	c, err := kiev.Dial(l.Addr().String(),
		kiev.WithClientInterceptor(otelkiev.ClientInterceptor(otelkiev.WithTracerProvider(tp))))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	var product int
	if err := c.Call(context.Background(), "Arith.Mul", Args{7, 8}, &product); err != nil {
		log.Fatal(err)
	}
	fmt.Println("product:", product)

	ended := spans.GetSpans() // the server's span ends first
	server, client := ended[0], ended[1]
	fmt.Println(client.SpanKind, client.Name)
	fmt.Println(server.SpanKind, server.Name, "in the same trace:", server.SpanContext.TraceID() == client.SpanContext.TraceID(),
		"child of the client's:", server.Parent.SpanID() == client.SpanContext.SpanID())
	// Output:
	// product: 56
	// client Arith/Mul
	// server Arith/Mul in the same trace: true child of the client's: true
}

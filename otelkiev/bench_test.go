package otelkiev_test

import (
	"context"
	"net"
	"testing"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/otelkiev"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// BenchmarkCall measures what the interceptors add to a loopback call,
// both sides in one process: none; with the default global providers,
// no-ops until set; and with the SDK recording every span (exported
// nowhere) and both durations.
func BenchmarkCall(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		tp.Shutdown(context.Background())
		mp.Shutdown(context.Background())
	})
	for _, bc := range []struct {
		name string
		opts []otelkiev.Option
		off  bool
	}{
		{name: "plain", off: true},
		{name: "otel-noop"},
		{name: "otel-sdk", opts: []otelkiev.Option{otelkiev.WithTracerProvider(tp), otelkiev.WithMeterProvider(mp)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var sopts []kiev.ServerOption
			var dopts []kiev.DialOption
			if !bc.off {
				sopts = append(sopts, kiev.WithServerInterceptor(otelkiev.ServerInterceptor(bc.opts...)))
				dopts = append(dopts, kiev.WithClientInterceptor(otelkiev.ClientInterceptor(bc.opts...)))
			}
			_, addr := serve(b, Arith{}, sopts...)
			c := dial(b, addr, dopts...)
			ctx := context.Background()
			var product int
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Call(ctx, "Arith.Mul", Args{7, 8}, &product); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkInterceptors measures the two interceptors alone, without the
// network: a client interceptor whose next step hands the call's
// outgoing metadata to a server interceptor around an empty handler.
func BenchmarkInterceptors(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		tp.Shutdown(context.Background())
		mp.Shutdown(context.Background())
	})
	peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	for _, bc := range []struct {
		name string
		opts []otelkiev.Option
	}{
		{name: "noop"},
		{name: "sdk", opts: []otelkiev.Option{otelkiev.WithTracerProvider(tp), otelkiev.WithMeterProvider(mp)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			handler := otelkiev.ServerInterceptor(bc.opts...)(func(ctx context.Context, req *kiev.Request) error { return nil })
			invoke := otelkiev.ClientInterceptor(bc.opts...)(func(ctx context.Context, call *kiev.Call) error {
				req := &kiev.Request{ServiceMethod: call.ServiceMethod, Peer: peer, Metadata: kiev.OutgoingMetadata(ctx)}
				return handler(context.Background(), req)
			})
			call := &kiev.Call{ServiceMethod: "Arith.Mul", Target: "127.0.0.1:7000"}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := invoke(ctx, call); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

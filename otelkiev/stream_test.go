package otelkiev_test

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/otelkiev"
)

type Event struct{ N int }

// Feed has a stream of each kind the tests trace.
type Feed struct{}

func (Feed) Watch(ctx context.Context, n int, out kiev.Out[Event]) error {
	for i := range n {
		if err := out.Send(ctx, Event{N: i}); err != nil {
			return err
		}
	}
	return nil
}

func (Feed) Upload(ctx context.Context, in kiev.In[[]byte], total *int) error {
	for b, err := range in.All(ctx) {
		if err != nil {
			return err
		}
		*total += len(b)
	}
	return nil
}

func (Feed) Fail(ctx context.Context, n int, out kiev.Out[Event]) error {
	for i := range n {
		if err := out.Send(ctx, Event{N: i}); err != nil {
			return err
		}
	}
	return kiev.Errorf(503, "failed after %d", n)
}

// messages returns the rpc.message events of s of type typ ("SENT" or
// "RECEIVED"): their ids, in order, and their sizes.
func messages(t *testing.T, s tracetest.SpanStub, typ string) (ids []int64, sizes []int64) {
	t.Helper()
	for _, ev := range s.Events {
		if ev.Name != "rpc.message" {
			t.Errorf("%v span %s has an event %q", s.SpanKind, s.Name, ev.Name)
			continue
		}
		var evTyp string
		var id, size int64
		for _, a := range ev.Attributes {
			switch a.Key {
			case "rpc.message.type":
				evTyp = a.Value.AsString()
			case "rpc.message.id":
				id = a.Value.AsInt64()
			case "rpc.message.uncompressed_size":
				size = a.Value.AsInt64()
			}
		}
		if evTyp == typ {
			ids = append(ids, id)
			sizes = append(sizes, size)
		}
	}
	return ids, sizes
}

// streamSetup serves Feed and dials it, both traced.
func streamSetup(t *testing.T) (*telemetry, *kiev.Client) {
	tel := newTelemetry(t)
	_, addr := serve(t, Feed{}, kiev.WithServerInterceptor(otelkiev.ServerInterceptor(tel.opts()...)))
	c := dial(t, addr, kiev.WithStreamInterceptor(otelkiev.StreamInterceptor(tel.opts()...)))
	return tel, c
}

// A stream is one span on each side, the server's the child of the
// client's, from the open to the end, with an event for each message,
// its id and size; the server's says which kind of stream it is.
func TestStreamSpansHaveMessageEvents(t *testing.T) {
	tel, c := streamSetup(t)
	ctx, root := tel.tp.Tracer("test").Start(context.Background(), "A")
	s, err := c.Stream(ctx, "Feed.Watch", 3)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for err == nil {
		err = s.Recv(ctx, new(Event))
	}
	if err != io.EOF {
		t.Fatal(err)
	}
	root.End()

	a := tel.span(t, "A", trace.SpanKindInternal)
	client := tel.span(t, "Feed/Watch", trace.SpanKindClient)
	server := tel.span(t, "Feed/Watch", trace.SpanKindServer)
	if client.Parent.SpanID() != a.SpanContext.SpanID() || server.Parent.SpanID() != client.SpanContext.SpanID() || !server.Parent.IsRemote() {
		t.Errorf("the client span's parent is %s, the server's %s; want A's, %s, then the client's, %s",
			client.Parent.SpanID(), server.Parent.SpanID(), a.SpanContext.SpanID(), client.SpanContext.SpanID())
	}
	wantAttrs(t, client, map[attribute.Key]string{"rpc.system": "kiev", "rpc.service": "Feed", "rpc.method": "Watch",
		"server.address": "127.0.0.1", "rpc.kiev.code": "OK"})
	wantAttrs(t, server, map[attribute.Key]string{"rpc.system": "kiev", "rpc.service": "Feed", "rpc.method": "Watch",
		"rpc.kiev.code": "OK", "kiev.stream": "server stream"})
	in, inSizes := messages(t, client, "RECEIVED")
	out, outSizes := messages(t, server, "SENT")
	if !slices.Equal(in, []int64{1, 2, 3}) || !slices.Equal(out, []int64{1, 2, 3}) || !slices.Equal(inSizes, outSizes) || inSizes[0] <= 0 {
		t.Errorf("the client received %v (sizes %v), the server sent %v (sizes %v); want messages 1 to 3, of the same sizes", in, inSizes, out, outSizes)
	}
	if sent, _ := messages(t, client, "SENT"); len(sent) != 0 {
		t.Errorf("the client span shows %d messages sent; want none", len(sent))
	}
	for _, sp := range []tracetest.SpanStub{client, server} {
		if sp.Status.Code != codes.Unset {
			t.Errorf("%v span: status %v; want unset", sp.SpanKind, sp.Status)
		}
	}
}

// A client stream's messages are events each way: the client's sent,
// the server's received, and the reply received by the client.
func TestClientStreamSpans(t *testing.T) {
	tel, c := streamSetup(t)
	ctx := context.Background()
	s, err := c.Stream(ctx, "Feed.Upload", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, b := range []string{"ab", "cde"} {
		if err := s.Send(ctx, []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	s.CloseSend()
	var total int
	if err := s.Recv(ctx, &total); err != nil || total != 5 {
		t.Fatalf("Upload = %d, %v", total, err)
	}
	if err := s.Recv(ctx, &total); err != io.EOF {
		t.Fatalf("after the reply, Recv = %v; want io.EOF", err)
	}
	client := tel.span(t, "Feed/Upload", trace.SpanKindClient)
	server := tel.span(t, "Feed/Upload", trace.SpanKindServer)
	sent, _ := messages(t, client, "SENT")
	reply, _ := messages(t, client, "RECEIVED")
	received, _ := messages(t, server, "RECEIVED")
	if !slices.Equal(sent, []int64{1, 2}) || !slices.Equal(reply, []int64{1}) || !slices.Equal(received, []int64{1, 2}) {
		t.Errorf("the client sent %v and received %v, the server received %v; want 2 sent and received, and the reply", sent, reply, received)
	}
	wantAttrs(t, server, map[attribute.Key]string{"kiev.stream": "client stream", "rpc.kiev.code": "OK"})
}

// A failed stream's spans are errors; one the client closed first is
// Canceled, which is no error of the client's.
func TestStreamSpanStatus(t *testing.T) {
	tel, c := streamSetup(t)
	ctx := context.Background()
	s, err := c.Stream(ctx, "Feed.Fail", 2)
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		err = s.Recv(ctx, new(Event))
	}
	s.Close()
	client := tel.span(t, "Feed/Fail", trace.SpanKindClient)
	server := tel.span(t, "Feed/Fail", trace.SpanKindServer)
	for _, sp := range []tracetest.SpanStub{client, server} {
		if sp.Status.Code != codes.Error || sp.Status.Description != "failed after 2" || attrs(sp)["rpc.kiev.code"] != "503" {
			t.Errorf("%v span of a failed stream: status %v, code %s; want Error with the handler's error, 503", sp.SpanKind, sp.Status, attrs(sp)["rpc.kiev.code"])
		}
	}
	if in, _ := messages(t, client, "RECEIVED"); len(in) != 2 {
		t.Errorf("the client span shows %d messages before the failure; want 2", len(in))
	}

	s, err = c.Stream(ctx, "Feed.Watch", 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Recv(ctx, new(Event)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	closed := tel.span(t, "Feed/Watch", trace.SpanKindClient)
	if closed.Status.Code != codes.Unset || attrs(closed)["rpc.kiev.code"] != "Canceled" {
		t.Errorf("the span of a stream closed first: status %v, code %s; want unset, Canceled", closed.Status, attrs(closed)["rpc.kiev.code"])
	}
	// The server's span ends once its handler has seen the cancel.
	for deadline := time.Now().Add(5 * time.Second); ; {
		n := 0
		for _, sp := range tel.spans.GetSpans() {
			if sp.Name == "Feed/Watch" && sp.SpanKind == trace.SpanKindServer {
				n++
			}
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server span of a canceled stream did not end")
		}
		time.Sleep(5 * time.Millisecond) // polling the exporter
	}
	if server := tel.span(t, "Feed/Watch", trace.SpanKindServer); server.Status.Code != codes.Unset {
		t.Errorf("the server span of a stream its client canceled: status %v; want unset", server.Status)
	}
}

// The durations of streams are not recorded as calls' durations.
func TestStreamsRecordNoCallDuration(t *testing.T) {
	tel, c := streamSetup(t)
	ctx := context.Background()
	s, err := c.Stream(ctx, "Feed.Watch", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for err == nil {
		err = s.Recv(ctx, new(Event))
	}
	var rm metricdata.ResourceMetrics
	if err := tel.metrics.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && len(h.DataPoints) > 0 {
				t.Errorf("a stream recorded %s", m.Name)
			}
		}
	}
}

package kiev_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
)

type Query struct{ From, To int }
type Event struct {
	N    int
	Text string
}
type Chunk struct{ Data []byte }
type Sum struct {
	Chunks, Bytes int
}

// Feed is a service with one method of each kind of stream.
type Feed struct {
	opened chan struct{} // if not nil, Watch signals it once it runs
}

func (f *Feed) Watch(ctx context.Context, q Query, out kiev.Out[Event]) error {
	if f.opened != nil {
		f.opened <- struct{}{}
	}
	for i := q.From; i < q.To; i++ {
		if err := out.Send(ctx, Event{N: i, Text: strings.Repeat("x", i%7)}); err != nil {
			return err
		}
	}
	return nil
}

func (f *Feed) Upload(ctx context.Context, in kiev.In[Chunk], sum *Sum) error {
	for c, err := range in.All(ctx) {
		if err != nil {
			return err
		}
		sum.Chunks++
		sum.Bytes += len(c.Data)
	}
	return nil
}

func (f *Feed) Chat(ctx context.Context, in kiev.In[Event], out kiev.Out[Event]) error {
	for e, err := range in.All(ctx) {
		if err != nil {
			return err
		}
		e.Text = "re: " + e.Text
		if err := out.Send(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

func (f *Feed) Fail(ctx context.Context, q Query, out kiev.Out[Event]) error {
	for i := range q.From {
		if err := out.Send(ctx, Event{N: i}); err != nil {
			return err
		}
	}
	return kiev.Errorf(123, "failed after %d", q.From)
}

func startFeed(t *testing.T, f *Feed, opts ...kiev.ServerOption) (*kiev.Server, *kiev.Client) {
	t.Helper()
	srv := kiev.NewServer(opts...)
	if err := srv.Register(f); err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, srv)
	c, err := kiev.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return srv, c
}

func TestServerStreamDeliversEveryMessageInOrderThenEOF(t *testing.T) {
	_, c := startFeed(t, &Feed{})
	ctx := context.Background()
	s, err := c.Stream(ctx, "Feed.Watch", Query{From: 0, To: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < 1000; i++ {
		var e Event
		if err := s.Recv(ctx, &e); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if e.N != i || e.Text != strings.Repeat("x", i%7) {
			t.Fatalf("message %d is %+v", i, e)
		}
	}
	var e Event
	if err := s.Recv(ctx, &e); err != io.EOF {
		t.Fatalf("after the last message Recv = %v, want io.EOF", err)
	}
	if err := s.Recv(ctx, &e); err != io.EOF {
		t.Fatalf("Recv after io.EOF = %v, want io.EOF again", err)
	}
}

func TestClientStreamRepliesOnceAfterCloseSend(t *testing.T) {
	_, c := startFeed(t, &Feed{})
	ctx := context.Background()
	s, err := c.Stream(ctx, "Feed.Upload", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	total := 0
	for i := range 300 {
		data := make([]byte, i*37)
		total += len(data)
		if err := s.Send(ctx, Chunk{Data: data}); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var sum Sum
	if err := s.Recv(ctx, &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Chunks != 300 || sum.Bytes != total {
		t.Fatalf("reply %+v, want 300 chunks of %d bytes", sum, total)
	}
	if err := s.Recv(ctx, &sum); err != io.EOF {
		t.Fatalf("Recv after the reply = %v, want io.EOF", err)
	}
}

func TestBidiStreamEchoesWhileTheClientSends(t *testing.T) {
	_, c := startFeed(t, &Feed{})
	ctx := context.Background()
	s, err := c.Stream(ctx, "Feed.Chat", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 50 {
		if err := s.Send(ctx, Event{N: i, Text: "hi"}); err != nil {
			t.Fatal(err)
		}
		var e Event
		if err := s.Recv(ctx, &e); err != nil {
			t.Fatal(err)
		}
		if e.N != i || e.Text != "re: hi" {
			t.Fatalf("echo %d is %+v", i, e)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var e Event
	if err := s.Recv(ctx, &e); err != io.EOF {
		t.Fatalf("Recv after CloseSend = %v, want io.EOF", err)
	}
}

func TestStreamErrorArrivesAfterTheMessagesSentBeforeIt(t *testing.T) {
	_, c := startFeed(t, &Feed{})
	ctx := context.Background()
	s, err := c.Stream(ctx, "Feed.Fail", Query{From: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 5 {
		var e Event
		if err := s.Recv(ctx, &e); err != nil || e.N != i {
			t.Fatalf("message %d: %+v, %v", i, e, err)
		}
	}
	var e Event
	err = s.Recv(ctx, &e)
	var se *kiev.ServerError
	if !errors.As(err, &se) || se.Code != 123 || !strings.Contains(se.Message, "failed after 5") {
		t.Fatalf("Recv = %v, want the handler's error with code 123", err)
	}
}

func TestStreamOnAUnaryMethodSaysToCall(t *testing.T) {
	srv := kiev.NewServer()
	if err := srv.Register(new(Arith)); err != nil {
		t.Fatal(err)
	}
	c, err := kiev.Dial(startServer(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.Stream(ctx, "Arith.Add", Args{1, 2})
	if err == nil || !strings.Contains(err.Error(), "not a stream method") {
		t.Fatalf("Stream on a unary method = %v, want an error that says it is not a stream method", err)
	}
}

func TestCallOnAStreamMethodSaysToStream(t *testing.T) {
	_, c := startFeed(t, &Feed{})
	err := c.Call(context.Background(), "Feed.Watch", Query{}, new(Event))
	if err == nil || !strings.Contains(err.Error(), "open it with Client.Stream") {
		t.Fatalf("Call on a stream method = %v, want an error that says to open it with Client.Stream", err)
	}
}

// WatchPtr is Watch with its args by pointer.
func (f *Feed) WatchPtr(ctx context.Context, q *Query, out kiev.Out[Event]) error {
	return f.Watch(ctx, *q, out)
}

func TestServerStreamWithArgsByPointer(t *testing.T) {
	_, c := startFeed(t, &Feed{})
	ctx := context.Background()
	s, err := c.Stream(ctx, "Feed.WatchPtr", &Query{From: 3, To: 6})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 3; i < 6; i++ {
		var e Event
		if err := s.Recv(ctx, &e); err != nil || e.N != i {
			t.Fatalf("message %d: %+v, %v", i, e, err)
		}
	}
	if err := s.Recv(ctx, new(Event)); err != io.EOF {
		t.Fatalf("Recv at the end = %v, want io.EOF", err)
	}
}

// Mirror echoes every chunk it receives.
type Mirror struct{}

func (Mirror) Echo(ctx context.Context, in kiev.In[Chunk], out kiev.Out[Chunk]) error {
	for c, err := range in.All(ctx) {
		if err != nil {
			return err
		}
		if err := out.Send(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// TestMessagesOfEverySizeArriveByteForByte sends messages each way that
// the writer copies (small chunks) and writes from their buffers (large
// ones), whole and split in chunks, several in flight at once.
func TestMessagesOfEverySizeArriveByteForByte(t *testing.T) {
	srv := kiev.NewServer()
	if err := srv.Register(Mirror{}); err != nil {
		t.Fatal(err)
	}
	c := dial(t, startServer(t, srv))
	ctx := within(t, 20*time.Second)
	s, err := c.Stream(ctx, "Mirror.Echo", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sizes := []int{0, 1, 1023, 4095, 4096, 16 << 10, 32<<10 - 1, 32 << 10, 32<<10 + 7, 100 << 10, 1<<20 + 3}
	chunk := func(i int) Chunk {
		b := make([]byte, sizes[i%len(sizes)])
		for j := range b {
			b[j] = byte(i*31 + j*7 + j>>8)
		}
		return Chunk{Data: b}
	}
	const n = 3 * 11
	sent := make(chan error, 1)
	go func() {
		for i := range n {
			if err := s.Send(ctx, chunk(i)); err != nil {
				sent <- err
				return
			}
		}
		sent <- s.CloseSend()
	}()
	for i := range n {
		var got Chunk
		if err := s.Recv(ctx, &got); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if want := chunk(i); !bytes.Equal(got.Data, want.Data) {
			t.Fatalf("message %d: %d bytes came, not the %d bytes sent", i, len(got.Data), len(want.Data))
		}
	}
	if err := s.Recv(ctx, new(Chunk)); err != io.EOF {
		t.Fatalf("Recv at the end = %v, want io.EOF", err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

package kiev_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"

	"github.com/kievrpc/kiev"
)

// streamRecord is what a test interceptor saw of one stream.
type streamRecord struct {
	mu     sync.Mutex
	kind   kiev.StreamKind
	events []kiev.MessageEvent
	err    error
}

func (r *streamRecord) add(ev kiev.MessageEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

// seqs returns the Seq of the events sent or received, in order.
func (r *streamRecord) seqs(sent bool) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int64
	for _, ev := range r.events {
		if ev.Sent == sent {
			if ev.Size <= 0 || ev.Msg == nil {
				return []int64{-1} // a message without its size or value
			}
			out = append(out, ev.Seq)
		}
	}
	return out
}

// A server interceptor runs around the whole stream: it can refuse the
// stream before its handler runs, as TokenAuth does, and a client with
// WithToken passes it.
func TestServerInterceptorRefusesAStreamBeforeItRuns(t *testing.T) {
	f := &Feed{opened: make(chan struct{}, 1)}
	auth := kiev.TokenAuth(func(ctx context.Context, token string) error {
		if token != "secret" {
			return errors.New("bad token")
		}
		return nil
	})
	srv := kiev.NewServer(kiev.WithServerInterceptor(auth))
	if err := srv.Register(f); err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, srv)
	c := dial(t, addr)
	ctx := context.Background()
	s, err := c.Stream(ctx, "Feed.Watch", Query{From: 0, To: 3})
	if err == nil {
		defer s.Close()
		var e Event
		err = s.Recv(ctx, &e)
	}
	if !errors.Is(err, kiev.ErrUnauthenticated) {
		t.Fatalf("a stream without the token: %v; want ErrUnauthenticated", err)
	}
	select {
	case <-f.opened:
		t.Fatal("the handler of a refused stream ran")
	default:
	}

	c2 := dial(t, addr, kiev.WithToken("secret"))
	s, err = c2.Stream(ctx, "Feed.Watch", Query{From: 0, To: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	<-f.opened
	n := 0
	for {
		var e Event
		if err := s.Recv(ctx, &e); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("with the token: %v", err)
		}
		n++
	}
	if n != 3 {
		t.Errorf("with the token, %d messages; want 3", n)
	}
}

// A server interceptor sees which kind of stream runs, its messages each
// way (Request.OnMessage), and its end: next returns when the handler
// has, before the client sees the end.
func TestServerInterceptorSeesAStreamsMessagesAndEnd(t *testing.T) {
	var mu sync.Mutex
	records := map[string]*streamRecord{}
	ic := func(next kiev.Handler) kiev.Handler {
		return func(ctx context.Context, req *kiev.Request) error {
			r := &streamRecord{kind: req.Stream}
			req.OnMessage(r.add)
			err := next(ctx, req)
			r.mu.Lock()
			r.err = err
			r.mu.Unlock()
			mu.Lock()
			records[req.ServiceMethod] = r
			mu.Unlock()
			return err
		}
	}
	_, c := startFeed(t, &Feed{}, kiev.WithServerInterceptor(ic))
	ctx := context.Background()

	s, err := c.Stream(ctx, "Feed.Chat", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 3 {
		if err := s.Send(ctx, Event{N: i}); err != nil {
			t.Fatal(err)
		}
		var e Event
		if err := s.Recv(ctx, &e); err != nil {
			t.Fatal(err)
		}
	}
	s.CloseSend()
	if err := s.Recv(ctx, new(Event)); err != io.EOF {
		t.Fatalf("after CloseSend, Recv = %v; want io.EOF", err)
	}
	f, err := c.Stream(ctx, "Feed.Fail", Query{From: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for err == nil {
		err = f.Recv(ctx, new(Event))
	}

	mu.Lock()
	chat, fail := records["Feed.Chat"], records["Feed.Fail"]
	mu.Unlock()
	if chat == nil || fail == nil {
		t.Fatalf("the interceptor saw no end of Chat (%v) or Fail (%v)", chat, fail)
	}
	if chat.kind != kiev.BidiStream || chat.err != nil {
		t.Errorf("Chat: kind %v, ended with %v; want a bidirectional stream, ended well", chat.kind, chat.err)
	}
	if in, out := chat.seqs(false), chat.seqs(true); !slices.Equal(in, []int64{1, 2, 3}) || !slices.Equal(out, []int64{1, 2, 3}) {
		t.Errorf("Chat's messages in %v, out %v; want 1 to 3 each way, with their sizes and values", in, out)
	}
	if ev := chat.events[0]; ev.Sent || ev.Msg.(*Event).N != 0 {
		t.Errorf("Chat's first message is %+v; want the client's first event, received", ev)
	}
	if fail.kind != kiev.ServerStream || codeIn(fail.err) != 123 || !slices.Equal(fail.seqs(true), []int64{1, 2}) {
		t.Errorf("Fail: kind %v, %d messages out, ended with %v; want a server stream, 2 messages, code 123", fail.kind, len(fail.seqs(true)), fail.err)
	}
}

// codeIn returns the code of err's *kiev.ServerError, or CodeOK if none.
func codeIn(err error) kiev.Code {
	var se *kiev.ServerError
	if errors.As(err, &se) {
		return se.Code
	}
	return kiev.CodeOK
}

// clientObserver is a stream interceptor that records what it sees of
// each stream, and the ends, in order.
type clientObserver struct {
	mu      sync.Mutex
	descs   []kiev.StreamDesc
	streams []*streamRecord
	ends    chan error
}

func (o *clientObserver) intercept(next kiev.StreamOpener) kiev.StreamOpener {
	return func(ctx context.Context, desc *kiev.StreamDesc) (*kiev.Stream, error) {
		r := &streamRecord{}
		desc.OnMessage(r.add)
		desc.OnEnd(func(err error) { o.ends <- err })
		o.mu.Lock()
		o.descs = append(o.descs, kiev.StreamDesc{ServiceMethod: desc.ServiceMethod, Args: desc.Args, Target: desc.Target})
		o.streams = append(o.streams, r)
		o.mu.Unlock()
		return next(kiev.WithMetadata(ctx, "seen-by", "observer"), desc)
	}
}

func (o *clientObserver) last() (kiev.StreamDesc, *streamRecord) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.descs[len(o.descs)-1], o.streams[len(o.streams)-1]
}

// end returns the one end the stream reported, after which no other
// comes.
func (o *clientObserver) end(t *testing.T) error {
	t.Helper()
	err := <-o.ends
	if len(o.ends) > 0 {
		t.Errorf("the stream ended twice: %v, then %v", err, <-o.ends)
	}
	return err
}

// A client's stream interceptors wrap each open, in order, may add
// metadata, and see each message and the stream's one end, however it
// ends.
func TestStreamInterceptorSeesEachStreamsMessagesAndEnd(t *testing.T) {
	seen := make(chan string, 10)
	srvIC := func(next kiev.Handler) kiev.Handler {
		return func(ctx context.Context, req *kiev.Request) error {
			seen <- req.Metadata.Get("seen-by")
			return next(ctx, req)
		}
	}
	srv := kiev.NewServer(kiev.WithServerInterceptor(srvIC))
	if err := srv.Register(&Feed{}); err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, srv)
	o := &clientObserver{ends: make(chan error, 10)}
	var order []string
	outer := func(next kiev.StreamOpener) kiev.StreamOpener {
		return func(ctx context.Context, desc *kiev.StreamDesc) (*kiev.Stream, error) {
			order = append(order, "outer")
			return next(ctx, desc)
		}
	}
	c := dial(t, addr, kiev.WithStreamInterceptor(outer, func(next kiev.StreamOpener) kiev.StreamOpener {
		return func(ctx context.Context, desc *kiev.StreamDesc) (*kiev.Stream, error) {
			order = append(order, "inner")
			return o.intercept(next)(ctx, desc)
		}
	}))
	ctx := context.Background()

	t.Run("to its end", func(t *testing.T) {
		s, err := c.Stream(ctx, "Feed.Watch", Query{From: 0, To: 5})
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
		if err := o.end(t); err != nil {
			t.Errorf("a stream read to io.EOF ended with %v; want nil", err)
		}
		desc, r := o.last()
		if desc.ServiceMethod != "Feed.Watch" || desc.Args != (Query{From: 0, To: 5}) || desc.Target != addr {
			t.Errorf("the interceptor saw %+v", desc)
		}
		if in, out := r.seqs(false), r.seqs(true); !slices.Equal(in, []int64{1, 2, 3, 4, 5}) || len(out) != 0 {
			t.Errorf("messages in %v, out %v; want 5 in", in, out)
		}
		if !slices.Equal(order, []string{"outer", "inner"}) || <-seen != "observer" {
			t.Errorf("interceptors ran %v, or the metadata did not reach the server", order)
		}
	})
	t.Run("a client stream's reply", func(t *testing.T) {
		s, err := c.Stream(ctx, "Feed.Upload", nil)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := s.Send(ctx, Chunk{Data: []byte("ab")}); err != nil {
				t.Fatal(err)
			}
		}
		s.CloseSend()
		var sum Sum
		if err := s.Recv(ctx, &sum); err != nil || sum.Chunks != 2 {
			t.Fatalf("Upload: %+v, %v", sum, err)
		}
		s.Close() // after the reply: the stream had ended well
		if err := o.end(t); err != nil {
			t.Errorf("a client stream closed after its reply ended with %v; want nil", err)
		}
		_, r := o.last()
		if in, out := r.seqs(false), r.seqs(true); !slices.Equal(in, []int64{1}) || !slices.Equal(out, []int64{1, 2}) {
			t.Errorf("messages in %v, out %v; want 2 out and the reply in", in, out)
		}
		<-seen
	})
	t.Run("its context ended after the reply", func(t *testing.T) {
		sctx, cancel := context.WithCancel(ctx)
		s, err := c.Stream(sctx, "Feed.Upload", nil)
		if err != nil {
			t.Fatal(err)
		}
		s.CloseSend()
		var sum Sum
		if err := s.Recv(ctx, &sum); err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := o.end(t); err != nil {
			t.Errorf("a client stream whose context ended after its reply ended with %v; want nil", err)
		}
		<-seen
	})
	t.Run("failed", func(t *testing.T) {
		s, err := c.Stream(ctx, "Feed.Fail", Query{From: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for err == nil {
			err = s.Recv(ctx, new(Event))
		}
		if end := o.end(t); codeIn(end) != 123 || end.Error() != err.Error() {
			t.Errorf("a failed stream ended with %v; want Recv's error, %v", end, err)
		}
		<-seen
	})
	t.Run("closed first", func(t *testing.T) {
		s, err := c.Stream(ctx, "Feed.Watch", Query{From: 0, To: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Recv(ctx, new(Event)); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if err := o.end(t); !errors.Is(err, context.Canceled) {
			t.Errorf("a stream closed before its end ended with %v; want context.Canceled", err)
		}
		<-seen
	})
	t.Run("its context ended", func(t *testing.T) {
		sctx, cancel := context.WithCancel(ctx)
		s, err := c.Stream(sctx, "Feed.Watch", Query{From: 0, To: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		cancel()
		if err := o.end(t); !errors.Is(err, context.Canceled) {
			t.Errorf("a stream whose context ended ended with %v; want context.Canceled", err)
		}
		<-seen
	})
}

// A stream interceptor may refuse a stream: the open fails with its
// error, nothing reaches the server, and no end is reported.
func TestStreamInterceptorRefusesAStream(t *testing.T) {
	f := &Feed{opened: make(chan struct{}, 1)}
	srv := kiev.NewServer()
	if err := srv.Register(f); err != nil {
		t.Fatal(err)
	}
	refused := errors.New("not today")
	o := &clientObserver{ends: make(chan error, 1)}
	c := dial(t, startServer(t, srv), kiev.WithStreamInterceptor(func(next kiev.StreamOpener) kiev.StreamOpener {
		return func(ctx context.Context, desc *kiev.StreamDesc) (*kiev.Stream, error) {
			desc.OnEnd(func(err error) { o.ends <- err })
			return nil, refused
		}
	}))
	if s, err := c.Stream(context.Background(), "Feed.Watch", Query{To: 1}); err != refused || s != nil {
		t.Fatalf("Stream = %v, %v; want the interceptor's error", s, err)
	}
	select {
	case <-f.opened:
		t.Error("the handler of a stream refused by the client ran")
	case err := <-o.ends:
		t.Errorf("a stream never opened reported its end, %v", err)
	default:
	}
}

package kiev

import (
	"context"
	"io"
	"iter"
)

// Typed streams, built from a method expression as MethodOf builds a
// typed call: the compiler checks the message types against the method,
// and the name comes from the method.
//
//	watch, err := kiev.ServerStreamOf(c, (*Feed).Watch) // Query in, Events out
//	s, err := watch.Open(ctx, Query{From: 1})
//	for ev, err := range s.All(ctx) { ... }

// ServerStreamMethod opens streams of one server stream method, which
// takes args A and sends messages M.
type ServerStreamMethod[A, M any] struct {
	c    *Client
	name string
}

// ServerStreamOf returns the ServerStreamMethod of method, a method
// expression such as (*Feed).Watch of
//
//	func (f *Feed) Watch(ctx context.Context, q Query, out kiev.Out[Event]) error
//
// WithServiceName names a service registered under another name.
func ServerStreamOf[T, A, M any](c *Client, method func(T, context.Context, A, Out[M]) error, opts ...MethodOption) (*ServerStreamMethod[A, M], error) {
	name, err := methodName[T]("ServerStreamOf", method, opts)
	if err != nil {
		return nil, err
	}
	return &ServerStreamMethod[A, M]{c: c, name: name}, nil
}

// String returns the "Service.Method" name m opens.
func (m *ServerStreamMethod[A, M]) String() string { return m.name }

// Open opens a stream with args, as Client.Stream does.
func (m *ServerStreamMethod[A, M]) Open(ctx context.Context, args A) (*RecvStream[M], error) {
	s, err := m.c.Stream(ctx, m.name, args)
	if err != nil {
		return nil, err
	}
	return &RecvStream[M]{StreamOf[struct{}, M]{s}}, nil
}

// RecvStream is a server stream's Stream: it receives messages of type
// M. Its rules are Stream's.
type RecvStream[M any] struct{ t StreamOf[struct{}, M] }

// Recv returns the next message, as Stream.Recv does: io.EOF at the end.
func (r *RecvStream[M]) Recv(ctx context.Context) (M, error) { return r.t.Recv(ctx) }

// All returns the messages for a range loop, until io.EOF, which ends
// the loop without an error, or another error, the loop's last value.
func (r *RecvStream[M]) All(ctx context.Context) iter.Seq2[M, error] { return r.t.All(ctx) }

// Close ends the stream, as Stream.Close does.
func (r *RecvStream[M]) Close() error { return r.t.Close() }

// Stream is the untyped stream underneath.
func (r *RecvStream[M]) Stream() *Stream { return r.t.s }

// ClientStreamMethod opens streams of one client stream method, which
// takes messages M and replies R.
type ClientStreamMethod[M, R any] struct {
	c    *Client
	name string
}

// ClientStreamOf returns the ClientStreamMethod of method, a method
// expression such as (*Feed).Upload of
//
//	func (f *Feed) Upload(ctx context.Context, in kiev.In[Chunk], sum *Sum) error
func ClientStreamOf[T, M, R any](c *Client, method func(T, context.Context, In[M], *R) error, opts ...MethodOption) (*ClientStreamMethod[M, R], error) {
	name, err := methodName[T]("ClientStreamOf", method, opts)
	if err != nil {
		return nil, err
	}
	return &ClientStreamMethod[M, R]{c: c, name: name}, nil
}

// String returns the "Service.Method" name m opens.
func (m *ClientStreamMethod[M, R]) String() string { return m.name }

// Open opens a stream, as Client.Stream does.
func (m *ClientStreamMethod[M, R]) Open(ctx context.Context) (*SendStream[M, R], error) {
	s, err := m.c.Stream(ctx, m.name, nil)
	if err != nil {
		return nil, err
	}
	return &SendStream[M, R]{s}, nil
}

// BidiStreamMethod opens streams of one bidirectional stream method,
// which takes messages M and sends messages N.
type BidiStreamMethod[M, N any] struct {
	c    *Client
	name string
}

// BidiStreamOf returns the BidiStreamMethod of method, a method
// expression such as (*Feed).Chat of
//
//	func (f *Feed) Chat(ctx context.Context, in kiev.In[Msg], out kiev.Out[Msg]) error
func BidiStreamOf[T, M, N any](c *Client, method func(T, context.Context, In[M], Out[N]) error, opts ...MethodOption) (*BidiStreamMethod[M, N], error) {
	name, err := methodName[T]("BidiStreamOf", method, opts)
	if err != nil {
		return nil, err
	}
	return &BidiStreamMethod[M, N]{c: c, name: name}, nil
}

// String returns the "Service.Method" name m opens.
func (m *BidiStreamMethod[M, N]) String() string { return m.name }

// Open opens a stream, as Client.Stream does.
func (m *BidiStreamMethod[M, N]) Open(ctx context.Context) (*StreamOf[M, N], error) {
	s, err := m.c.Stream(ctx, m.name, nil)
	if err != nil {
		return nil, err
	}
	return &StreamOf[M, N]{s}, nil
}

// StreamOf is a bidirectional stream's Stream: it sends messages of type
// S and receives messages of type R. Its rules are Stream's.
type StreamOf[S, R any] struct{ s *Stream }

// Send sends v, as Stream.Send does.
func (t *StreamOf[S, R]) Send(ctx context.Context, v S) error {
	return sendBoxed(ctx, &t.s.cs.sendBox, v, t.s.Send)
}

// Recv returns the next message, as Stream.Recv does: io.EOF at the end.
func (t *StreamOf[S, R]) Recv(ctx context.Context) (R, error) {
	return recvBoxed[R](ctx, &t.s.cs.recvBox, t.s.Recv)
}

// All returns the messages for a range loop, until io.EOF, which ends
// the loop without an error, or another error, the loop's last value.
func (t *StreamOf[S, R]) All(ctx context.Context) iter.Seq2[R, error] {
	return func(yield func(R, error) bool) {
		for {
			v, err := t.Recv(ctx)
			if err == io.EOF {
				return
			}
			if !yield(v, err) || err != nil {
				return
			}
		}
	}
}

// CloseSend ends the sending side, as Stream.CloseSend does.
func (t *StreamOf[S, R]) CloseSend() error { return t.s.CloseSend() }

// Close ends the stream, as Stream.Close does.
func (t *StreamOf[S, R]) Close() error { return t.s.Close() }

// Stream is the untyped stream underneath.
func (t *StreamOf[S, R]) Stream() *Stream { return t.s }

// SendStream is a client stream's Stream: it sends messages of type M, and
// gets one reply R.
type SendStream[M, R any] struct{ s *Stream }

// Send sends v, as Stream.Send does.
func (t *SendStream[M, R]) Send(ctx context.Context, v M) error {
	return sendBoxed(ctx, &t.s.cs.sendBox, v, t.s.Send)
}

// CloseAndRecv ends the sending side and returns the server's reply; the
// stream is then over.
func (t *SendStream[M, R]) CloseAndRecv(ctx context.Context) (R, error) {
	var r R
	if err := t.s.CloseSend(); err != nil {
		return r, err
	}
	if err := t.s.Recv(ctx, &r); err != nil {
		t.s.Close()
		return r, err
	}
	if err := t.s.Recv(ctx, new(R)); err != io.EOF {
		t.s.Close()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return r, err
	}
	return r, nil
}

// Close ends the stream, as Stream.Close does.
func (t *SendStream[M, R]) Close() error { return t.s.Close() }

// Stream is the untyped stream underneath.
func (t *SendStream[M, R]) Stream() *Stream { return t.s }

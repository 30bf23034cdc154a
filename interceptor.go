package kiev

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
)

// Request describes a call as the server runs it. Server interceptors
// receive it and may read every field; the final handler fills Args and
// Reply, so an interceptor sees them once next has returned.
type Request struct {
	// ServiceMethod is the "Service.Method" name the caller asked for.
	ServiceMethod string
	// ID is the call's id, unique on its connection.
	ID uint64
	// Peer is the caller's address.
	Peer net.Addr
	// Codec is the name of the codec the call came in.
	Codec string
	// Metadata is what the caller sent; nil if nothing.
	Metadata Metadata
	// TLS is the connection's TLS state (see WithTLS), with the client's
	// verified certificates under mutual TLS; nil without TLS.
	TLS *tls.ConnectionState
	// Args is a pointer to the decoded argument, set by the final handler
	// before the method runs. It is nil while interceptors run before next, so an
	// interceptor that refuses a call (for example, a failed auth check)
	// costs no decoding.
	Args any
	// Reply is the method's reply, set by the final handler. For a
	// stream, interceptors run around the whole stream: Args is a server
	// stream's args, Reply a client stream's reply, and the messages go
	// through the handler's In and Out.
	Reply any
	// Stream says whether the call is a stream, and which way.
	Stream StreamKind

	call  *serverCall
	hooks *streamHooks // OnMessage's
}

// OnMessage adds f to the functions called for each message of a
// stream, once the handler's Out has queued it or its In has decoded it,
// so that an interceptor can observe the messages it does not see pass.
// Call it before next; it does nothing for a unary call. f runs on the
// goroutine that sent or received the message, so a message sent and
// one received may be observed at once; it must not block, nor keep
// MessageEvent.Msg.
func (r *Request) OnMessage(f func(MessageEvent)) {
	r.hooks = r.hooks.withMessage(f)
}

// Handler runs one call on the server and returns the error the caller
// will see.
type Handler func(ctx context.Context, req *Request) error

// ServerInterceptor wraps the next step of a server call. It may act
// before and after calling next, change ctx, or return an error without
// calling next to refuse the call. Interceptors run on the call's own
// goroutine and may block only as long as the call may.
//
// Interceptors see every call, those of a method the server does not
// have too (req.ServiceMethod is the name the caller sent, and next
// answers ErrNotFound): so an authentication interceptor such as
// TokenAuth answers a caller without credentials the same whatever it
// asks for, and names cannot be probed.
//
// For a stream, an interceptor runs around the whole stream, on the
// goroutine of its handler: Request.Stream says which kind it is, one
// that returns without calling next refuses the stream before its
// handler runs, next returns once the handler has, and Request.OnMessage
// observes the messages.
type ServerInterceptor func(next Handler) Handler

// Invoker sends one call and waits for its outcome.
type Invoker func(ctx context.Context, call *Call) error

// ClientInterceptor wraps the next step of a client call, in the same way
// as ServerInterceptor. It runs on the caller's goroutine for Client.Call,
// and on a goroutine of its own for Client.Go.
type ClientInterceptor func(next Invoker) Invoker

// StreamDesc describes a stream as a client opens it, for its stream
// interceptors. They may change ServiceMethod and Args before calling
// next, and add hooks with OnMessage and OnEnd.
type StreamDesc struct {
	// ServiceMethod is the "Service.Method" name of the stream.
	ServiceMethod string
	// Args are a server stream's args; nil for client and bidirectional
	// streams.
	Args any
	// Target names the Client opening the stream, as Call.Target does.
	Target string

	hooks *streamHooks
}

// OnMessage adds f to the functions called for each message of the
// stream desc opens: once Send has queued it, and once Recv has decoded
// it (a client stream's reply included). Call it before next. f runs on
// the goroutine that called Send or Recv, so a message sent and one
// received may be observed at once; it must not block, nor keep
// MessageEvent.Msg, nor the *Stream (a Stream dropped unclosed is found
// by the garbage collector only if nothing keeps it).
func (d *StreamDesc) OnMessage(f func(MessageEvent)) {
	d.hooks = d.hooks.withMessage(f)
}

// OnEnd adds f to the functions called once the stream desc opens has
// ended, with the error it ended with: nil if the server ended it with
// success (Recv returned io.EOF, or a client stream's reply, whether
// Close or the end of its context came after), an error
// matching context.Canceled if Close ended it first, the error of the
// context it was opened with if that ended it first, one that says so
// for a stream dropped unclosed, else the error Recv returns. Call it
// before next. f is called only for a
// stream that opened (next returned no error), on whatever goroutine
// ended the stream, the garbage collector's for a stream dropped
// unclosed; it must not block.
func (d *StreamDesc) OnEnd(f func(err error)) {
	d.hooks = d.hooks.withEnd(f)
}

// StreamOpener opens one stream, as Client.Stream does.
type StreamOpener func(ctx context.Context, desc *StreamDesc) (*Stream, error)

// StreamInterceptor wraps the opening of a client's streams, as
// ClientInterceptor wraps its calls (see WithStreamInterceptor). It may
// act before and after calling next, change ctx (metadata added to it
// goes with the stream's open), refuse the stream by returning an error
// without calling next, and observe the stream's messages and end with
// desc's OnMessage and OnEnd. It runs on the goroutine of Client.Stream.
//
// A server needs no interceptor of its own for streams: its
// ServerInterceptors run around each whole stream, with Request.Stream
// saying which kind it is, and Request.OnMessage observes its messages.
type StreamInterceptor func(next StreamOpener) StreamOpener

// MessageEvent is one message of a stream, as the functions given to
// StreamDesc.OnMessage and Request.OnMessage see it.
type MessageEvent struct {
	// Sent is true for a message this side sent, false for one it
	// received.
	Sent bool
	// Seq numbers the stream's messages each way, from 1.
	Seq int64
	// Size is the message's encoded size in bytes.
	Size int
	// Msg is the message as the codec saw it: what was encoded, or what
	// it was decoded into. It is not to be kept or changed.
	Msg any
}

// streamHooks are the functions that observe a stream's messages and
// end. They are set before the stream opens and read-only after, so
// they need no lock; a nil *streamHooks has none.
type streamHooks struct {
	onMessage   []func(MessageEvent)
	onEnd       []func(error)
	sent, recvd atomic.Int64 // the messages each way, for MessageEvent.Seq
}

func (h *streamHooks) withMessage(f func(MessageEvent)) *streamHooks {
	if h == nil {
		h = new(streamHooks)
	}
	h.onMessage = append(h.onMessage, f)
	return h
}

func (h *streamHooks) withEnd(f func(error)) *streamHooks {
	if h == nil {
		h = new(streamHooks)
	}
	h.onEnd = append(h.onEnd, f)
	return h
}

// message calls the message hooks for a message of size bytes, sent or
// received.
func (h *streamHooks) message(sent bool, size int, msg any) {
	if h == nil || len(h.onMessage) == 0 {
		return
	}
	ev := MessageEvent{Sent: sent, Size: size, Msg: msg}
	if sent {
		ev.Seq = h.sent.Add(1)
	} else {
		ev.Seq = h.recvd.Add(1)
	}
	for _, f := range h.onMessage {
		f(ev)
	}
}

// end calls the end hooks with err.
func (h *streamHooks) end(err error) {
	if h == nil {
		return
	}
	for _, f := range h.onEnd {
		f(err)
	}
}

func chainStream(open StreamOpener, ics []StreamInterceptor) StreamOpener {
	for i := len(ics) - 1; i >= 0; i-- {
		open = ics[i](open)
	}
	return open
}

func chainServer(h Handler, ics []ServerInterceptor) Handler {
	for i := len(ics) - 1; i >= 0; i-- {
		h = ics[i](h)
	}
	return h
}

func chainClient(inv Invoker, ics []ClientInterceptor) Invoker {
	for i := len(ics) - 1; i >= 0; i-- {
		inv = ics[i](inv)
	}
	return inv
}

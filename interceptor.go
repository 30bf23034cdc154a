package kiev

import (
	"context"
	"crypto/tls"
	"net"
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

	call *serverCall
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
type ServerInterceptor func(next Handler) Handler

// Invoker sends one call and waits for its outcome.
type Invoker func(ctx context.Context, call *Call) error

// ClientInterceptor wraps the next step of a client call, in the same way
// as ServerInterceptor. It runs on the caller's goroutine for Client.Call,
// and on a goroutine of its own for Client.Go.
type ClientInterceptor func(next Invoker) Invoker

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

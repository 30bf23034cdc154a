package kiev

import (
	"context"
	"errors"
	"fmt"

	"github.com/kievrpc/kiev/internal/codes"
	"github.com/kievrpc/kiev/internal/transport"
	"github.com/kievrpc/kiev/shed"
)

// Errors returned by kiev. Match them with errors.Is: calls wrap them with
// the method name and the cause.
var (
	// ErrServerClosed is returned by Serve and ListenAndServe after a call
	// to Server.Shutdown or Server.Close.
	ErrServerClosed = transport.ErrServerClosed

	// ErrShutdown means the connection or the server is going away: the
	// client was closed, the connection broke, or the server is draining.
	// The call may be retried on a new connection or another server.
	ErrShutdown = transport.ErrShutdown

	// ErrNotFound means the server has no such service or method. Check the
	// "Service.Method" name; method names are exported Go method names.
	ErrNotFound = errors.New("kiev: service or method not found")

	// ErrUnavailable means the client could not connect to the server. It
	// wraps the dial error; the client redials with backoff on later calls.
	ErrUnavailable = errors.New("kiev: server unavailable")

	// ErrTooLarge means a message does not fit the maximum frame size, or
	// over UDP, one datagram.
	// Send less, or raise the limit with WithMaxFrameSize on both sides.
	ErrTooLarge = transport.ErrTooLarge

	// ErrBadRequest means the server could not decode the call's
	// arguments, or does not know the codec it was sent in.
	ErrBadRequest = transport.ErrBadRequest

	// ErrOverloaded means the server refused the call without running it:
	// its queue was full, a more important call took the call's place, or
	// the call waited too long. It comes at once, so the caller can try
	// another server instead of waiting for a timeout. See package shed.
	ErrOverloaded = errors.New("kiev: server overloaded")

	// ErrLimited means the server refused the call at its method's
	// adaptive limit: that method's service time rose (its dependency is
	// likely slow), and its calls that could not start in time are
	// refused, while the server's other methods are not held. An error
	// that is ErrLimited is ErrOverloaded too. A client throttles the
	// method alone for it, and keeps the server in balancing.
	ErrLimited = errors.New("kiev: method at its adaptive limit")

	// ErrInternal means the handler panicked or its reply could not be
	// encoded. The server logged the details.
	ErrInternal = errors.New("kiev: internal server error")

	// ErrAnswered means a UDP server answered the call already and no
	// longer keeps its reply: the client lost the reply, and every
	// retransmission for longer than the server's Packet.DedupLinger. The
	// call ran, at most once; it is not run again, nor retried.
	ErrAnswered = errors.New("kiev: call answered already, its reply no longer kept")
)

// Code classifies a failed call on the wire. Codes below 100 are kiev's;
// a handler may return a *ServerError with its own code of 100 or more,
// which reaches the caller unchanged. Its String method returns the name
// of one of kiev's codes, such as "NotFound", or the number of any other
// code, such as "404", so that a handler's own code prints as the handler
// wrote it: in errors, logs, the HTTP front's Kiev-Error-Code header and
// the kiev command. It is the one code type of every layer of kiev.
type Code = codes.Code

// Codes kiev puts on the wire. Values are part of the protocol.
const (
	CodeOK               = codes.OK
	CodeApplication      = codes.Application      // the handler returned an error
	CodeNotFound         = codes.NotFound         // unknown service or method
	CodeShutdown         = codes.Shutdown         // the server is draining or closing
	CodeDeadlineExceeded = codes.DeadlineExceeded // the call's deadline passed on the server
	CodeCanceled         = codes.Canceled         // the call was canceled
	CodeBadRequest       = codes.BadRequest       // undecodable args or unknown codec
	CodeInternal         = codes.Internal         // handler panic or unencodable reply
	CodeOverloaded       = codes.Overloaded       // shed by the server's scheduler without running
	CodeTooLarge         = codes.TooLarge         // the reply does not fit a frame or datagram
	CodeUnauthenticated  = codes.Unauthenticated  // the call's credentials were refused
	CodeAnswered         = codes.Answered         // over UDP: answered already, its reply no longer kept; not run again
)

// numCodes is the number of codes kiev defines.
const numCodes = codes.Count

// ServerError is a failure reported by the server: the error a handler
// returned, with its text unchanged, or a framework failure such as an
// unknown method. errors.Is matches it against ErrNotFound, ErrShutdown,
// ErrOverloaded, ErrBadRequest, ErrInternal, ErrTooLarge,
// ErrUnauthenticated, ErrAnswered, context.DeadlineExceeded and
// context.Canceled according to its Code.
type ServerError struct {
	Code    Code
	Message string
}

// Error returns the message as the server sent it.
func (e *ServerError) Error() string { return e.Message }

// limitedError is an Overloaded ServerError that the server refused at
// the method's adaptive limit (the wire's Limited field).
type limitedError struct{ *ServerError }

func (e *limitedError) Is(target error) bool { return target == ErrLimited }
func (e *limitedError) Unwrap() error        { return e.ServerError }

// Is reports whether the error's code corresponds to target.
func (e *ServerError) Is(target error) bool {
	switch e.Code {
	case CodeNotFound:
		return target == ErrNotFound
	case CodeShutdown:
		return target == ErrShutdown
	case CodeDeadlineExceeded:
		return target == context.DeadlineExceeded
	case CodeCanceled:
		return target == context.Canceled
	case CodeBadRequest:
		return target == ErrBadRequest
	case CodeInternal:
		return target == ErrInternal
	case CodeOverloaded:
		return target == ErrOverloaded
	case CodeTooLarge:
		return target == ErrTooLarge
	case CodeUnauthenticated:
		return target == ErrUnauthenticated
	case CodeAnswered:
		return target == ErrAnswered
	}
	return false
}

// Errorf returns a *ServerError with code c for a handler to return, so the
// caller can branch on the code. Use codes of 100 or more.
func Errorf(c Code, format string, args ...any) error {
	return &ServerError{Code: c, Message: fmt.Sprintf(format, args...)}
}

// codeOf maps a handler's error to a wire code. A handler (or server
// interceptor) that returns ErrOverloaded sheds the call as the scheduler
// would, so clients retry it elsewhere; one that returns ErrBadRequest
// blames the caller's arguments.
func codeOf(err error) Code { return codeOr(err, CodeApplication) }

// codeOr maps err to the Code it carries or stands for, or fallback.
func codeOr(err error, fallback Code) Code {
	var se *ServerError
	switch {
	case errors.As(err, &se):
		return se.Code
	case errors.Is(err, ErrOverloaded), errors.Is(err, shed.ErrResourceBusy):
		return CodeOverloaded
	case errors.Is(err, ErrBadRequest):
		return CodeBadRequest
	case errors.Is(err, context.DeadlineExceeded):
		return CodeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return CodeCanceled
	}
	return fallback
}

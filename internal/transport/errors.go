package transport

import "errors"

// Errors of the transport that package kiev exports as its own
// (kiev.ErrShutdown, kiev.ErrServerClosed, kiev.ErrTooLarge,
// kiev.ErrBadRequest): the same values, so that errors.Is matches them in
// either package.
var (
	// ErrShutdown is what a frame sent on a closing connection fails
	// with, and a call on a closing connection.
	ErrShutdown = errors.New("kiev: connection is shut down")

	// ErrServerClosed is what the server closes its connections with; a
	// connection closed with it is not warned of.
	ErrServerClosed = errors.New("kiev: server closed")

	// ErrTooLarge says a message does not fit the frame limit, or a
	// datagram.
	ErrTooLarge = errors.New("kiev: message too large")

	// ErrBadRequest says a body could not be decoded.
	ErrBadRequest = errors.New("kiev: bad request")
)

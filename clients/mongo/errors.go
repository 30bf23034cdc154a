package mongo

import "errors"

// Errors returned by the package. Its errors wrap one of them and say what
// went wrong and what to change, so test them with errors.Is. The errors
// of operations are the driver's own, unchanged.
var (
	// ErrOptions is wrapped by the errors of New given options it cannot
	// use; the error names the field, or the URI's option, and never
	// holds the password.
	ErrOptions = errors.New("kiev/clients/mongo: invalid options")
	// ErrUnavailable is wrapped by the errors of Health when no server
	// answers, and of New when a "mongodb+srv" URI does not resolve.
	ErrUnavailable = errors.New("kiev/clients/mongo: the MongoDB server is unavailable")
	// ErrClosed is returned by Health and Close after Close.
	ErrClosed = errors.New("kiev/clients/mongo: closed")
)

package redis

import "errors"

// Errors returned by the package. The errors of New and Client.Health
// wrap one of them and say what went wrong, so test them with errors.Is.
// Errors of commands are go-redis's own, returned as go-redis returns
// them.
var (
	// ErrOptions is wrapped by the errors of New given options it cannot
	// use; the error names the field and shows a value that works.
	ErrOptions = errors.New("kiev/clients/redis: invalid options")
	// ErrUnavailable is wrapped by the errors of Client.Health when a
	// server does not answer PING: the error says which and why.
	ErrUnavailable = errors.New("kiev/clients/redis: the server is unavailable")
	// ErrClosed is returned by Client.Health after Client.Close.
	ErrClosed = errors.New("kiev/clients/redis: closed")
)

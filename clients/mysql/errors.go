package mysql

import "errors"

// Errors returned by the package. The errors of Open and DB.Health wrap
// one of them and say what went wrong, so test them with errors.Is.
// Errors of queries are gorm's and the driver's own, as gorm returns
// them.
var (
	// ErrOptions is wrapped by the errors of Open given options it cannot
	// use, a DSN that does not parse among them; the error names the
	// field and shows a value that works. It never holds a password.
	ErrOptions = errors.New("kiev/clients/mysql: invalid options")
	// ErrUnavailable is wrapped by the errors of Open and DB.Health when
	// a server does not answer: the error says which and why.
	ErrUnavailable = errors.New("kiev/clients/mysql: the server is unavailable")
	// ErrClosed is returned by DB.Health after DB.Close.
	ErrClosed = errors.New("kiev/clients/mysql: closed")
)

package config

import "errors"

// Errors returned by the package. The errors of sources, of New and of
// Decode wrap one of them and say what went wrong and what to change, so
// test them with errors.Is.
var (
	// ErrOptions is wrapped by the errors of constructors given options
	// they cannot use; the error names the field.
	ErrOptions = errors.New("kiev/clients/config: invalid options")
	// ErrUnavailable is wrapped by the errors of a source that cannot be
	// reached: a refused or broken connection, a timeout, a server error.
	ErrUnavailable = errors.New("kiev/clients/config: the config source is unavailable")
	// ErrUnauthorized is wrapped when the source refuses the credentials:
	// Apollo's access key secret, or ZooKeeper's digest.
	ErrUnauthorized = errors.New("kiev/clients/config: the config source refused the credentials")
	// ErrNotFound is wrapped when the source is reachable but holds no
	// such configuration: an unknown Apollo namespace, a missing
	// ZooKeeper node or directory.
	ErrNotFound = errors.New("kiev/clients/config: no such configuration")
	// ErrMalformed is wrapped when a source, or a snapshot file, holds
	// data that does not parse.
	ErrMalformed = errors.New("kiev/clients/config: malformed configuration data")
	// ErrDecode is wrapped by the errors of Snapshot.Decode, one for each
	// field it could not set.
	ErrDecode = errors.New("kiev/clients/config: cannot decode")
	// ErrClosed is returned by a Source, and by Client.Health, after
	// Close.
	ErrClosed = errors.New("kiev/clients/config: closed")
)

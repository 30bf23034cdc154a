// Package codes holds the Code type every layer of kiev uses: package
// kiev re-exports it as kiev.Code, and the transport answers with it.
package codes

import "strconv"

// Code classifies a failed call on the wire. Codes below 100 are kiev's;
// a handler may return a *kiev.ServerError with its own code of 100 or
// more, which reaches the caller unchanged.
type Code uint32

// Codes kiev puts on the wire. Values are part of the protocol.
const (
	OK               Code = 0
	Application      Code = 1  // the handler returned an error
	NotFound         Code = 2  // unknown service or method
	Shutdown         Code = 3  // the server is draining or closing
	DeadlineExceeded Code = 4  // the call's deadline passed on the server
	Canceled         Code = 5  // the call was canceled
	BadRequest       Code = 6  // undecodable args or unknown codec
	Internal         Code = 7  // handler panic or unencodable reply
	Overloaded       Code = 8  // shed by the server's scheduler without running
	TooLarge         Code = 9  // the reply does not fit a frame or datagram
	Unauthenticated  Code = 10 // the call's credentials were refused
	Answered         Code = 11 // over UDP: answered already, its reply no longer kept; not run again
)

// Count is the number of codes kiev defines: they run from 0 to
// Count-1.
const Count = len(names)

var names = [...]string{"OK", "Application", "NotFound", "Shutdown", "DeadlineExceeded", "Canceled", "BadRequest", "Internal", "Overloaded", "TooLarge", "Unauthenticated", "Answered"}

// String returns the name of one of kiev's codes, such as "NotFound", or
// the number of any other code, such as "404", so that a handler's own
// code prints as the handler wrote it: in errors, logs, the HTTP front's
// Kiev-Error-Code header and the kiev command.
func (c Code) String() string {
	if int(c) < len(names) {
		return names[c]
	}
	return strconv.FormatUint(uint64(c), 10)
}

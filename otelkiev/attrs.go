package otelkiev

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"

	"github.com/kievrpc/kiev"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.38.0"
)

// kiev's own attributes.
const (
	// CodeKey is the call's kiev.Code as Code.String prints it: "OK",
	// "Overloaded", or a handler's own code such as "404".
	CodeKey = attribute.Key("rpc.kiev.code")
	// PriorityKey is the call's kiev.Priority, 0 to 9: on the client the
	// one it was sent with, on the server the one it ran at (after
	// kiev.WithPriorityPolicy).
	PriorityKey = attribute.Key("kiev.priority")
	// ShedKey says the server shed the call without running it (see the
	// package doc): ShedOverloaded or ShedLimited.
	ShedKey = attribute.Key("kiev.shed")
	// StreamKey is a stream's kind, as kiev.StreamKind.String prints it
	// ("server stream", "client stream", "bidirectional stream"), on a
	// server span; a unary call has none.
	StreamKey = attribute.Key("kiev.stream")
)

// Values of ShedKey.
const (
	ShedOverloaded = "overloaded" // kiev.ErrOverloaded
	ShedLimited    = "limited"    // kiev.ErrLimited
)

// other stands for a method the server does not have, in metrics and
// span names, as the RPC conventions' "_OTHER".
const other = "_OTHER"

// systemAttr is rpc.system.
var systemAttr = semconv.RPCSystemKey.String(string(system))

// splitMethod splits "Service.Method" at its last dot, as kiev does.
func splitMethod(name string) (service, method string) {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return name[:i], name[i+1:]
	}
	return "", name
}

// serverCode is the code the server answers err with, as kiev maps a
// handler's error: its *kiev.ServerError's code, or the sentinel it
// stands for, or Application.
func serverCode(err error) kiev.Code {
	if c, ok := knownCode(err); ok {
		return c
	}
	return kiev.CodeApplication
}

// knownCode is the code err carries or stands for, if any.
func knownCode(err error) (kiev.Code, bool) {
	if err == nil {
		return kiev.CodeOK, true
	}
	return errorCode(err)
}

// errorCode is knownCode for an error: apart, so that a call that
// succeeds does not allocate errors.As's target.
func errorCode(err error) (kiev.Code, bool) {
	var se *kiev.ServerError
	switch {
	case errors.As(err, &se):
		return se.Code, true
	case errors.Is(err, kiev.ErrOverloaded):
		return kiev.CodeOverloaded, true
	case errors.Is(err, kiev.ErrBadRequest):
		return kiev.CodeBadRequest, true
	case errors.Is(err, context.DeadlineExceeded):
		return kiev.CodeDeadlineExceeded, true
	case errors.Is(err, context.Canceled):
		return kiev.CodeCanceled, true
	}
	return 0, false
}

// clientCode is the code of a client call's error: what the server
// answered, or the sentinel the client's own failure matches. It reports
// false for a failure with no code, such as kiev.ErrUnavailable.
func clientCode(err error) (kiev.Code, bool) {
	if c, ok := knownCode(err); ok {
		return c, true
	}
	switch {
	case errors.Is(err, kiev.ErrShutdown):
		return kiev.CodeShutdown, true
	case errors.Is(err, kiev.ErrTooLarge):
		return kiev.CodeTooLarge, true
	case errors.Is(err, kiev.ErrUnauthenticated):
		return kiev.CodeUnauthenticated, true
	case errors.Is(err, kiev.ErrNotFound):
		return kiev.CodeNotFound, true
	}
	return 0, false
}

// serverFault reports whether a server span that ended with code is an
// error: a failure of the server's, not the caller's.
func serverFault(code kiev.Code) bool {
	switch code {
	case kiev.CodeOK, kiev.CodeCanceled, kiev.CodeBadRequest, kiev.CodeUnauthenticated:
		return false
	}
	return code < 400 || code > 499
}

// shedOutcome is ShedKey's value for a call that ended with err, or "".
func shedOutcome(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, kiev.ErrLimited):
		return ShedLimited
	case errors.Is(err, kiev.ErrOverloaded):
		return ShedOverloaded
	}
	return ""
}

// peerAttrs appends the caller's network.peer.address and .port.
func peerAttrs(attrs []attribute.KeyValue, peer net.Addr) []attribute.KeyValue {
	switch a := peer.(type) {
	case nil:
		return attrs
	case *net.TCPAddr:
		return append(attrs, semconv.NetworkPeerAddress(a.IP.String()), semconv.NetworkPeerPort(a.Port))
	case *net.UDPAddr:
		return append(attrs, semconv.NetworkPeerAddress(a.IP.String()), semconv.NetworkPeerPort(a.Port))
	}
	s := peer.String()
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return append(attrs, semconv.NetworkPeerAddress(s))
	}
	attrs = append(attrs, semconv.NetworkPeerAddress(host))
	if p, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, semconv.NetworkPeerPort(p))
	}
	return attrs
}

// serverAddress is server.address and server.port of a Client's target
// (kiev.Call.Target): the host and port of "host:port", "tcp://host:port"
// or "udp://host:port", the path of "unix:///path", the service of a
// service name or "zookeeper://hosts/root/Service"; port 0 when it has
// none.
func serverAddress(target string) (string, int) {
	target = strings.TrimPrefix(target, "conn ") // NewClient's
	if scheme, rest, ok := strings.Cut(target, "://"); ok {
		switch scheme {
		case "unix":
			return rest, 0
		case "zookeeper":
			rest, _, _ = strings.Cut(rest, "?")
			return rest[strings.LastIndexByte(rest, '/')+1:], 0
		}
		target = rest
	}
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return target, 0
	}
	p, _ := strconv.Atoi(port)
	return host, p
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
)

// The systems under test, in the order the tables list them.
const (
	sysKiev = "kiev" // kiev streams on defaults (msgpack), one connection
	// sysKievBudget is kiev with kievBigBudget as its stream budget on
	// both sides, in the idle cell only: on defaults, a connection's
	// budget runs out long before 10,000 streams, and this measures what
	// each stream costs beyond it.
	sysKievBudget = "kiev-1GiB-budget"
	sysGRPC       = "grpc"    // grpc-go streams on defaults (protobuf), one connection
	sysRaw        = "raw-tcp" // a length-prefixed message stream on a connection of its own
)

var allSystems = []string{sysKiev, sysKievBudget, sysGRPC, sysRaw}

// kievBigBudget is sysKievBudget's stream budget.
const kievBigBudget = 1 << 30

func checkSystem(s string) error {
	if !slices.Contains(allSystems, s) {
		return fmt.Errorf("unknown system %q; the systems are %s", s, strings.Join(allSystems, ", "))
	}
	if (s == sysKiev || s == sysKievBudget) && dialKiev == nil {
		return errors.New("kiev: this build has no kiev streams (kiev.go sets dialKiev)")
	}
	return nil
}

// errUnsupported is what a system returns for what it cannot do: raw TCP
// has no unary calls, no bidirectional streams and one stream per
// connection.
var errUnsupported = errors.New("not supported by this system")

// client is one system's client on one connection (raw TCP: a connection
// per stream), shared by every goroutine of a cell.
type client interface {
	// get makes one unary call whose reply is blob(a.Size).
	get(ctx context.Context, a watchArgs) error
	// watch opens a server stream; it ends when ctx ends or on close.
	watch(ctx context.Context, a watchArgs) (recvStream, error)
	// chat opens a bidirectional echo stream; it ends when ctx ends or on
	// close.
	chat(ctx context.Context) (chatStream, error)
	close()
}

// recvStream is a server stream.
type recvStream interface {
	// recv receives one message into fresh storage, as a consumer that
	// keeps its messages would (raw TCP, the limit, reuses one buffer),
	// and returns its payload's size; io.EOF at the stream's end.
	recv(ctx context.Context) (int, error)
	// close frees the stream, whether or not it ended.
	close()
}

// chatStream is a bidirectional stream.
type chatStream interface {
	recvStream
	send(ctx context.Context, data []byte) error
}

// dialKiev is set by kiev.go: it dials a kiev server, with budget as
// its stream budget if not 0.
var dialKiev func(addr string, budget int) (client, error)

// startKiev is set by kiev.go: it serves kiev on l, with budget as its
// stream budget if not 0, and returns its stop.
var startKiev func(l net.Listener, budget int) (stop func(), err error)

func dial(system string, addrs serverAddrs) (client, error) {
	switch system {
	case sysKiev, sysKievBudget:
		if dialKiev == nil {
			break
		}
		if system == sysKievBudget {
			return dialKiev(addrs.KievBudget, kievBigBudget)
		}
		return dialKiev(addrs.Kiev, 0)
	case sysGRPC:
		return dialGRPC(addrs.GRPC)
	case sysRaw:
		return &rawClient{addr: addrs.Raw}, nil
	}
	return nil, checkSystem(system)
}

package main

import (
	"encoding/json"
	"fmt"

	"github.com/kievrpc/kiev/bench/internal/loadgen"
)

// newDialer is the client process's Dialer, for the server process's
// addresses (a serverAddrs in JSON).
func newDialer(line []byte) (loadgen.Dialer, string, error) {
	var addrs serverAddrs
	if err := json.Unmarshal(line, &addrs); err != nil {
		return nil, "", err
	}
	return func(system string) (loadgen.Conn, error) { return dialSystem(system, addrs) }, addrs.Control, nil
}

// dialSystem connects a peer's default client to its server.
func dialSystem(system string, addrs serverAddrs) (loadgen.Conn, error) {
	switch system {
	case sysRPCX:
		return dialRPCX(addrs.RPCX)
	case sysARPC:
		return dialARPC(addrs.ARPC)
	case sysKitex:
		return dialKitex(addrs.Kitex, false)
	case sysKitexMux:
		return dialKitex(addrs.KitexMux, true)
	}
	return nil, fmt.Errorf("peers: unknown system %q; the peers are %s, %s, %s and %s", system, sysRPCX, sysARPC, sysKitex, sysKitexMux)
}

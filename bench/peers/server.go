package main

import (
	"net"
	"net/http"

	"github.com/kievrpc/kiev/bench/internal/loadgen"
)

// The peers, by the names bench/compare's -systems gives them.
const (
	sysRPCX     = "rpcx"
	sysARPC     = "arpc"
	sysKitex    = "kitex"
	sysKitexMux = "kitex-mux"
)

// serverAddrs is where each peer listens.
type serverAddrs struct {
	RPCX     string
	ARPC     string
	Kitex    string
	KitexMux string
	Control  string // GET /stats: the process's loadgen.Stats
}

// servers holds every peer's server in one process.
type servers struct {
	addrs serverAddrs
	stops []func()
}

// startServers starts every peer on 127.0.0.1:0, and the control listener.
func startServers() (*servers, error) {
	s := &servers{}
	for _, start := range []struct {
		addr *string
		fn   func(net.Listener) (stop func(), err error)
	}{
		{&s.addrs.RPCX, serveRPCX},
		{&s.addrs.ARPC, serveARPC},
		{&s.addrs.Kitex, func(l net.Listener) (func(), error) { return serveKitex(l, false) }},
		{&s.addrs.KitexMux, func(l net.Listener) (func(), error) { return serveKitex(l, true) }},
		{&s.addrs.Control, serveControl},
	} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			s.stop()
			return nil, err
		}
		stop, err := start.fn(l)
		if err != nil {
			l.Close()
			s.stop()
			return nil, err
		}
		*start.addr = l.Addr().String()
		s.stops = append(s.stops, stop)
	}
	return s, nil
}

func serveControl(l net.Listener) (func(), error) {
	srv := &http.Server{Handler: loadgen.StatsHandler()}
	go srv.Serve(l)
	return func() { srv.Close() }, nil
}

func (s *servers) stop() {
	for _, stop := range s.stops {
		stop()
	}
}

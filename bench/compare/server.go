package main

// The server process, started by the coordinator as `compare -serve`. It
// serves the Echo methods on every system at once, each on its own
// 127.0.0.1:0 listener, prints one JSON line of serverAddrs on stdout, and
// serves its counters over HTTP on a control listener, outside the systems
// under test. It exits when stdin ends (the coordinator is gone) or on
// SIGTERM.

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/rpc"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/bench/internal/echopb"
	"github.com/kievrpc/kiev/bench/internal/loadgen"
)

// serverAddrs is where each system listens.
type serverAddrs struct {
	Kiev string // msgpack and protobuf on one kiev server
	// KievCompress is a kiev server with compression (zstd and s2), for
	// kiev-zstd and kiev-s2.
	KievCompress string
	NetRPC       string
	GRPC         string
	Floor        string
	Raw          string
	Control      string // GET /stats: the process's loadgen.Stats
}

// Echo is the kiev service: the same echo for both codecs.
type Echo struct{}

func (*Echo) Small(ctx context.Context, in *Small, out *Small) error       { *out = *in; return nil }
func (*Echo) Message(ctx context.Context, in *Message, out *Message) error { *out = *in; return nil }
func (*Echo) Blob(ctx context.Context, in *Blob, out *Blob) error          { *out = *in; return nil }

func (*Echo) SmallPB(ctx context.Context, in *echopb.Small, out *echopb.Small) error {
	out.Id, out.Name, out.Tags = in.Id, in.Name, in.Tags
	return nil
}

func (*Echo) MessagePB(ctx context.Context, in *echopb.BenchmarkMessage, out *echopb.BenchmarkMessage) error {
	copyMessagePB(out, in)
	return nil
}

func (*Echo) BlobPB(ctx context.Context, in *echopb.Blob, out *echopb.Blob) error {
	out.Data = in.Data
	return nil
}

// NetEcho is the same service for net/rpc, which has no context.
type NetEcho struct{}

func (*NetEcho) Small(in *Small, out *Small) error       { *out = *in; return nil }
func (*NetEcho) Message(in *Message, out *Message) error { *out = *in; return nil }
func (*NetEcho) Blob(in *Blob, out *Blob) error          { *out = *in; return nil }

// grpcEcho is the same service for grpc-go; it returns its argument.
type grpcEcho struct {
	echopb.UnimplementedEchoServer
}

func (grpcEcho) Small(ctx context.Context, in *echopb.Small) (*echopb.Small, error) { return in, nil }
func (grpcEcho) Message(ctx context.Context, in *echopb.BenchmarkMessage) (*echopb.BenchmarkMessage, error) {
	return in, nil
}
func (grpcEcho) Blob(ctx context.Context, in *echopb.Blob) (*echopb.Blob, error) { return in, nil }

// servers holds every system's server in one process.
type servers struct {
	addrs serverAddrs
	kiev  *kiev.Server
	kievZ *kiev.Server
	grpc  *grpc.Server
	lis   []net.Listener
	raw   *echoServer
	floor *echoServer
	http  *http.Server
}

// startServers starts every system on 127.0.0.1:0.
func startServers() (*servers, error) {
	s := &servers{}
	listen := func() (net.Listener, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			s.lis = append(s.lis, l)
		}
		return l, err
	}
	fail := func(err error) (*servers, error) {
		s.stop()
		return nil, err
	}

	s.kiev = kiev.NewServer()
	if err := s.kiev.Register(&Echo{}); err != nil {
		return fail(err)
	}
	kl, err := listen()
	if err != nil {
		return fail(err)
	}
	go s.kiev.Serve(kl)
	s.addrs.Kiev = kl.Addr().String()

	s.kievZ = kiev.NewServer(kiev.WithCompression(kiev.Zstd, kiev.S2))
	if err := s.kievZ.Register(&Echo{}); err != nil {
		return fail(err)
	}
	zl, err := listen()
	if err != nil {
		return fail(err)
	}
	go s.kievZ.Serve(zl)
	s.addrs.KievCompress = zl.Addr().String()

	rs := rpc.NewServer()
	if err := rs.Register(&NetEcho{}); err != nil {
		return fail(err)
	}
	nl, err := listen()
	if err != nil {
		return fail(err)
	}
	go func() { // rpc.Server.Accept would log the listener's closing
		for {
			c, err := nl.Accept()
			if err != nil {
				return
			}
			go rs.ServeConn(c)
		}
	}()
	s.addrs.NetRPC = nl.Addr().String()

	s.grpc = grpc.NewServer()
	echopb.RegisterEchoServer(s.grpc, grpcEcho{})
	gl, err := listen()
	if err != nil {
		return fail(err)
	}
	go s.grpc.Serve(gl)
	s.addrs.GRPC = gl.Addr().String()

	rl, err := listen()
	if err != nil {
		return fail(err)
	}
	s.raw = newEchoServer(rl, func(c net.Conn) { _ = rawEcho(c) })
	s.addrs.Raw = rl.Addr().String()

	fl, err := listen()
	if err != nil {
		return fail(err)
	}
	s.floor = newEchoServer(fl, floorServe)
	s.addrs.Floor = fl.Addr().String()

	cl, err := listen()
	if err != nil {
		return fail(err)
	}
	s.http = &http.Server{Handler: loadgen.StatsHandler()}
	go s.http.Serve(cl)
	s.addrs.Control = cl.Addr().String()
	return s, nil
}

func (s *servers) stop() {
	if s.kiev != nil {
		s.kiev.Close()
	}
	if s.kievZ != nil {
		s.kievZ.Close()
	}
	if s.grpc != nil {
		s.grpc.Stop()
	}
	if s.raw != nil {
		s.raw.close()
	}
	if s.floor != nil {
		s.floor.close()
	}
	if s.http != nil {
		s.http.Close()
	}
	for _, l := range s.lis {
		l.Close()
	}
}

// serveMain is the server process.
func serveMain(stdin io.Reader, stdout io.Writer) error {
	s, err := startServers()
	if err != nil {
		return err
	}
	defer s.stop()
	if err := json.NewEncoder(stdout).Encode(s.addrs); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, stdin)
		close(done)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sig)
	select {
	case <-done:
	case <-sig:
	}
	return nil
}

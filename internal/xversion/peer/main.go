// Command peer is one side of kiev's cross-version test
// (internal/xversion). The test builds it twice, from this tree and from
// a pinned earlier commit (its source copied there, so that it compiles
// against that commit's kiev), and runs each build against the other.
//
// It uses only kiev's exported API, and only what every pinned commit
// has, so that the same source builds in each; sign.go and stream.go,
// built unless the tags kiev_nosign and kiev_nostream are set, hold what
// only newer commits have.
//
// In server mode it serves the test services over TCP and UDP, answering
// msgpack and protobuf, and where its kiev signs datagrams, on a second
// UDP socket that takes only signed calls; it prints one JSON line with
// its addresses, and runs until its standard input closes:
//
//	peer -mode server
//	{"tcp":"127.0.0.1:41234","udp":"127.0.0.1:50611","udp_signed":"127.0.0.1:39820"}
//
// In client mode it runs the scenarios against a server over one network
// with one codec, and prints one JSON line per scenario:
//
//	peer -mode client -tcp 127.0.0.1:41234 -udp 127.0.0.1:50611 -udp-signed 127.0.0.1:39820 -net udp -codec protobuf
//	{"scenario":"call","class":"ok","detail":"..."}
//
// A scenario's class is "ok", the name of the error the call failed with
// ("ErrOverloaded", "DeadlineExceeded", "code 451", ...; see classify), or
// "wrong" when a call succeeded with a wrong answer or a handler saw
// something other than it should. The test decides which class each
// scenario should have between two given builds.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/kievrpc/kiev"
)

// maxDatagram is the datagram limit of both sides, above the default 1200
// bytes so that the big-reply scenario's reply fits one datagram.
const maxDatagram = 8192

// packetKeyID and packetKey sign the signed scenario's datagrams.
const packetKeyID = "xv"

var packetKey = []byte("kiev cross-version test key")

func main() {
	mode := flag.String("mode", "", "server or client")
	tcp := flag.String("tcp", "", "client: the server's TCP address")
	udp := flag.String("udp", "", "client: the server's UDP address")
	udpSigned := flag.String("udp-signed", "", "client: the server's UDP address for signed calls, if it has one")
	network := flag.String("net", "tcp", "client: the network the scenarios call over, tcp or udp")
	codecName := flag.String("codec", "msgpack", "client: the codec of the scenarios' calls, msgpack or protobuf")
	only := flag.String("scenarios", "", "client: comma-separated scenarios to run (default all)")
	flag.Parse()

	var err error
	switch *mode {
	case "server":
		err = serve(os.Stdin, os.Stdout)
	case "client":
		var names []string
		if *only != "" {
			names = strings.Split(*only, ",")
		}
		err = runClient(clientConfig{tcp: *tcp, udp: *udp, udpSigned: *udpSigned, network: *network, codec: *codecName}, names, os.Stdout)
	default:
		err = errors.New("-mode must be server or client")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		os.Exit(1)
	}
}

// logger logs kiev's warnings and errors to standard error, which the test
// shows when a run fails.
func logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// serve serves the test services and Ctl on loopback TCP and UDP, prints
// their addresses as one JSON line on out, and returns when in ends: the
// test holds the pipe, so a peer never outlives its test.
func serve(in io.Reader, out io.Writer) error {
	srv, addrs, err := start(true)
	if err != nil {
		return err
	}
	defer srv.close()
	if canSign {
		signed, a, err := start(false, signingServer()...)
		if err != nil {
			return err
		}
		defer signed.close()
		addrs.UDPSigned = a.UDP
	}
	line, _ := json.Marshal(addrs)
	if _, err := fmt.Fprintf(out, "%s\n", line); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, bufio.NewReader(in))
	return nil
}

// Addrs are a server's addresses.
type Addrs struct {
	TCP       string `json:"tcp"`
	UDP       string `json:"udp"`
	UDPSigned string `json:"udp_signed,omitempty"` // calls signed with packetKey only
}

// server is one kiev.Server serving the test services on a TCP listener
// and a UDP socket.
type server struct {
	srv    *kiev.Server
	ran    *counter   // completed Work calls
	served chan error // what Serve and ServePacket returned
}

// start starts a server of the test services on loopback; withCtl adds the
// Ctl service, which only the process's first server has.
func start(withCtl bool, opts ...kiev.ServerOption) (*server, Addrs, error) {
	opts = append([]kiev.ServerOption{kiev.WithLogger(logger()), kiev.WithPacket(kiev.Packet{MaxDatagram: maxDatagram})}, opts...)
	s := &server{
		srv:    kiev.NewServer(opts...),
		ran:    new(counter),
		served: make(chan error, 2),
	}
	if err := s.srv.RegisterName(msgpackService, &service[Msg, *Msg]{ran: s.ran}); err != nil {
		return nil, Addrs{}, err
	}
	if err := s.srv.RegisterName(protobufService, &service[pbSmall, *pbSmall]{ran: s.ran}); err != nil {
		return nil, Addrs{}, err
	}
	if withCtl {
		if err := s.srv.Register(&Ctl{}); err != nil {
			return nil, Addrs{}, err
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, Addrs{}, err
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		l.Close()
		return nil, Addrs{}, err
	}
	addrs := Addrs{TCP: l.Addr().String(), UDP: pc.LocalAddr().String()}
	go func() { s.served <- s.srv.Serve(l) }()
	go func() { s.served <- s.srv.ServePacket(pc) }()
	return s, addrs, nil
}

// close stops the server at once.
func (s *server) close() { s.srv.Close() }

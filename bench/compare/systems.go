package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/rpc"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/bench/internal/echopb"
	"github.com/kievrpc/kiev/bench/internal/loadgen"
	"github.com/kievrpc/kiev/codec"
)

// The systems under test, in the order the tables list them.
const (
	sysKievMsgpack  = "kiev-msgpack"
	sysKievProtobuf = "kiev-protobuf"
	// kiev-zstd and kiev-s2 are kiev-msgpack with compression on both
	// sides (kiev.WithCompression), against a server of their own that
	// accepts both algorithms. They are not in the default run: ask for
	// them with -systems.
	sysKievZstd = "kiev-zstd"
	sysKievS2   = "kiev-s2"
	sysNetRPC   = "net/rpc"
	sysGRPC     = "grpc"
	sysGRPCPool = "grpc-pool4"
	sysFloor    = "mux-floor"
	sysRaw      = "raw-tcp"
)

var allSystems = []string{sysKievMsgpack, sysKievProtobuf, sysNetRPC, sysGRPC, sysGRPCPool, sysFloor, sysRaw}

// optionalSystems may be run, but are not by default.
var optionalSystems = []string{sysKievZstd, sysKievS2}

// grpcPoolSize is the number of connections of the pooled grpc client.
const grpcPoolSize = 4

func checkSystem(s string) error {
	if slices.Contains(allSystems, s) || slices.Contains(optionalSystems, s) || isPeer(s) {
		return nil
	}
	return fmt.Errorf("unknown system %q; the systems are %s, besides the default %s, and the peers of bench/peers %s",
		s, strings.Join(allSystems, ", "), strings.Join(optionalSystems, ", "), strings.Join(peerSystems, ", "))
}

// newDialer is the client process's Dialer, for the server process's
// addresses (a serverAddrs in JSON).
func newDialer(line []byte) (loadgen.Dialer, string, error) {
	var addrs serverAddrs
	if err := json.Unmarshal(line, &addrs); err != nil {
		return nil, "", err
	}
	return func(system string) (loadgen.Conn, error) { return dialSystem(system, addrs) }, addrs.Control, nil
}

// dialSystem connects to system's server: one connection, except for the
// pooled grpc client.
func dialSystem(system string, addrs serverAddrs) (loadgen.Conn, error) {
	switch system {
	case sysKievMsgpack, sysKievProtobuf, sysKievZstd, sysKievS2:
		k := &kievConn{pb: system == sysKievProtobuf}
		addr, opts := addrs.Kiev, []kiev.DialOption{kiev.WithContextDialer(k.dial)}
		switch system {
		case sysKievProtobuf:
			opts = append(opts, kiev.WithCodec(codec.Protobuf))
		case sysKievZstd:
			addr, opts = addrs.KievCompress, append(opts, kiev.WithCompression(kiev.Zstd))
		case sysKievS2:
			addr, opts = addrs.KievCompress, append(opts, kiev.WithCompression(kiev.S2))
		}
		c, err := kiev.Dial(addr, opts...)
		if err != nil {
			return nil, err
		}
		k.c = c
		return k, nil
	case sysNetRPC:
		c, err := rpc.Dial("tcp", addrs.NetRPC)
		if err != nil {
			return nil, err
		}
		return &netRPCConn{c: c}, nil
	case sysGRPC, sysGRPCPool:
		n := 1
		if system == sysGRPCPool {
			n = grpcPoolSize
		}
		g := &grpcConn{}
		for range n {
			cc, err := grpc.NewClient(addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				g.Close()
				return nil, err
			}
			g.ccs = append(g.ccs, cc)
			g.clients = append(g.clients, echopb.NewEchoClient(cc))
		}
		return g, nil
	case sysFloor:
		return newFloorConn(addrs)
	case sysRaw:
		return newRawConn(addrs)
	}
	return nil, checkSystem(system)
}

type kievConn struct {
	c  *kiev.Client
	pb bool

	mu    sync.Mutex
	socks []*net.TCPConn // every connection dialed, for WireBytes
}

// dial is the client's dialer: a plain TCP connection, as kiev's own
// (kiev writes to a *net.TCPConn inline, which a wrapper would prevent),
// kept to read its kernel counters.
func (k *kievConn) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if tc, ok := nc.(*net.TCPConn); ok {
		k.mu.Lock()
		k.socks = append(k.socks, tc)
		k.mu.Unlock()
	}
	return nc, err
}

// WireBytes is the bytes the client's connections carried, both ways.
func (k *kievConn) WireBytes() (uint64, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var sum uint64
	for _, tc := range k.socks {
		n, ok := tcpBytes(tc)
		if !ok {
			return 0, false
		}
		sum += n
	}
	return sum, len(k.socks) > 0
}

func (k *kievConn) Caller(payload string) (func(ctx context.Context) error, error) {
	c := k.c
	switch {
	case payload == paySmall && !k.pb:
		in := newSmall()
		return func(ctx context.Context) error {
			var out Small
			return c.Call(ctx, "Echo.Small", in, &out)
		}, nil
	case payload == paySmall:
		in := newSmallPB()
		return func(ctx context.Context) error {
			var out echopb.Small
			return c.Call(ctx, "Echo.SmallPB", in, &out)
		}, nil
	case payload == payMessage && !k.pb:
		in := newMessage()
		return func(ctx context.Context) error {
			var out Message
			return c.Call(ctx, "Echo.Message", in, &out)
		}, nil
	case payload == payMessage:
		in := newMessagePB()
		return func(ctx context.Context) error {
			var out echopb.BenchmarkMessage
			return c.Call(ctx, "Echo.MessagePB", in, &out)
		}, nil
	case !k.pb:
		in := &Blob{Data: blobData(payload)}
		return func(ctx context.Context) error {
			var out Blob
			return c.Call(ctx, "Echo.Blob", in, &out)
		}, nil
	default:
		in := &echopb.Blob{Data: blobData(payload)}
		return func(ctx context.Context) error {
			var out echopb.Blob
			return c.Call(ctx, "Echo.BlobPB", in, &out)
		}, nil
	}
}

func (k *kievConn) Close() { k.c.Close() }

type netRPCConn struct{ c *rpc.Client }

func (n *netRPCConn) Caller(payload string) (func(ctx context.Context) error, error) {
	c := n.c
	switch payload {
	case paySmall:
		in := newSmall()
		return func(context.Context) error {
			var out Small
			return c.Call("NetEcho.Small", in, &out)
		}, nil
	case payMessage:
		in := newMessage()
		return func(context.Context) error {
			var out Message
			return c.Call("NetEcho.Message", in, &out)
		}, nil
	default:
		in := &Blob{Data: blobData(payload)}
		return func(context.Context) error {
			var out Blob
			return c.Call("NetEcho.Blob", in, &out)
		}, nil
	}
}

func (n *netRPCConn) Close() { n.c.Close() }

type grpcConn struct {
	ccs     []*grpc.ClientConn
	clients []echopb.EchoClient
	next    atomic.Uint32
}

// pick spreads calls over the pool round robin.
func (g *grpcConn) pick() echopb.EchoClient {
	if len(g.clients) == 1 {
		return g.clients[0]
	}
	return g.clients[int(g.next.Add(1))%len(g.clients)]
}

func (g *grpcConn) Caller(payload string) (func(ctx context.Context) error, error) {
	switch payload {
	case paySmall:
		in := newSmallPB()
		return func(ctx context.Context) error {
			_, err := g.pick().Small(ctx, in)
			return err
		}, nil
	case payMessage:
		in := newMessagePB()
		return func(ctx context.Context) error {
			_, err := g.pick().Message(ctx, in)
			return err
		}, nil
	default:
		in := &echopb.Blob{Data: blobData(payload)}
		return func(ctx context.Context) error {
			_, err := g.pick().Blob(ctx, in)
			return err
		}, nil
	}
}

func (g *grpcConn) Close() {
	for _, cc := range g.ccs {
		cc.Close()
	}
}

// rawConn sends, for each payload, the bytes kiev's msgpack client sends.
type rawConn struct {
	c      *rawClient
	frames map[string][]byte
}

func newRawConn(addrs serverAddrs) (*rawConn, error) {
	frames, err := captureFrames(addrs)
	if err != nil {
		return nil, err
	}
	c, err := dialRaw(addrs.Raw)
	if err != nil {
		return nil, err
	}
	return &rawConn{c: c, frames: frames}, nil
}

// captureFrames returns, for each payload, the Request frame kiev's
// msgpack client sends for its call.
func captureFrames(addrs serverAddrs) (map[string][]byte, error) {
	frames := make(map[string][]byte)
	for _, p := range allPayloads {
		var args, reply func() any
		var method string
		switch p {
		case paySmall:
			method, args, reply = "Echo.Small", func() any { return newSmall() }, func() any { return new(Small) }
		case payMessage:
			method, args, reply = "Echo.Message", func() any { return newMessage() }, func() any { return new(Message) }
		default:
			b := &Blob{Data: blobData(p)}
			method, args, reply = "Echo.Blob", func() any { return b }, func() any { return new(Blob) }
		}
		f, err := captureKievRequest(addrs.Kiev, method, args, reply)
		if err != nil {
			return nil, fmt.Errorf("capturing kiev's %s request: %w", p, err)
		}
		frames[p] = f
	}
	return frames, nil
}

func (r *rawConn) Caller(payload string) (func(ctx context.Context) error, error) {
	frame := r.frames[payload]
	reply := make(chan error, 1)
	return func(context.Context) error { return r.c.call(frame, reply) }, nil
}

func (r *rawConn) Close() { r.c.close() }

// floorConn sends the same frames as rawConn, each under an id of its own,
// through the multiplexing floor (floor.go).
type floorConn struct {
	c      *floorClient
	frames map[string][]byte
}

func newFloorConn(addrs serverAddrs) (*floorConn, error) {
	frames, err := captureFrames(addrs)
	if err != nil {
		return nil, err
	}
	c, err := dialFloor(addrs.Floor)
	if err != nil {
		return nil, err
	}
	return &floorConn{c: c, frames: frames}, nil
}

func (f *floorConn) Caller(payload string) (func(ctx context.Context) error, error) {
	frame := f.frames[payload]
	var buf []byte
	reply := make(chan floorReply, 1)
	return func(context.Context) error {
		_, err := f.c.call(frame, &buf, reply)
		return err
	}, nil
}

func (f *floorConn) Close() { f.c.close() }

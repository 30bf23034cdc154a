package main

// rpcx as its README starts it: server.NewServer with the service
// registered, and an XClient over peer-to-peer discovery with
// client.DefaultOption, whose codec is msgpack (vmihailenco/msgpack) on
// plain Go structs. The XClient keeps one connection to the server, which
// every caller shares.

import (
	"context"
	"net"

	rpcxclient "github.com/smallnest/rpcx/client"
	rpcxserver "github.com/smallnest/rpcx/server"

	"github.com/kievrpc/kiev/bench/internal/payload"
)

// RPCXEcho is the rpcx service: it returns its argument.
type RPCXEcho struct{}

func (*RPCXEcho) Small(ctx context.Context, in *payload.Small, out *payload.Small) error {
	*out = *in
	return nil
}

func (*RPCXEcho) Message(ctx context.Context, in *payload.Message, out *payload.Message) error {
	*out = *in
	return nil
}

func (*RPCXEcho) Blob(ctx context.Context, in *payload.Blob, out *payload.Blob) error {
	*out = *in
	return nil
}

func serveRPCX(l net.Listener) (func(), error) {
	s := rpcxserver.NewServer()
	if err := s.RegisterName("Echo", new(RPCXEcho), ""); err != nil {
		return nil, err
	}
	go s.ServeListener("tcp", l)
	return func() { s.Close() }, nil
}

type rpcxConn struct{ c rpcxclient.XClient }

func dialRPCX(addr string) (*rpcxConn, error) {
	d, err := rpcxclient.NewPeer2PeerDiscovery("tcp@"+addr, "")
	if err != nil {
		return nil, err
	}
	return &rpcxConn{c: rpcxclient.NewXClient("Echo", rpcxclient.Failtry, rpcxclient.RandomSelect, d, rpcxclient.DefaultOption)}, nil
}

func (r *rpcxConn) Caller(name string) (func(ctx context.Context) error, error) {
	c := r.c
	switch name {
	case payload.NameSmall:
		in := payload.NewSmall()
		return func(ctx context.Context) error {
			var out payload.Small
			return c.Call(ctx, "Small", in, &out)
		}, nil
	case payload.NameMessage:
		in := payload.NewMessage()
		return func(ctx context.Context) error {
			var out payload.Message
			return c.Call(ctx, "Message", in, &out)
		}, nil
	default:
		in := &payload.Blob{Data: payload.BlobData(name)}
		return func(ctx context.Context) error {
			var out payload.Blob
			return c.Call(ctx, "Blob", in, &out)
		}, nil
	}
}

func (r *rpcxConn) Close() { r.c.Close() }

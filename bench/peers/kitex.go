package main

// kitex as its README starts it: the Go code that kitex's tool generates
// from a thrift IDL (echo.thrift; thrift is kitex's default), with
// kitex's default options but for the address. The kitex system's client
// uses kitex's default connection pool, which takes a connection per call
// in flight and keeps up to 10 idle; kitex-mux is the multiplexed
// transport, server.WithMuxTransport and client.WithMuxConnection(1): one
// connection that every caller shares.

import (
	"context"
	"net"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/server"

	"github.com/kievrpc/kiev/bench/internal/payload"
	"github.com/kievrpc/kiev/bench/peers/internal/kitexecho"
	"github.com/kievrpc/kiev/bench/peers/internal/kitexecho/echo"
)

// kitexEcho is the kitex service: it returns its argument.
type kitexEcho struct{}

func (*kitexEcho) EchoSmall(ctx context.Context, req *kitexecho.Small) (*kitexecho.Small, error) {
	return req, nil
}

func (*kitexEcho) EchoMessage(ctx context.Context, req *kitexecho.BenchmarkMessage) (*kitexecho.BenchmarkMessage, error) {
	return req, nil
}

func (*kitexEcho) EchoBlob(ctx context.Context, req *kitexecho.Blob) (*kitexecho.Blob, error) {
	return req, nil
}

func serveKitex(l net.Listener, mux bool) (func(), error) {
	opts := []server.Option{server.WithListener(l)}
	if mux {
		opts = append(opts, server.WithMuxTransport())
	}
	s := echo.NewServer(new(kitexEcho), opts...)
	go s.Run()
	return func() { s.Stop() }, nil
}

type kitexConn struct{ c echo.Client }

func dialKitex(addr string, mux bool) (*kitexConn, error) {
	opts := []client.Option{client.WithHostPorts(addr)}
	if mux {
		opts = append(opts, client.WithMuxConnection(1))
	}
	c, err := echo.NewClient("echo", opts...)
	if err != nil {
		return nil, err
	}
	return &kitexConn{c: c}, nil
}

func (k *kitexConn) Caller(name string) (func(ctx context.Context) error, error) {
	c := k.c
	switch name {
	case payload.NameSmall:
		in := kitexSmall(payload.NewSmall())
		return func(ctx context.Context) error {
			_, err := c.EchoSmall(ctx, in)
			return err
		}, nil
	case payload.NameMessage:
		in := kitexMessage(payload.NewMessage())
		return func(ctx context.Context) error {
			_, err := c.EchoMessage(ctx, in)
			return err
		}, nil
	default:
		in := &kitexecho.Blob{Data: payload.BlobData(name)}
		return func(ctx context.Context) error {
			_, err := c.EchoBlob(ctx, in)
			return err
		}, nil
	}
}

// Close leaves the client to the garbage collector: kitex's generated
// client has no Close, and kitex closes a client, and its connections,
// when the collector finds it unreachable (a finalizer that
// client.NewClient sets).
func (k *kitexConn) Close() {}

func kitexSmall(s *payload.Small) *kitexecho.Small {
	return &kitexecho.Small{ID: s.ID, Name: s.Name, Tags: s.Tags}
}

// kitexMessage is m as thrift's struct; thrift has no unsigned integers,
// so Field5 becomes a list of i64.
func kitexMessage(m *payload.Message) *kitexecho.BenchmarkMessage {
	k := &kitexecho.BenchmarkMessage{
		Field1: m.Field1, Field9: m.Field9, Field18: m.Field18, Field80: m.Field80,
		Field81: m.Field81, Field2: m.Field2, Field3: m.Field3, Field280: m.Field280,
		Field6: m.Field6, Field22: m.Field22, Field4: m.Field4, Field59: m.Field59,
		Field7: m.Field7, Field16: m.Field16, Field130: m.Field130, Field12: m.Field12,
		Field17: m.Field17, Field13: m.Field13, Field14: m.Field14, Field104: m.Field104,
		Field100: m.Field100, Field101: m.Field101, Field102: m.Field102, Field103: m.Field103,
		Field29: m.Field29, Field30: m.Field30, Field60: m.Field60, Field271: m.Field271,
		Field272: m.Field272, Field150: m.Field150, Field23: m.Field23, Field24: m.Field24,
		Field25: m.Field25, Field78: m.Field78, Field67: m.Field67, Field68: m.Field68,
		Field128: m.Field128, Field129: m.Field129, Field131: m.Field131,
	}
	for _, v := range m.Field5 {
		k.Field5 = append(k.Field5, int64(v))
	}
	return k
}

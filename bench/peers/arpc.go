package main

// arpc as its README starts it: arpc.NewServer with a handler per method,
// and arpc.NewClient on one connection, which every caller shares, with
// arpc's default codec, encoding/json.

import (
	"context"
	"net"

	"github.com/lesismal/arpc"

	"github.com/kievrpc/kiev/bench/internal/payload"
)

// arpcEcho returns a handler that binds the request into a fresh value
// from newValue and writes it back.
func arpcEcho(newValue func() any) arpc.HandlerFunc {
	return func(ctx *arpc.Context) {
		v := newValue()
		if err := ctx.Bind(v); err != nil {
			ctx.Error(err)
			return
		}
		ctx.Write(v)
	}
}

func serveARPC(l net.Listener) (func(), error) {
	s := arpc.NewServer()
	s.Handler.Handle("/echo/small", arpcEcho(func() any { return new(payload.Small) }))
	s.Handler.Handle("/echo/message", arpcEcho(func() any { return new(payload.Message) }))
	s.Handler.Handle("/echo/blob", arpcEcho(func() any { return new(payload.Blob) }))
	go s.Serve(l)
	return func() { s.Stop() }, nil
}

type arpcConn struct{ c *arpc.Client }

func dialARPC(addr string) (*arpcConn, error) {
	c, err := arpc.NewClient(func() (net.Conn, error) { return net.Dial("tcp", addr) })
	if err != nil {
		return nil, err
	}
	return &arpcConn{c: c}, nil
}

func (a *arpcConn) Caller(name string) (func(ctx context.Context) error, error) {
	c := a.c
	switch name {
	case payload.NameSmall:
		in := payload.NewSmall()
		return func(ctx context.Context) error {
			var out payload.Small
			return c.CallWith(ctx, "/echo/small", in, &out)
		}, nil
	case payload.NameMessage:
		in := payload.NewMessage()
		return func(ctx context.Context) error {
			var out payload.Message
			return c.CallWith(ctx, "/echo/message", in, &out)
		}, nil
	default:
		in := &payload.Blob{Data: payload.BlobData(name)}
		return func(ctx context.Context) error {
			var out payload.Blob
			return c.CallWith(ctx, "/echo/blob", in, &out)
		}, nil
	}
}

func (a *arpcConn) Close() { a.c.Stop() }

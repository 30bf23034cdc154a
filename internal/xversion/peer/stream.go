//go:build !kiev_nostream

package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/codec"
)

// This file holds what only builds with streams have; commits before
// them build the peer with the tag kiev_nostream (nostream.go).

// Watch sends the args' ID messages, numbered from 0 in ID and named
// with the args' Name: a server stream.
func (s *service[M, PM]) Watch(ctx context.Context, a PM, out kiev.Out[PM]) error {
	for i := range a.GetId() {
		m := PM(new(M))
		set(m, i, a.GetName(), nil)
		if err := out.Send(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// stream: a server stream of three messages, then io.EOF. A server from
// before streams is never sent a stream frame, and the open fails with
// ErrStreamsUnsupported: the class "unsupported".
func (r *runner) stream(ctx context.Context) (string, string) {
	if r.cfg.network != "tcp" {
		return "n/a", "streams need a connection"
	}
	args := any(&Msg{ID: 3, Name: "watch"})
	if r.codec == codec.Protobuf {
		args = &pbSmall{Id: 3, Name: "watch"}
	}
	s, err := r.c.Stream(ctx, r.service+".Watch", args)
	if errors.Is(err, kiev.ErrStreamsUnsupported) {
		return "unsupported", err.Error()
	}
	if err != nil {
		return failed("Stream", err)
	}
	defer s.Close()
	for i := range int64(3) {
		var got payload
		if r.codec == codec.Protobuf {
			var m pbSmall
			err = s.Recv(ctx, &m)
			got = payload{m.GetId(), m.GetName(), nil}
		} else {
			var m Msg
			err = s.Recv(ctx, &m)
			got = payload{m.ID, m.Name, nil}
		}
		if err != nil {
			return failed(fmt.Sprintf("Recv of message %d", i), err)
		}
		if got.ID != i || got.Name != "watch" {
			return "wrong", fmt.Sprintf("message %d is %+v", i, got)
		}
	}
	var m Msg
	if err := s.Recv(ctx, &m); err != io.EOF {
		return "wrong", fmt.Sprintf("after the third message Recv = %v, want io.EOF", err)
	}
	return "ok", "3 messages, then io.EOF"
}

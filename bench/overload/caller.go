package main

// The client side of each system: one connection, and one attempt of a
// method on it.

import (
	"context"
	"errors"
	"fmt"
	"net/rpc"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/bench/internal/workpb"
)

// outcome is how one attempt ended.
type outcome uint8

const (
	outOK       outcome = iota // a reply within the deadline: goodput
	outTimeout                 // the deadline passed: retried
	outRejected                // the server refused it at once (kiev.ErrOverloaded): not retried
	outError                   // any other failure: not retried
	outAborted                 // the run ended under it: not recorded
)

// caller makes one attempt of a method on one system, over one
// connection. It is safe for concurrent use.
type caller interface {
	call(ctx context.Context, m method, a Args) outcome
	close()
}

// dial connects to the server of system at addr with one connection.
// With bareKiev, the kiev client neither retries refused calls nor
// throttles (both are on by default), so that only the server's
// scheduler protects it.
func dial(system, addr string, bareKiev bool) (caller, error) {
	switch system {
	case sysKiev, sysKievFixed, sysKievNoShed, sysKievRes:
		var opts []kiev.DialOption
		if bareKiev {
			opts = append(opts, kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1}), kiev.WithThrottle(kiev.Throttle{Disabled: true}))
		}
		c, err := kiev.Dial(addr, opts...)
		if err != nil {
			return nil, err
		}
		return kievCaller{c}, nil
	case sysNetRPC:
		c, err := rpc.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		return rpcCaller{c}, nil
	case sysGRPC:
		cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		return grpcCaller{cc, workpb.NewWorkClient(cc)}, nil
	}
	return nil, fmt.Errorf("unknown system %q", system)
}

// dialN opens n connections to the server of system at addr, each a
// client of its own.
func dialN(system, addr string, bareKiev bool, n int) ([]caller, error) {
	cs := make([]caller, 0, n)
	for range n {
		c, err := dial(system, addr, bareKiev)
		if err != nil {
			closeAll(cs)
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		cs = append(cs, c)
	}
	return cs, nil
}

func closeAll(cs []caller) {
	for _, c := range cs {
		c.close()
	}
}

// aborted reports whether ctx ended because the run did, not because the
// attempt's deadline passed.
func aborted(ctx context.Context) bool { return ctx.Err() == context.Canceled }

// methodNames are the methods' names on kiev and net/rpc.
var methodNames = [...]string{methodWork: "Work.Work", methodBurn: "Work.Burn"}

type kievCaller struct{ c *kiev.Client }

func (k kievCaller) call(ctx context.Context, m method, a Args) outcome {
	var r Reply
	err := k.c.Call(kiev.WithPriority(ctx, kiev.Priority(a.Priority)), methodNames[m], a, &r)
	switch {
	case err == nil:
		return outOK
	case aborted(ctx):
		return outAborted
	case errors.Is(err, kiev.ErrOverloaded):
		return outRejected
	case errors.Is(err, context.DeadlineExceeded):
		return outTimeout
	}
	return outError
}

func (k kievCaller) close() { k.c.Close() }

// rpcCaller uses net/rpc, which has no context: the attempt gives up when
// ctx ends, and the late reply, if any, is discarded by net/rpc.
type rpcCaller struct{ c *rpc.Client }

func (r rpcCaller) call(ctx context.Context, m method, a Args) outcome {
	call := r.c.Go(methodNames[m], a, new(Reply), make(chan *rpc.Call, 1))
	select {
	case <-call.Done:
		if call.Error != nil {
			return outError
		}
		return outOK
	case <-ctx.Done():
		if aborted(ctx) {
			return outAborted
		}
		return outTimeout
	}
}

func (r rpcCaller) close() { r.c.Close() }

type grpcCaller struct {
	cc *grpc.ClientConn
	c  workpb.WorkClient
}

func (g grpcCaller) call(ctx context.Context, m method, a Args) outcome {
	req := &workpb.WorkRequest{Id: a.ID, DeadlineUnixNano: a.Deadline, Priority: int32(a.Priority)}
	var err error
	switch m {
	case methodWork:
		_, err = g.c.Work(ctx, req)
	case methodBurn:
		err = g.cc.Invoke(ctx, grpcBurnMethod, req, new(workpb.WorkReply))
	}
	switch {
	case err == nil:
		return outOK
	case aborted(ctx):
		return outAborted
	case status.Code(err) == codes.DeadlineExceeded:
		return outTimeout
	}
	return outError
}

func (g grpcCaller) close() { g.cc.Close() }

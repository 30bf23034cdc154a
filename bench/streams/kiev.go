package main

// kiev streams on their defaults: msgpack, one connection, the service
// registered as unary services are. Written against the contract of issue
// 32 (kiev.Out, kiev.In, Client.Stream).

import (
	"context"
	"net"

	"github.com/kievrpc/kiev"
)

func init() {
	kievBudget = kiev.DefaultStreamBudget
	kievMaxWindow = 4 << 20 // internal/transport.MaxWindow: a window grows from 64 KiB to this
	dialKiev = func(addr string, budget int) (client, error) {
		var opts []kiev.DialOption
		if budget != 0 {
			opts = append(opts, kiev.WithStreamBudget(budget))
		}
		c, err := kiev.Dial(addr, opts...)
		if err != nil {
			return nil, err
		}
		return &kievClient{c: c}, nil
	}
	startKiev = func(l net.Listener, budget int) (func(), error) {
		var opts []kiev.ServerOption
		if budget != 0 {
			opts = append(opts, kiev.WithStreamBudget(budget))
		}
		s := kiev.NewServer(opts...)
		if err := s.Register(&Bench{}); err != nil {
			return nil, err
		}
		go s.Serve(l)
		return func() { s.Close() }, nil
	}
}

// Blob is a message: bytes.
type Blob struct{ Data []byte }

// WatchArgs are a server stream's (and Get's) arguments.
type WatchArgs struct {
	ID    int64
	Size  int
	Count int
	Hold  bool
}

// Bench is the kiev service.
type Bench struct{}

// Get is the unary call beside the streams: it returns Size bytes.
func (*Bench) Get(ctx context.Context, a WatchArgs, reply *Blob) error {
	reply.Data = blob(a.Size)
	return nil
}

// Watch is the server stream.
func (*Bench) Watch(ctx context.Context, a WatchArgs, out kiev.Out[Blob]) error {
	m := Blob{Data: blob(a.Size)}
	return serveWatch(ctx, watchArgs(a), func() error { return out.Send(ctx, m) })
}

// Chat echoes each message until the client finishes sending.
func (*Bench) Chat(ctx context.Context, in kiev.In[Blob], out kiev.Out[Blob]) error {
	chatting.Add(1)
	defer chatting.Add(-1)
	for m, err := range in.All(ctx) {
		if err != nil {
			return err
		}
		if err := out.Send(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

type kievClient struct{ c *kiev.Client }

func (k *kievClient) get(ctx context.Context, a watchArgs) error {
	var reply Blob
	return k.c.Call(ctx, "Bench.Get", WatchArgs(a), &reply)
}

func (k *kievClient) watch(ctx context.Context, a watchArgs) (recvStream, error) {
	s, err := k.c.Stream(ctx, "Bench.Watch", WatchArgs(a))
	if err != nil {
		return nil, err
	}
	return kievStream{s}, nil
}

func (k *kievClient) chat(ctx context.Context) (chatStream, error) {
	s, err := k.c.Stream(ctx, "Bench.Chat", nil)
	if err != nil {
		return nil, err
	}
	return kievStream{s}, nil
}

func (k *kievClient) close() { k.c.Close() }

type kievStream struct{ s *kiev.Stream }

func (k kievStream) recv(ctx context.Context) (int, error) {
	var m Blob
	if err := k.s.Recv(ctx, &m); err != nil {
		return 0, err
	}
	return len(m.Data), nil
}

func (k kievStream) send(ctx context.Context, data []byte) error {
	return k.s.Send(ctx, Blob{Data: data})
}

func (k kievStream) close() { k.s.Close() }

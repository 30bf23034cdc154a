package main

// grpc-go on its defaults: protobuf, one ClientConn, a service described by
// hand over bench's echopb messages (no code generator needed). The
// arguments of Get and Watch travel as an echopb.Small: Id is the ID, Tags
// are Size, Count and Hold (0 or 1).

import (
	"context"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kievrpc/kiev/bench/internal/echopb"
)

const grpcService = "bench.Streams"

var grpcDesc = grpc.ServiceDesc{
	ServiceName: grpcService,
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Get", Handler: grpcGet}},
	Streams: []grpc.StreamDesc{
		{StreamName: "Watch", Handler: grpcWatch, ServerStreams: true},
		{StreamName: "Chat", Handler: grpcChat, ServerStreams: true, ClientStreams: true},
	},
	Metadata: "bench/streams",
}

func toPB(a watchArgs) *echopb.Small {
	hold := int64(0)
	if a.Hold {
		hold = 1
	}
	return &echopb.Small{Id: a.ID, Tags: []int64{int64(a.Size), int64(a.Count), hold}}
}

func fromPB(m *echopb.Small) watchArgs {
	a := watchArgs{ID: m.Id}
	if t := m.Tags; len(t) == 3 {
		a.Size, a.Count, a.Hold = int(t[0]), int(t[1]), t[2] == 1
	}
	return a
}

func grpcGet(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	in := new(echopb.Small)
	if err := dec(in); err != nil {
		return nil, err
	}
	return &echopb.Blob{Data: blob(fromPB(in).Size)}, nil
}

func grpcWatch(_ any, s grpc.ServerStream) error {
	in := new(echopb.Small)
	if err := s.RecvMsg(in); err != nil {
		return err
	}
	a := fromPB(in)
	m := &echopb.Blob{Data: blob(a.Size)}
	return serveWatch(s.Context(), a, func() error { return s.SendMsg(m) })
}

func grpcChat(_ any, s grpc.ServerStream) error {
	chatting.Add(1)
	defer chatting.Add(-1)
	for {
		m := new(echopb.Blob)
		if err := s.RecvMsg(m); err != nil {
			return nil // io.EOF: the client finished; or the stream is gone
		}
		if err := s.SendMsg(m); err != nil {
			return err
		}
	}
}

// serveGRPC serves the service on l.
func serveGRPC(l net.Listener) (stop func()) {
	s := grpc.NewServer()
	s.RegisterService(&grpcDesc, nil)
	go s.Serve(l)
	return s.Stop
}

type grpcClient struct{ cc *grpc.ClientConn }

func dialGRPC(addr string) (client, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &grpcClient{cc: cc}, nil
}

func (g *grpcClient) get(ctx context.Context, a watchArgs) error {
	return g.cc.Invoke(ctx, "/"+grpcService+"/Get", toPB(a), new(echopb.Blob))
}

func (g *grpcClient) watch(ctx context.Context, a watchArgs) (recvStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	s, err := g.cc.NewStream(ctx, &grpcDesc.Streams[0], "/"+grpcService+"/Watch")
	if err == nil {
		err = s.SendMsg(toPB(a))
	}
	if err == nil {
		err = s.CloseSend()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &grpcStream{s: s, cancel: cancel}, nil
}

func (g *grpcClient) chat(ctx context.Context) (chatStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	s, err := g.cc.NewStream(ctx, &grpcDesc.Streams[1], "/"+grpcService+"/Chat")
	if err != nil {
		cancel()
		return nil, err
	}
	return &grpcStream{s: s, cancel: cancel}, nil
}

func (g *grpcClient) close() { g.cc.Close() }

// grpcStream is a grpc-go client stream. grpc-go frees a stream when
// RecvMsg returns an error or its ctx ends; close cancels its ctx.
type grpcStream struct {
	s      grpc.ClientStream
	cancel context.CancelFunc
}

func (g *grpcStream) recv(context.Context) (int, error) {
	m := new(echopb.Blob)
	if err := g.s.RecvMsg(m); err != nil {
		return 0, err
	}
	return len(m.Data), nil
}

func (g *grpcStream) send(_ context.Context, data []byte) error {
	return g.s.SendMsg(&echopb.Blob{Data: data})
}

func (g *grpcStream) close() { g.cancel() }

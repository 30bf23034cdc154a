package kiev_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"

	"github.com/kievrpc/kiev"
)

// Ticker is a service with one stream of each kind.
type Ticker struct{}

type Span struct{ From, To int }

type Tick struct{ N int }

type Total struct{ Sum int }

// Count is a server stream: it sends the numbers from s.From to s.To.
func (Ticker) Count(ctx context.Context, s Span, out kiev.Out[Tick]) error {
	for n := s.From; n <= s.To; n++ {
		if err := out.Send(ctx, Tick{n}); err != nil {
			return err
		}
	}
	return nil
}

// Add is a client stream: it adds the numbers it receives.
func (Ticker) Add(ctx context.Context, in kiev.In[Tick], total *Total) error {
	for t, err := range in.All(ctx) {
		if err != nil {
			return err
		}
		total.Sum += t.N
	}
	return nil
}

// Double is a bidirectional stream: it doubles each number.
func (Ticker) Double(ctx context.Context, in kiev.In[Tick], out kiev.Out[Tick]) error {
	for t, err := range in.All(ctx) {
		if err != nil {
			return err
		}
		if err := out.Send(ctx, Tick{2 * t.N}); err != nil {
			return err
		}
	}
	return nil
}

func tickerClient() (*kiev.Client, func()) {
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)))
	if err := srv.Register(Ticker{}); err != nil {
		log.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(l)
	c, err := kiev.Dial(l.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	return c, func() { c.Close(); srv.Close() }
}

// A server stream: the client receives until io.EOF.
func ExampleClient_Stream() {
	c, done := tickerClient()
	defer done()
	ctx := context.Background()

	s, err := c.Stream(ctx, "Ticker.Count", Span{From: 1, To: 3})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for {
		var t Tick
		err := s.Recv(ctx, &t)
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(t.N)
	}
	// Output:
	// 1
	// 2
	// 3
}

// A client stream: the client sends, then CloseSend, then receives the
// reply as the stream's one message.
func ExampleClient_Stream_client() {
	c, done := tickerClient()
	defer done()
	ctx := context.Background()

	s, err := c.Stream(ctx, "Ticker.Add", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for n := range 5 {
		if err := s.Send(ctx, Tick{n}); err != nil {
			log.Fatal(err)
		}
	}
	if err := s.CloseSend(); err != nil {
		log.Fatal(err)
	}
	var total Total
	if err := s.Recv(ctx, &total); err != nil {
		log.Fatal(err)
	}
	fmt.Println(total.Sum)
	// Output: 10
}

// A bidirectional stream, typed from the method expression: the
// compiler checks the message types.
func ExampleBidiStreamOf() {
	c, done := tickerClient()
	defer done()
	ctx := context.Background()

	double, err := kiev.BidiStreamOf(c, Ticker.Double)
	if err != nil {
		log.Fatal(err)
	}
	s, err := double.Open(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for n := 1; n <= 3; n++ {
		if err := s.Send(ctx, Tick{n}); err != nil {
			log.Fatal(err)
		}
		t, err := s.Recv(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(t.N)
	}
	// Output:
	// 2
	// 4
	// 6
}

// Typed server and client streams.
func ExampleServerStreamOf() {
	c, done := tickerClient()
	defer done()
	ctx := context.Background()

	count, err := kiev.ServerStreamOf(c, Ticker.Count)
	if err != nil {
		log.Fatal(err)
	}
	s, err := count.Open(ctx, Span{From: 4, To: 6})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for t, err := range s.All(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(t.N)
	}

	add, err := kiev.ClientStreamOf(c, Ticker.Add)
	if err != nil {
		log.Fatal(err)
	}
	u, err := add.Open(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer u.Close()
	for n := range 4 {
		if err := u.Send(ctx, Tick{n}); err != nil {
			log.Fatal(err)
		}
	}
	total, err := u.CloseAndRecv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(total.Sum)
	// Output:
	// 4
	// 5
	// 6
	// 6
}

package kiev_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"sync"
	"testing"

	"github.com/kievrpc/kiev"
	"go.uber.org/goleak"
)

// Firehose sends q.From messages of q.To bytes.
type Firehose struct{}

func (Firehose) Pour(ctx context.Context, q Query, out kiev.Out[Bytes]) error {
	b := Bytes{B: make([]byte, q.To)}
	for range q.From {
		if err := out.Send(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

func (Firehose) Once(ctx context.Context, q Query, out kiev.Out[Bytes]) error {
	return out.Send(ctx, Bytes{B: make([]byte, q.To)})
}

// BenchmarkServerStream is one server stream of 1 KiB messages, and one
// of 16 KiB messages, client and server in this process: ns/op and
// allocs/op are per message, both sides.
func BenchmarkServerStream(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) { benchServerStream(b, size) })
	}
}

func benchServerStream(b *testing.B, size int) {
	srv := kiev.NewServer()
	if err := srv.Register(Firehose{}); err != nil {
		b.Fatal(err)
	}
	c := dial(b, startServer(b, srv))
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(int64(size))
	s, err := c.Stream(ctx, "Firehose.Pour", Query{From: b.N, To: size})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var m Bytes
	for {
		if err := s.Recv(ctx, &m); err == io.EOF {
			break
		} else if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStreamOpen opens a server stream, takes its one message and
// its end, from 64 goroutines.
func BenchmarkStreamOpen(b *testing.B) {
	srv := kiev.NewServer()
	if err := srv.Register(Firehose{}); err != nil {
		b.Fatal(err)
	}
	c := dial(b, startServer(b, srv))
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		var m Bytes
		for pb.Next() {
			s, err := c.Stream(ctx, "Firehose.Once", Query{To: 16})
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Recv(ctx, &m); err != nil {
				b.Fatal(err)
			}
			if err := s.Recv(ctx, &m); err != io.EOF {
				b.Fatal(err)
			}
		}
	})
}

// TestStreamMessageAllocations guards a stream's message path, counted on
// both sides: once a stream flows, Out.Send, the transport and Recv into
// a message whose slice has room allocate nothing for a message (the
// pools and the stream's boxes hold what they need).
func TestStreamMessageAllocations(t *testing.T) {
	if raceEnabled || testing.CoverMode() != "" {
		t.Skip("allocation counts differ under -race and -cover")
	}
	srv := kiev.NewServer()
	if err := srv.Register(Firehose{}); err != nil {
		t.Fatal(err)
	}
	c := dial(t, startServer(t, srv))
	ctx := context.Background()
	const runs = 2000
	s, err := c.Stream(ctx, "Firehose.Pour", Query{From: 1 + 100 + 3*(runs+1), To: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var m Bytes
	for range 100 { // the stream flows, its window grown
		if err := s.Recv(ctx, &m); err != nil {
			t.Fatal(err)
		}
	}
	// The buffer pool is the process's: tests before this one may have
	// left it in a state that a flowing stream takes a while to cycle
	// through (every message allocated, now and then, for a run of
	// 2,000). The steady state is the least of three runs.
	n := math.Inf(1)
	for range 3 {
		n = min(n, testing.AllocsPerRun(runs, func() {
			if err := s.Recv(ctx, &m); err != nil {
				t.Fatal(err)
			}
		}))
	}
	if n > 0.5 {
		t.Errorf("%.2f allocations per message of a flowing stream, both sides; want none, but for a pool refilled now and then", n)
	}
}

// TestStreamHandlersGoroutinesEndWithTheServer opens many streams at
// once: the goroutines kept for the next streams' handlers once theirs
// have ended do not outlive the server.
func TestStreamHandlersGoroutinesEndWithTheServer(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := kiev.NewServer()
	if err := srv.Register(Firehose{}); err != nil {
		t.Fatal(err)
	}
	c := dial(t, startServer(t, srv))
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 300 {
		wg.Go(func() {
			s, err := c.Stream(ctx, "Firehose.Once", Query{To: 16})
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close()
			var m Bytes
			for s.Recv(ctx, &m) == nil {
			}
		})
	}
	wg.Wait()
	c.Close()
	srv.Close()
}

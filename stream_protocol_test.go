package kiev_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/testpb"
	"github.com/kievrpc/kiev/internal/transport"
	"github.com/kievrpc/kiev/internal/wire"
)

// The rules of PROTOCOL.md's Streams, each checked by a peer that writes
// the frames by hand: a client against a real Server, and a server
// against a real Client.

// Hand is a stream service for peers that speak the protocol by hand.
type Hand struct {
	started chan string // each Hold, as it runs
	ended   chan error  // the error each Hold's context ended with
}

func newHand() *Hand { return &Hand{started: make(chan string, 64), ended: make(chan error, 64)} }

// Hold runs until its context ends, reading nothing.
func (t *Hand) Hold(ctx context.Context, in kiev.In[[]byte], out kiev.Out[[]byte]) error {
	t.started <- "Hold"
	<-ctx.Done()
	t.ended <- ctx.Err()
	return ctx.Err()
}

// Count sends the numbers 0 to |n|-1; for n < 0 it then fails with code
// 451.
func (t *Hand) Count(ctx context.Context, n int, out kiev.Out[int]) error {
	for i := range max(n, -n) {
		if err := out.Send(ctx, i); err != nil {
			return err
		}
	}
	if n < 0 {
		return kiev.Errorf(451, "counted %d", -n)
	}
	return nil
}

// Sum replies with the sum of the numbers it is sent.
func (t *Hand) Sum(ctx context.Context, in kiev.In[int], sum *int) error {
	for v, err := range in.All(ctx) {
		if err != nil {
			return err
		}
		*sum += v
	}
	return nil
}

// Echo sends back every number it is sent.
func (t *Hand) Echo(ctx context.Context, in kiev.In[int], out kiev.Out[int]) error {
	for v, err := range in.All(ctx) {
		if err != nil {
			return err
		}
		if err := out.Send(ctx, v); err != nil {
			return err
		}
	}
	return nil
}

// Once sends 7 and returns, reading nothing.
func (t *Hand) Once(ctx context.Context, in kiev.In[int], out kiev.Out[int]) error {
	err := out.Send(ctx, 7)
	t.started <- "Once"
	return err
}

// startHand serves a Hand and an Arith with opts, and returns the address.
func startHand(t *testing.T, tap *Hand, opts ...kiev.ServerOption) string {
	t.Helper()
	srv := kiev.NewServer(opts...)
	if err := srv.Register(tap); err != nil {
		t.Fatal(err)
	}
	if err := srv.Register(&Arith{}); err != nil {
		t.Fatal(err)
	}
	return startServer(t, srv)
}

// handClient is a client connection that writes frames by hand.
type handClient struct {
	t        *testing.T
	nc       *net.TCPConn
	r        *wire.Reader
	settings wire.Header // the server's Settings
}

// dialHand connects to addr, exchanges prefaces and reads the server's
// Settings.
func dialHand(t *testing.T, addr string) *handClient {
	t.Helper()
	c := &handClient{t: t, nc: rawDial(t, addr)}
	_ = c.nc.SetDeadline(time.Now().Add(closeTimeout)) // a safety net, not synchronization
	c.write(wire.AppendPreface(nil, wire.Version))
	c.r = wire.NewReader(c.nc, 4096, 32<<20)
	if _, err := wire.ReadPreface(c.r); err != nil {
		t.Fatalf("the server's preface: %v", err)
	}
	f, h := c.next()
	if f.Type != wire.TypeSettings {
		t.Fatalf("the server's first frame is of type %d, want its Settings", f.Type)
	}
	c.settings = h
	return c
}

func (c *handClient) write(frames ...[]byte) {
	c.t.Helper()
	if _, err := c.nc.Write(bytes.Join(frames, nil)); err != nil {
		c.t.Fatalf("writing: %v", err)
	}
}

// next reads the next frame, Pings and Pongs aside; its body is a copy.
func (c *handClient) next() (wire.Frame, wire.Header) {
	c.t.Helper()
	for {
		f, err := c.r.Next()
		if err != nil {
			c.t.Fatalf("reading a frame: %v", err)
		}
		if f.Type == wire.TypePing || f.Type == wire.TypePong {
			continue
		}
		var h wire.Header
		if err := wire.ParseHeader(bytes.Clone(f.Header), &h); err != nil {
			c.t.Fatal(err)
		}
		f.Body = bytes.Clone(f.Body)
		return f, h
	}
}

// expect reads the next frame and fails unless it is of type ft for id.
func (c *handClient) expect(ft wire.Type, id uint64) (wire.Frame, wire.Header) {
	c.t.Helper()
	f, h := c.next()
	if f.Type != ft || f.ID != id {
		c.t.Fatalf("a frame of type %d for %d (ErrCode %d %q); want type %d for %d", f.Type, f.ID, h.ErrCode, h.ErrMsg, ft, id)
	}
	return f, h
}

// open opens a stream of method with id, granting the server credit
// bytes, and returns the server's first Credit for it.
func (c *handClient) open(id uint64, method string, args any, credit uint64) wire.Header {
	c.t.Helper()
	c.write(streamRequest(id, method, args, credit))
	_, h := c.expect(wire.TypeCredit, id)
	if !h.HasCredit {
		c.t.Fatalf("the server's first Credit for %d has no Credit field", id)
	}
	return h
}

// call makes a unary Arith.Add call with id, and checks its answer: the
// connection lives.
func (c *handClient) call(id uint64) {
	c.t.Helper()
	body, _ := codec.Msgpack.Marshal(nil, Args{2, 3})
	c.write(frame(wire.TypeRequest, id, func(b []byte) []byte {
		b = wire.AppendString(b, wire.KeyMethod, "Arith.Add")
		return wire.AppendString(b, wire.KeyCodec, "msgpack")
	}, body))
	f, h := c.expect(wire.TypeResponse, id)
	var r Reply
	if err := codec.Msgpack.Unmarshal(f.Body, &r); h.ErrCode != 0 || err != nil || r.C != 5 {
		c.t.Fatalf("Arith.Add on the connection: code %d %q, reply %+v (%v); want 5", h.ErrCode, h.ErrMsg, r, err)
	}
}

// streamRequest is a Request that opens a stream of method with id; args
// nil for none.
func streamRequest(id uint64, method string, args any, credit uint64) []byte {
	var body []byte
	if args != nil {
		body, _ = codec.Msgpack.Marshal(nil, args)
	}
	return frame(wire.TypeRequest, id, func(b []byte) []byte {
		b = wire.AppendString(b, wire.KeyMethod, method)
		b = wire.AppendString(b, wire.KeyCodec, "msgpack")
		return wire.AppendUvarint(b, wire.KeyStream, credit)
	}, body)
}

// chunk is a Message frame of stream id carrying body; size >= 0 adds
// the Size field of a message's first chunk.
func chunk(id uint64, size int, body []byte) []byte {
	return frame(wire.TypeMessage, id, func(b []byte) []byte {
		if size >= 0 {
			b = wire.AppendUvarint(b, wire.KeySize, uint64(size))
		}
		return b
	}, body)
}

// message is the Message frames of one message of stream id, in chunks
// of 16 KiB.
func message(id uint64, m []byte) []byte {
	out := chunk(id, len(m), m[:min(len(m), transport.ChunkSize)])
	for off := transport.ChunkSize; off < len(m); off += transport.ChunkSize {
		out = append(out, chunk(id, -1, m[off:min(len(m), off+transport.ChunkSize)])...)
	}
	return out
}

func creditFrame(id, offset uint64) []byte {
	return frame(wire.TypeCredit, id, func(b []byte) []byte {
		b = wire.AppendUvarint(b, wire.KeyCredit, offset)
		return wire.AppendUvarint(b, wire.KeyConsumed, 0)
	}, nil)
}

func endFrame(id uint64) []byte    { return frame(wire.TypeEnd, id, nil, nil) }
func cancelFrame(id uint64) []byte { return frame(wire.TypeCancel, id, nil, nil) }

func TestServerSettingsSayItServesStreamsAndHowMany(t *testing.T) {
	c := dialHand(t, startHand(t, newHand(), kiev.WithMaxStreams(7)))
	if !c.settings.HasStreams || c.settings.Streams != 7 {
		t.Fatalf("the server's Settings carry Streams %d (present: %v); want 7, its WithMaxStreams", c.settings.Streams, c.settings.HasStreams)
	}
}

func TestServerStreamSendsCreditThenItsMessagesThenItsResponse(t *testing.T) {
	c := dialHand(t, startHand(t, newHand()))
	c.write(streamRequest(1, "Hand.Count", 3, 1<<20))
	_, h := c.expect(wire.TypeCredit, 1) // before any Message: it says the stream was accepted
	if !h.HasCredit || h.Credit != 0 {
		t.Errorf("a server stream's first Credit grants %d (present: %v); want 0: it takes no messages", h.Credit, h.HasCredit)
	}
	for i := range 3 {
		f, h := c.expect(wire.TypeMessage, 1)
		var v int
		if err := codec.Msgpack.Unmarshal(f.Body, &v); err != nil || v != i || !h.HasSize || h.Size != uint64(len(f.Body)) {
			t.Fatalf("message %d: %d (%v), Size %d (present: %v) for %d bytes", i, v, err, h.Size, h.HasSize, len(f.Body))
		}
	}
	f, h := c.expect(wire.TypeResponse, 1)
	if h.ErrCode != 0 || len(h.Codec) != 0 || len(f.Body) != 0 {
		t.Errorf("the Response that ends a server stream: code %d, codec %q, %d body bytes; want none of them", h.ErrCode, h.Codec, len(f.Body))
	}
	c.call(2)
}

func TestStreamErrorResponseComesAfterTheMessages(t *testing.T) {
	c := dialHand(t, startHand(t, newHand()))
	c.open(1, "Hand.Count", -2, 1<<20)
	c.expect(wire.TypeMessage, 1)
	c.expect(wire.TypeMessage, 1)
	if _, h := c.expect(wire.TypeResponse, 1); h.ErrCode != 451 || string(h.ErrMsg) != "counted 2" {
		t.Fatalf("the Response: code %d %q; want the handler's 451", h.ErrCode, h.ErrMsg)
	}
}

func TestClientStreamEndsWithEndAndItsReplyComesInTheResponse(t *testing.T) {
	c := dialHand(t, startHand(t, newHand()))
	if h := c.open(1, "Hand.Sum", nil, 0); h.Credit != transport.InitialWindow {
		t.Errorf("the first Credit of a client stream grants %d bytes; want the initial window, %d", h.Credit, transport.InitialWindow)
	}
	var frames []byte
	for i := 1; i <= 10; i++ {
		m, _ := codec.Msgpack.Marshal(nil, i)
		frames = append(frames, message(1, m)...)
	}
	c.write(frames, endFrame(1))
	for {
		f, h := c.next()
		if f.Type == wire.TypeCredit {
			continue // the server grants more as it takes them
		}
		if f.Type != wire.TypeResponse || f.ID != 1 {
			t.Fatalf("a frame of type %d for %d; want the Response", f.Type, f.ID)
		}
		var sum int
		if err := codec.Msgpack.Unmarshal(f.Body, &sum); h.ErrCode != 0 || string(h.Codec) != "msgpack" || err != nil || sum != 55 {
			t.Fatalf("the Response: code %d %q, codec %q, sum %d (%v); want 55 in msgpack", h.ErrCode, h.ErrMsg, h.Codec, sum, err)
		}
		return
	}
}

func TestCancelEndsTheStreamAndItsHandlersContext(t *testing.T) {
	tap := newHand()
	c := dialHand(t, startHand(t, tap))
	c.open(1, "Hand.Hold", nil, 1<<20)
	<-tap.started
	c.write(cancelFrame(1))
	if err := <-tap.ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the handler's context ended with %v; want context.Canceled", err)
	}
	// What crossed the Cancel on the wire is dropped: the connection lives.
	c.write(message(1, []byte{1}), creditFrame(1, 10), endFrame(1))
	c.call(2)
}

func TestAnEmptyMessageCostsCredit(t *testing.T) {
	logOpt, logs := captureLog()
	c := dialHand(t, startHand(t, newHand(), logOpt))
	// A server stream: the server grants the client's messages 0 bytes,
	// and the client grants the server's none yet: the server waits for
	// credit, since even an empty message costs MessageCost.
	c.open(1, "Hand.Count", 1, 0)
	c.write(creditFrame(1, transport.MessageCost-1))
	c.call(2) // nothing of stream 1's comes first
	// The client may send none either: the server granted it nothing.
	c.write(chunk(1, 0, nil))
	expectClosed(t, c.nc)
	if !strings.Contains(logs.String(), "sent past its credit") {
		t.Errorf("the server's log does not say why it closed:\n%s", logs.String())
	}
}

func TestFramesForAnEndedStreamAreDropped(t *testing.T) {
	logOpt, logs := captureLog()
	c := dialHand(t, startHand(t, newHand(), logOpt))
	c.open(1, "Hand.Count", 1, 1<<20)
	c.expect(wire.TypeMessage, 1)
	c.expect(wire.TypeResponse, 1)
	c.write(message(1, []byte{1, 2, 3}), creditFrame(1, 1<<30), endFrame(1))
	c.call(2)
	if l := logs.String(); strings.Contains(l, "protocol error") {
		t.Errorf("the server logged a protocol error for frames of an ended stream:\n%s", l)
	}
}

func TestStreamPastTheConnectionsLimitIsRefusedOverloaded(t *testing.T) {
	tap := newHand()
	c := dialHand(t, startHand(t, tap, kiev.WithMaxStreams(2)))
	c.open(1, "Hand.Hold", nil, 1<<20)
	c.open(3, "Hand.Hold", nil, 1<<20)
	c.write(streamRequest(5, "Hand.Hold", nil, 1<<20))
	if _, h := c.expect(wire.TypeResponse, 5); h.ErrCode != uint64(kiev.CodeOverloaded) || !strings.Contains(string(h.ErrMsg), "WithMaxStreams") {
		t.Fatalf("the third stream: code %d %q; want Overloaded, naming WithMaxStreams", h.ErrCode, h.ErrMsg)
	}
	// A refused stream was read: its frames are dropped, as an ended one's.
	c.write(endFrame(5))
	c.call(6)
	<-tap.started
	<-tap.started
	if n := len(tap.started); n != 0 {
		t.Fatalf("%d more handlers ran; want the refused stream's not to", n)
	}
	c.write(cancelFrame(1))
	<-tap.ended
	c.open(7, "Hand.Hold", nil, 1<<20) // room again
	<-tap.started
}

// TestStreamViolationsCloseTheConnection sends each frame that breaks a
// rule of PROTOCOL.md's Streams > Violations on a stream whose handler
// holds it open. The server must close that connection, saying why, and
// cancel the handler, while another client's stream and calls go on.
func TestStreamViolationsCloseTheConnection(t *testing.T) {
	const maxFrame = 1 << 20
	cases := []struct {
		name   string
		attack func(credit uint64) []byte // after stream 1 opened with credit
		reason string
	}{
		{"a message past the credit", func(credit uint64) []byte {
			return message(1, make([]byte, credit-transport.MessageCost+1)) // a message costs its bytes and MessageCost
		}, "sent past its credit: 65536 bytes granted, 65537 sent"},
		{"a chunk over 64 KiB", func(uint64) []byte {
			return chunk(1, transport.MaxChunk+1, make([]byte, transport.MaxChunk+1))
		}, "a chunk of 65537 bytes on stream 1, over the 65536-byte maximum"},
		{"a first chunk without Size", func(uint64) []byte {
			return chunk(1, -1, []byte{1, 2, 3})
		}, "the first chunk of a message on stream 1 has no Size"},
		{"Size on a continuation chunk", func(uint64) []byte {
			return append(chunk(1, 10, make([]byte, 5)), chunk(1, 5, make([]byte, 5))...)
		}, "a new message on stream 1 before the last one's 5 bytes came"},
		{"a chunk past its message's Size", func(uint64) []byte {
			return chunk(1, 3, make([]byte, 5))
		}, "runs 2 bytes past the end of its message"},
		{"Size over the frame limit", func(uint64) []byte {
			return chunk(1, maxFrame+1, []byte{1})
		}, "a message of 1048577 bytes on stream 1, over the 1048576-byte limit"},
		{"a Message after End", func(uint64) []byte {
			return append(endFrame(1), message(1, []byte{1})...)
		}, "a Message on stream 1 after its sender ended it"},
		{"an End inside a message", func(uint64) []byte {
			return append(chunk(1, 10, []byte{1, 2, 3}), endFrame(1)...)
		}, "an End on stream 1 inside a message, 7 bytes short of its Size"},
		{"a Credit without its Credit field", func(uint64) []byte {
			return frame(wire.TypeCredit, 1, func(b []byte) []byte { return wire.AppendUvarint(b, wire.KeyConsumed, 0) }, nil)
		}, "a Credit frame for stream 1 without its Credit field"},
		{"a Message for a stream never opened", func(uint64) []byte {
			return message(9, []byte{1})
		}, "a Message frame for stream 9, which was never opened"},
		{"a Credit for a stream never opened", func(uint64) []byte {
			return creditFrame(9, 10)
		}, "a Credit frame for stream 9, which was never opened"},
		{"an End for a stream never opened", func(uint64) []byte {
			return endFrame(9)
		}, "an End frame for stream 9, which was never opened"},
		{"a Request reopening an open stream", func(uint64) []byte {
			return streamRequest(1, "Hand.Echo", nil, 1<<20)
		}, "opened stream 1 while its stream of that id was open"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logOpt, logs := captureLog()
			tap := newHand()
			addr := startHand(t, tap, logOpt, kiev.WithMaxFrameSize(maxFrame))
			good := dial(t, addr, kiev.WithMaxFrameSize(maxFrame))
			ctx := t.Context()
			echo, err := good.Stream(ctx, "Hand.Echo", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer echo.Close()
			echoOnce(t, echo, 1)

			c := dialHand(t, addr)
			h := c.open(1, "Hand.Hold", nil, 1<<20)
			<-tap.started
			c.write(tc.attack(h.Credit))
			expectClosed(t, c.nc)
			if err := <-tap.ended; !errors.Is(err, context.Canceled) {
				t.Errorf("the handler's context ended with %v; want it canceled with the connection", err)
			}
			if l := logs.String(); !strings.Contains(l, "closing connection") || !strings.Contains(l, "protocol error: ") || !strings.Contains(l, tc.reason) {
				t.Errorf("the server's log does not say %q:\n%s", tc.reason, l)
			}
			echoOnce(t, echo, 2)
			checkAdd(t, good)
		})
	}
}

// echoOnce sends v on a Hand.Echo stream and checks that it comes back.
func echoOnce(t *testing.T, s *kiev.Stream, v int) {
	t.Helper()
	if err := s.Send(t.Context(), v); err != nil {
		t.Fatal(err)
	}
	var got int
	if err := s.Recv(t.Context(), &got); err != nil || got != v {
		t.Fatalf("echo of %d: %d, %v", v, got, err)
	}
}

// handServer plays a server by hand on one connection: it answers the
// client's preface with its own, and settings (nil for none), then
// hands the connection to serve. It answers Pings itself.
func handServer(t *testing.T, settings []byte, serve func(nc net.Conn, next func() (wire.Frame, wire.Header, error))) string {
	t.Helper()
	return rawServer(t, func(nc net.Conn) {
		_ = nc.SetDeadline(time.Now().Add(closeTimeout)) // a safety net, not synchronization
		r := wire.NewReader(nc, 4096, 32<<20)
		if _, err := wire.ReadPreface(r); err != nil {
			t.Errorf("the client's preface: %v", err)
			return
		}
		if _, err := nc.Write(append(wire.AppendPreface(nil, wire.Version), settings...)); err != nil {
			t.Errorf("writing the preface: %v", err)
			return
		}
		serve(nc, func() (wire.Frame, wire.Header, error) {
			for {
				f, err := r.Next()
				if err != nil {
					return f, wire.Header{}, err
				}
				if f.Type == wire.TypePing {
					_, _ = nc.Write(frame(wire.TypePong, f.ID, nil, nil))
					continue
				}
				var h wire.Header
				if err := wire.ParseHeader(f.Header, &h); err != nil {
					return f, h, err
				}
				return f, h, nil
			}
		})
	})
}

// TestClientClosesTheConnectionOfAServerThatBreaksAStreamRule plays a
// server that accepts a stream, then sends what PROTOCOL.md forbids: the
// client must close the connection and fail the stream, saying why.
func TestClientClosesTheConnectionOfAServerThatBreaksAStreamRule(t *testing.T) {
	cases := []struct {
		name   string
		attack func(id, credit uint64) []byte
		reason string
	}{
		{"a message past the credit", func(id, credit uint64) []byte {
			return message(id, make([]byte, credit+1))
		}, "sent past its credit"},
		{"a Message for a stream never opened", func(id, _ uint64) []byte {
			return message(id+10, []byte{1})
		}, "which was never opened"},
		{"a chunk over 64 KiB", func(id, _ uint64) []byte {
			return chunk(id, transport.MaxChunk+1, make([]byte, transport.MaxChunk+1))
		}, "over the 65536-byte maximum"},
	}
	settings := transport.SettingsFrame(nil, 100, kiev.DefaultMaxFrameSize)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			closed := make(chan error, 1)
			addr := handServer(t, settings, func(nc net.Conn, next func() (wire.Frame, wire.Header, error)) {
				for {
					f, h, err := next()
					if err != nil {
						closed <- err
						return
					}
					if f.Type == wire.TypeRequest && h.HasStream {
						_, _ = nc.Write(append(creditFrame(f.ID, 0), tc.attack(f.ID, h.Stream)...))
					}
				}
			})
			c := dial(t, addr)
			ctx := t.Context()
			// The attack follows the Credit that accepts the stream: it may
			// fail the open, or the Recv after it.
			s, err := c.Stream(ctx, "Hand.Hold", nil)
			if err == nil {
				defer s.Close()
				var b []byte
				err = s.Recv(ctx, &b)
			}
			if err == nil || !strings.Contains(err.Error(), "protocol error") || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("the stream failed with %v; want the protocol error, %q", err, tc.reason)
			}
			if err := <-closed; errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("the client did not close the connection: %v", err)
			}
		})
	}
}

// TestStreamToAServerWithoutStreamsFailsAndSendsNoStreamFrame plays a
// server from before streams: no Settings, Pongs, and a reply to every
// call. Client.Stream must fail with ErrStreamsUnsupported having sent no
// stream frame, and calls go on.
func TestStreamToAServerWithoutStreamsFailsAndSendsNoStreamFrame(t *testing.T) {
	seen := make(chan []string, 1)
	addr := handServer(t, nil, func(nc net.Conn, next func() (wire.Frame, wire.Header, error)) {
		var frames []string
		defer func() { seen <- frames }()
		for {
			f, h, err := next()
			if err != nil {
				return
			}
			if f.Type >= wire.TypeMessage || h.HasStream {
				frames = append(frames, fmt.Sprintf("type %d (Stream field: %v)", f.Type, h.HasStream))
			}
			if f.Type == wire.TypeRequest {
				body, _ := codec.Msgpack.Marshal(nil, Reply{C: 5})
				_, _ = nc.Write(frame(wire.TypeResponse, f.ID, func(b []byte) []byte { return wire.AppendString(b, wire.KeyCodec, "msgpack") }, body))
			}
		}
	})
	c, err := kiev.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Stream(t.Context(), "Hand.Hold", nil)
	if !errors.Is(err, kiev.ErrStreamsUnsupported) {
		t.Errorf("Stream to a server without streams = %v; want ErrStreamsUnsupported", err)
	}
	var r Reply
	if err := c.Call(t.Context(), "Arith.Add", Args{2, 3}, &r); err != nil || r.C != 5 {
		t.Errorf("a call after the refused stream: %+v, %v", r, err)
	}
	c.Close()
	if frames := <-seen; len(frames) > 0 {
		t.Errorf("the old server was sent stream frames: %v", frames)
	}
}

// TestStreamHoldsAboutTheBytesItGranted fills a stream whose handler
// does not read with the smallest messages the rules allow: one-byte
// messages up to its credit, then empty ones, which need none. Each
// one-byte message held a pooled buffer of 512 bytes or more (64 KiB of
// credit held 33 MB), and each empty one another, with no bound at all
// (200,000 of them, 3.8 MB on the wire, held 100 MB). The server must
// hold about what it granted.
func TestStreamHoldsAboutTheBytesItGranted(t *testing.T) {
	tap := newHand()
	c := dialHand(t, startHand(t, tap))
	h := c.open(1, "Hand.Hold", nil, 1<<20)
	<-tap.started
	// Each message costs MessageCost of credit beyond its bytes, so the
	// credit bounds the messages held too: half of it in one-byte
	// messages, half in empty ones.
	var small, empty []byte
	ones := h.Credit / 2 / (transport.MessageCost + 1)
	empties := (h.Credit - ones*(transport.MessageCost+1)) / transport.MessageCost
	for range ones {
		small = append(small, chunk(1, 1, []byte{7})...)
	}
	for range empties {
		empty = append(empty, chunk(1, 0, nil)...)
	}
	heap := func() int64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heap()
	c.write(small)
	c.call(2) // after the messages: they are read
	afterSmall := heap()
	c.write(empty)
	c.call(3)
	afterEmpty := heap()
	if d := afterSmall - before; d > 8<<20 {
		t.Errorf("%d one-byte messages made the heap grow by %d KiB; want it to hold about their %d bytes of credit", ones, d>>10, h.Credit/2)
	}
	if d := afterEmpty - afterSmall; d > 4<<20 {
		t.Errorf("%d empty messages made the heap grow by %d KiB; want them to hold nothing", empties, d>>10)
	}
}

// TestEndedStreamsGiveBackTheirCredit opens client streams one after
// another on one connection, each ended by its Response before the next
// opens. A server's stream kept what it had granted and not received
// counted against the connection's budget once it ended, so after about
// 200 streams every new one was granted a byte or none.
func TestEndedStreamsGiveBackTheirCredit(t *testing.T) {
	c := dialHand(t, startHand(t, newHand()))
	for i := range 400 {
		id := uint64(2*i + 1)
		if h := c.open(id, "Hand.Sum", nil, 0); h.Credit != transport.InitialWindow {
			t.Fatalf("stream %d was granted %d bytes; want the initial window, %d, as the first was", i, h.Credit, transport.InitialWindow)
		}
		m, _ := codec.Msgpack.Marshal(nil, 1000)
		c.write(message(id, m), endFrame(id))
		for {
			if f, _ := c.next(); f.Type == wire.TypeResponse && f.ID == id {
				break
			}
		}
	}
}

// TestAMessageThatCrossesTheEndOfItsStreamIsDropped sends a message to a
// handler that returned, its Response waiting behind a message the
// client has granted no credit for: the server drops the message, chunk
// by chunk, and the connection lives.
func TestAMessageThatCrossesTheEndOfItsStreamIsDropped(t *testing.T) {
	tap := newHand()
	c := dialHand(t, startHand(t, tap))
	c.open(1, "Hand.Once", nil, 0)
	const size = transport.ChunkSize + 4000
	m := message(1, make([]byte, size)) // two chunks
	split := len(chunk(1, size, make([]byte, transport.ChunkSize)))
	c.write(m[:split])
	<-tap.started
	c.write(m[split:], creditFrame(1, 100))
	f, _ := c.expect(wire.TypeMessage, 1)
	if len(f.Body) != 1 || f.Body[0] != 7 {
		t.Fatalf("the handler's message is %x, want 07", f.Body)
	}
	if _, h := c.expect(wire.TypeResponse, 1); h.ErrCode != 0 {
		t.Fatalf("the Response: code %d %q", h.ErrCode, h.ErrMsg)
	}
	c.call(2)
}

// ProtoFeed streams generated protobuf messages, by pointer, as protoc
// users write them.
type ProtoFeed struct{}

func (ProtoFeed) Echo(ctx context.Context, in kiev.In[*testpb.Small], out kiev.Out[*testpb.Small]) error {
	for m, err := range in.All(ctx) {
		if err != nil {
			return err
		}
		m.Name = "re: " + m.Name
		if err := out.Send(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// TestProtobufStreamOfPointerMessages streams *testpb.Small both ways
// with the protobuf codec: In and Out of a pointer type gave the codec
// a **testpb.Small, which it refused as not a proto.Message (found by
// the cross-version test's stream scenario).
func TestProtobufStreamOfPointerMessages(t *testing.T) {
	srv := kiev.NewServer()
	if err := srv.Register(ProtoFeed{}); err != nil {
		t.Fatal(err)
	}
	c := dial(t, startServer(t, srv), kiev.WithCodec(codec.Protobuf))
	ctx := t.Context()
	s, err := c.Stream(ctx, "ProtoFeed.Echo", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range int64(3) {
		if err := s.Send(ctx, &testpb.Small{Id: i, Name: "hi"}); err != nil {
			t.Fatal(err)
		}
		var m testpb.Small
		if err := s.Recv(ctx, &m); err != nil || m.GetId() != i || m.GetName() != "re: hi" {
			t.Fatalf("echo %d: %v, %v", i, &m, err)
		}
	}
}

// TestTypedProtobufStreamOfPointerMessages is the same with the typed
// opener, whose Send and Recv handed the codec **testpb.Small too.
func TestTypedProtobufStreamOfPointerMessages(t *testing.T) {
	srv := kiev.NewServer()
	if err := srv.Register(ProtoFeed{}); err != nil {
		t.Fatal(err)
	}
	c := dial(t, startServer(t, srv), kiev.WithCodec(codec.Protobuf))
	echo, err := kiev.BidiStreamOf(c, ProtoFeed.Echo)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s, err := echo.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range int64(3) {
		if err := s.Send(ctx, &testpb.Small{Id: i, Name: "hi"}); err != nil {
			t.Fatal(err)
		}
		m, err := s.Recv(ctx)
		if err != nil || m.GetId() != i || m.GetName() != "re: hi" {
			t.Fatalf("echo %d: %v, %v", i, m, err)
		}
	}
}

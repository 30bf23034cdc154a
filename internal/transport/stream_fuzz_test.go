package transport

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/codes"
	"github.com/kievrpc/kiev/internal/wire"
)

// FuzzServerStreamFrames feeds a ServerConn, over a pipe, the frames its
// input spells: Requests that open streams and unary calls, Message
// (whole messages, and single chunks with any Size), Credit, End, Cancel
// and stream frames with raw headers, for streams opened, ended and
// never opened; between them, the handlers take messages, send, end
// their sending, return and give up. The server must not panic nor hang
// (the input must be read, or the connection closed, within a deadline),
// must send no message past the credit granted, nor before its first
// Credit, nor after its Response; its streams must hold no more than
// they granted, within the connection's budget, and give it all back
// once the connection is closed.
//
// The seeds, in testdata/fuzz/FuzzServerStreamFrames, spell a stream of
// each kind run to its end, credit overruns, oversized chunks, frames
// for unknown streams, streams past the limit, and bursts of empty
// messages.
func FuzzServerStreamFrames(f *testing.F) {
	f.Fuzz(func(t *testing.T, input []byte) {
		(&streamFuzz{t: t, in: input}).run(t)
	})
}

// Bounds of a fuzzed connection.
const (
	fuzzMaxFrame   = 1 << 20
	fuzzBudget     = 256 << 10
	fuzzMaxStreams = 4
	fuzzWait       = 5 * time.Second // the bound on a server that must answer: past it, it hangs
)

// streamFuzz is one run of FuzzServerStreamFrames.
type streamFuzz struct {
	t      *testing.T
	in     []byte
	nextID uint64
	h      *fuzzStreamHandler
	sc     *ServerConn
	nc     net.Conn

	mu      sync.Mutex        // guards the fields below
	granted map[uint64]uint64 // the credit given to the server's messages, by stream
	sent    map[uint64]uint64 // the server's message bytes, by stream
	open    map[uint64]bool   // a Credit came and no Response yet
	ended   map[uint64]bool   // a Response came
}

func (z *streamFuzz) byte() byte {
	if len(z.in) == 0 {
		return 0
	}
	c := z.in[0]
	z.in = z.in[1:]
	return c
}

func (z *streamFuzz) u16() int { return int(z.byte())<<8 | int(z.byte()) }

// pick is a stream id: one opened, or one of the two past them.
func (z *streamFuzz) pick() uint64 { return 1 + uint64(z.byte())%(z.nextID+2) }

func (z *streamFuzz) run(t *testing.T) {
	z.granted, z.sent, z.open, z.ended = map[uint64]uint64{}, map[uint64]uint64{}, map[uint64]bool{}, map[uint64]bool{}
	z.h = &fuzzStreamHandler{calls: map[uint64]*fuzzCall{}}
	var readers sync.WaitGroup
	cfg := &ServerConfig{
		Handler: z.h, HeartbeatInterval: time.Minute, HeartbeatTimeout: time.Minute,
		MaxFrame: fuzzMaxFrame, Partial: &Budget{Max: 4 << 20},
		MaxQueued: 64 << 20, Conns: new(atomic.Int64),
		Warn:  func(string, ...any) {},
		Watch: &InlineWatch{}, Readers: &readers,
		Settings:   SettingsFrame(nil, fuzzMaxStreams, fuzzMaxFrame),
		MaxStreams: fuzzMaxStreams, StreamBudget: fuzzBudget,
	}
	local, peer := net.Pipe()
	z.nc = local
	z.sc = NewServerConn(cfg, peer, context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		z.sc.Serve()
	}()
	pong := make(chan struct{}, 1)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		z.drain(t, pong)
	}()
	_ = local.SetWriteDeadline(time.Now().Add(fuzzWait))
	alive := z.write(wire.AppendPreface(nil, wire.Version))
	for ops := 0; alive && len(z.in) > 0 && ops < 256; ops++ {
		alive = z.step()
	}
	if alive && z.write(rawFrame(wire.TypePing, 0xfeed, nil, nil)) {
		// The Pong says the reader took every frame before the Ping.
		select {
		case <-pong:
			z.checkHeld(t)
		case <-drained: // the server closed the connection: a protocol error
		case <-time.After(fuzzWait):
			t.Fatalf("the server neither read its input nor closed the connection within %v", fuzzWait)
		}
	}
	local.Close()
	z.sc.Close(errors.New("the input is over"))
	select {
	case <-served:
	case <-time.After(fuzzWait):
		t.Fatalf("Serve did not return within %v of Close", fuzzWait)
	}
	<-drained
	readers.Wait()
	if used := z.sc.streams.budget.usedNow(); used != 0 {
		t.Fatalf("the closed connection's streams hold %d bytes of its budget; want none", used)
	}
}

// step runs one operation of the input; it reports whether the
// connection still takes frames.
func (z *streamFuzz) step() bool {
	switch op := z.byte() % 14; op {
	case 0: // open a stream: a server stream (granted 0) or not
		z.nextID++
		id, credit := z.nextID, uint64(z.u16())<<(z.byte()%8)
		window := InitialWindow
		if z.byte()%2 == 0 {
			window = 0
		}
		z.h.setWindow(id, window)
		z.mu.Lock()
		z.granted[id] = credit
		z.mu.Unlock()
		b := wire.BeginFrame(nil, wire.TypeRequest, id)
		b = wire.AppendString(b, wire.KeyMethod, "Fuzz.Stream")
		b = wire.AppendString(b, wire.KeyCodec, "msgpack")
		b = wire.AppendField(b, wire.KeyPriority, []byte{z.byte() % 10})
		b = wire.AppendUvarint(b, wire.KeyStream, credit)
		_ = wire.EndHeader(b, 0)
		_ = wire.EndFrame(b, 0, fuzzMaxFrame)
		return z.write(b)
	case 1: // a message, whole, in chunks
		id, n := z.pick(), z.u16()<<(z.byte()%5)
		var b []byte
		for off := 0; off == 0 || off < n; off += ChunkSize {
			size := -1
			if off == 0 {
				size = n
			}
			b = append(b, chunkOf(id, size, min(n-off, ChunkSize))...)
		}
		return z.write(b)
	case 2: // one chunk, with or without Size, of any length
		id, flags := z.pick(), z.byte()
		size := -1
		if flags&1 == 0 {
			size = z.u16() << (flags >> 5)
		}
		n := z.u16()
		if flags&2 == 0 {
			n %= 64
		}
		if flags&4 != 0 {
			n += 2 // up to MaxChunk+1
		}
		return z.write(chunkOf(id, size, n))
	case 3: // a Credit: up to an offset, or without its Credit field
		id, flags := z.pick(), z.byte()
		offset := uint64(z.u16()) << (flags >> 4)
		b := wire.BeginFrame(nil, wire.TypeCredit, id)
		if flags&1 == 0 {
			b = wire.AppendUvarint(b, wire.KeyCredit, offset)
			z.mu.Lock()
			z.granted[id] = max(z.granted[id], offset)
			z.mu.Unlock()
		}
		b = wire.AppendUvarint(b, wire.KeyConsumed, uint64(z.byte()))
		_ = wire.EndHeader(b, 0)
		_ = wire.EndFrame(b, 0, fuzzMaxFrame)
		return z.write(b)
	case 4:
		return z.write(rawFrame(wire.TypeEnd, z.pick(), nil, nil))
	case 5:
		return z.write(rawFrame(wire.TypeCancel, z.pick(), nil, nil))
	case 6: // a unary call
		z.nextID++
		b := wire.BeginFrame(nil, wire.TypeRequest, z.nextID)
		b = wire.AppendString(b, wire.KeyMethod, "Fuzz.Call")
		b = wire.AppendString(b, wire.KeyCodec, "msgpack")
		_ = wire.EndHeader(b, 0)
		b = append(b, 0xc0)
		_ = wire.EndFrame(b, 0, fuzzMaxFrame)
		return z.write(b)
	case 7: // a stream frame with a raw header and body
		t := wire.TypeMessage + wire.Type(z.byte()%3)
		id := z.pick()
		header := make([]byte, z.byte()%16)
		for i := range header {
			header[i] = z.byte()
		}
		return z.write(rawFrame(t, id, header, make([]byte, z.byte())))
	default:
		z.h.act(op, z.pick(), z)
		return true
	}
}

// write writes frames b; it reports false once the server closed the
// connection. A server that stops reading hangs.
func (z *streamFuzz) write(b []byte) bool {
	_, err := z.nc.Write(b)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		z.t.Fatalf("the server took no frame for %v", fuzzWait)
	}
	return err == nil
}

// drain reads what the server sends, checking it, until the connection
// closes; it signals pong at the Pong of the final Ping.
func (z *streamFuzz) drain(t *testing.T, pong chan<- struct{}) {
	r := wire.NewReader(z.nc, ReadBufSize, fuzzMaxFrame)
	if _, err := wire.ReadPreface(r); err != nil {
		return
	}
	var h wire.Header
	for {
		f, err := r.Next()
		if err == nil {
			err = wire.ParseHeader(f.Header, &h)
		}
		if err != nil {
			return
		}
		z.mu.Lock()
		switch f.Type {
		case wire.TypePong:
			if f.ID == 0xfeed {
				pong <- struct{}{}
			}
		case wire.TypeCredit:
			if !z.ended[f.ID] {
				z.open[f.ID] = true
			}
		case wire.TypeMessage:
			z.sent[f.ID] += uint64(len(f.Body))
			if h.HasSize {
				z.sent[f.ID] += MessageCost
			}
			switch {
			case !z.open[f.ID]:
				t.Errorf("the server sent a Message for stream %d before its first Credit, or after its Response", f.ID)
			case z.sent[f.ID] > z.granted[f.ID]:
				t.Errorf("the server sent %d message bytes on stream %d, past the %d granted", z.sent[f.ID], f.ID, z.granted[f.ID])
			}
		case wire.TypeResponse:
			z.open[f.ID], z.ended[f.ID] = false, true
		}
		z.mu.Unlock()
	}
}

// checkHeld checks what the connection's open streams hold, once the
// reader has taken every frame sent.
func (z *streamFuzz) checkHeld(t *testing.T) {
	o := &z.sc.streams
	o.mu.Lock()
	all := make([]*Stream, 0, len(o.streams))
	for _, s := range o.streams {
		all = append(all, s)
	}
	o.mu.Unlock()
	for _, s := range all {
		s.mu.Lock()
		var bytes, room, msgs int
		for _, h := range s.msgs.q[s.msgs.head:] {
			bytes += len(*h.m)
			room += cap(*h.m)
			msgs++
		}
		if s.part != nil {
			bytes += len(*s.part)
			room += cap(*s.part)
		}
		credit := s.granted - s.consumed
		s.mu.Unlock()
		switch {
		case uint64(bytes)+uint64(msgs)*MessageCost > credit:
			t.Errorf("stream %d holds %d bytes, past the %d it granted and was not taken", s.ID, bytes, credit)
		case room > 2*bytes+MaxChunk:
			t.Errorf("stream %d holds %d bytes in buffers of %d", s.ID, bytes, room)
		case msgs > bytes:
			t.Errorf("stream %d holds %d messages of %d bytes in all: it keeps empty messages", s.ID, msgs, bytes)
		}
	}
	if used := o.budget.usedNow(); used > fuzzBudget {
		t.Errorf("the streams hold %d bytes of the budget, over its %d", used, fuzzBudget)
	}
}

// usedNow is what b has granted and not had back.
func (b *streamBudget) usedNow() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// rawFrame is a frame with the raw header fields header and body.
func rawFrame(t wire.Type, id uint64, header, body []byte) []byte {
	b := wire.BeginFrame(nil, t, id)
	b = append(b, header...)
	_ = wire.EndHeader(b, 0)
	b = append(b, body...)
	_ = wire.EndFrame(b, 0, 1<<30)
	return b
}

// chunkOf is a Message frame of stream id with n bytes; size >= 0 adds
// the Size field of a message's first chunk.
func chunkOf(id uint64, size, n int) []byte {
	b := wire.BeginFrame(nil, wire.TypeMessage, id)
	if size >= 0 {
		b = wire.AppendUvarint(b, wire.KeySize, uint64(size))
	}
	_ = wire.EndHeader(b, 0)
	b = append(b, make([]byte, n)...)
	_ = wire.EndFrame(b, 0, 1<<30)
	return b
}

// fuzzCall is a call of fuzzStreamHandler.
type fuzzCall struct {
	st       CallState
	h        *fuzzStreamHandler
	sink     Sink
	answered bool
}

func (c *fuzzCall) State() *CallState     { return &c.st }
func (*fuzzCall) Name() string            { return "Fuzz.Stream" }
func (*fuzzCall) Estimate() time.Duration { return 0 }
func (*fuzzCall) ReplySize() *ReplySize   { return nil }
func (*fuzzCall) Cancel(error)            {}
func (*fuzzCall) Release()                {}
func (*fuzzCall) RunInline() bool         { return false }

// fuzzStreamHandler answers unary calls at once, and accepts streams
// with the window the input chose, as package kiev does; the input then
// acts as their handlers (act).
type fuzzStreamHandler struct {
	mu      sync.Mutex
	calls   map[uint64]*fuzzCall // streams accepted, by id
	windows map[uint64]int
}

func (h *fuzzStreamHandler) setWindow(id uint64, w int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.windows == nil {
		h.windows = map[uint64]int{}
	}
	h.windows[id] = w
}

func (h *fuzzStreamHandler) Open(hd *Head, _ context.Context, sink Sink) (Call, codes.Code, string) {
	c := &fuzzCall{h: h, sink: sink}
	c.st.ID = hd.ID
	return c, 0, ""
}

func (*fuzzStreamHandler) Refuse([]byte, string) (codes.Code, string) {
	return codes.Overloaded, "refused"
}

func (c *fuzzCall) Submit(context.Context) {
	h := c.h
	s := c.st.Stream
	if s == nil {
		_ = c.sink.Reply(c, codec.Msgpack, 1)
		c.sink.Done(c)
		return
	}
	h.mu.Lock()
	h.calls[c.st.ID] = c
	w := h.windows[c.st.ID]
	h.mu.Unlock()
	s.Grant(w)
}

// act runs op as stream id's handler would: take its messages, send,
// end its sending, return, or give up as its context ends.
func (h *fuzzStreamHandler) act(op byte, id uint64, z *streamFuzz) {
	h.mu.Lock()
	c := h.calls[id]
	h.mu.Unlock()
	if c == nil || c.answered {
		return
	}
	s := c.st.Stream
	done, cancel := context.WithCancel(context.Background())
	cancel() // no act waits
	switch op {
	case 8: // take up to n messages, those already there
		for range 1 + z.byte()%8 {
			s.mu.Lock()
			ready := s.queuedLocked()
			s.mu.Unlock()
			if !ready {
				break
			}
			if m, _, err := s.Recv(done); err == nil {
				PutBuf(m)
			}
		}
	case 9:
		_ = s.Send(done, make([]byte, z.u16()<<(z.byte()%6)))
	case 10:
		_ = s.CloseSend()
	case 11, 12, 13: // return: success, an error, or an error as the context ends
		c.answered = true
		switch op {
		case 11:
			_ = c.sink.Reply(c, codec.Msgpack, nil)
		case 13:
			s.Abort(context.Canceled)
			fallthrough
		default:
			_ = c.sink.Fail(c, codes.Code(100+z.byte()), "failed", false)
		}
		c.sink.Done(c)
	}
}

package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/kievrpc/kiev/internal/wire"
)

// A stream is a call that carries many messages each way on one
// connection (PROTOCOL.md, Streams). It opens with a Request that carries
// KeyStream; then either side sends Messages, each split into chunks, and
// the client ends its sending with End; the server ends the stream with
// its Response, as it ends a call. The client may cancel it with Cancel.
//
// Each direction is flow-controlled by credit, counted in message bytes
// from the stream's start: the receiver lets the sender send up to an
// absolute offset (a Credit frame), which it moves forward as its
// application takes messages. Offsets make a Credit idempotent, and what a
// stream's receiver holds is bounded by what it granted. A connection's
// receiver grants no more, over all its streams, than its budget
// (streamBudget), so its memory is bounded by the budget, not by streams ×
// window.
//
// The reader of a connection never blocks on a stream: it appends a
// chunk to the stream's buffer (the credit bounds it) and goes on, so a
// consumer that stops reading stops only its own stream. The sender's
// messages wait in the stream until the connection's writer takes them,
// a chunk at a time, stream after stream (Link.streamFrames).

// Stream sizes and bounds.
const (
	// ChunkSize is the largest chunk a sender puts in one Message frame:
	// a large message holds up the connection's other streams, replies
	// and pings by at most this much.
	ChunkSize = 32 << 10
	// MaxChunk is the largest chunk a receiver takes; past it is a
	// protocol error.
	MaxChunk = 64 << 10
	// MessageCost is the credit a message costs beyond its bytes, which
	// its first chunk takes: what a receiver pays to hold a message, so
	// that a peer's empty or one-byte messages cannot make a stream hold
	// many times the bytes it granted.
	MessageCost = 32
	// InitialWindow is a stream's first window, each way.
	InitialWindow = 64 << 10
	// MaxWindow bounds how far a stream's window grows.
	MaxWindow = 1 << 20
	// DefaultStreamBudget is what a connection's streams may hold
	// received and not yet taken by their application, in all.
	DefaultStreamBudget = 16 << 20
	// DefaultMaxStreams is how many streams a server lets a connection
	// have open at once.
	DefaultMaxStreams = 10000
	// maxStreamQueued bounds what a stream's sender queues ahead of the
	// writer, whatever its credit: enough to keep the connection busy.
	maxStreamQueued = 256 << 10
)

// ErrStreamsUnsupported says the peer does not speak streams.
var ErrStreamsUnsupported = errors.New("the server does not serve streams (it runs a kiev from before streams); upgrade it, or call its unary methods")

// StreamError is how a stream failed with its connection (or as its peer
// reset it): Err says why, and Sent and Taken say how many of the
// messages this side sent the peer's application took, as far as this
// side knows from the peer's last credit, so that a sender can resume
// from message Taken on a new stream.
type StreamError struct {
	Err   error
	Sent  uint64 // messages this side queued
	Taken uint64 // of those, how many the peer's application had taken
}

func (e *StreamError) Error() string {
	return fmt.Sprintf("kiev: stream lost: %v; the peer's application had taken %d of the %d messages this side sent (resume from message %d)", e.Err, e.Taken, e.Sent, e.Taken)
}

func (e *StreamError) Unwrap() error { return e.Err }

// streamOwner is what a Stream needs of its connection.
type streamOwner struct {
	link     *Link
	maxFrame int
	budget   streamBudget

	open atomic.Int32 // len(streams), read without mu

	// What the connection's streams have queued and the writer has not
	// framed yet, bounded by sendMax: a peer that grants much credit and
	// reads nothing holds no more than that (and each stream's one
	// message).
	sendQueued  atomic.Int64
	sendMax     func() int
	roomWaiters atomic.Int32
	roomMu      sync.Mutex    // guards room
	room        chan struct{} // closed when bytes are framed

	// The reader's own: the streams whose Recv waits and may proceed,
	// woken together once the reader has read every whole frame it
	// holds (flushWakes), so that a Recv wakes once for a burst of
	// messages, and then takes them one after the other without waiting.
	wakes []*Stream

	mu      sync.Mutex         // guards the fields below
	streams map[uint64]*Stream // open streams, by id
	highest uint64             // the highest id a stream was opened with
	err     error              // set once the connection is gone: streams fail with it
}

func (o *streamOwner) init(link *Link, maxFrame int, budget int, sendMax func() int) {
	o.link, o.maxFrame = link, maxFrame
	o.budget.max = int64(budget)
	o.streams = make(map[uint64]*Stream)
	o.sendMax = sendMax
}

// sendFits reports whether n more bytes fit what the connection's
// streams may have queued for the writer.
func (o *streamOwner) sendFits(n int) bool {
	return o.sendQueued.Load()+int64(n) <= int64(o.sendMax())
}

// roomChan returns the channel closed once the writer takes streams'
// bytes while senders wait for room. REQUIRES the caller to count itself
// in roomWaiters first, so that no close is missed.
func (o *streamOwner) roomChan() chan struct{} {
	o.roomMu.Lock()
	defer o.roomMu.Unlock()
	if o.room == nil {
		o.room = make(chan struct{})
	}
	return o.room
}

// framed takes n bytes off what the connection's streams have queued,
// and wakes the senders that wait for room.
func (o *streamOwner) framed(n int) {
	if n == 0 {
		return
	}
	o.sendQueued.Add(-int64(n))
	if o.roomWaiters.Load() > 0 {
		o.roomMu.Lock()
		if o.room != nil {
			close(o.room)
			o.room = nil
		}
		o.roomMu.Unlock()
	}
}

// count is how many streams are open.
func (o *streamOwner) count() int { return int(o.open.Load()) }

// add opens a stream of id, or fails if the connection is gone.
func (o *streamOwner) add(s *Stream) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return o.err
	}
	o.streams[s.ID] = s
	o.open.Store(int32(len(o.streams)))
	o.highest = max(o.highest, s.ID)
	return nil
}

// seen records that a Request opening a stream of id was read, whether
// or not the stream was admitted: frames for it are dropped from now
// on, not a protocol error (PROTOCOL.md, Streams > Violations).
func (o *streamOwner) seen(id uint64) {
	o.mu.Lock()
	o.highest = max(o.highest, id)
	o.mu.Unlock()
}

// get returns the open stream of id; known says id was once opened, so
// that frames for a stream that has ended (which race its end) are
// dropped, and frames for one never opened are a protocol error.
func (o *streamOwner) get(id uint64) (s *Stream, known bool) {
	o.mu.Lock()
	s = o.streams[id]
	known = id <= o.highest
	o.mu.Unlock()
	return s, known
}

// forget closes the book on s.
func (o *streamOwner) forget(s *Stream) {
	o.mu.Lock()
	if o.streams[s.ID] == s {
		delete(o.streams, s.ID)
		o.open.Store(int32(len(o.streams)))
	}
	o.mu.Unlock()
}

// failAll fails every stream with err: the connection is gone.
func (o *streamOwner) failAll(err error) {
	o.mu.Lock()
	if o.err == nil {
		o.err = err
	}
	all := make([]*Stream, 0, len(o.streams))
	for _, s := range o.streams {
		all = append(all, s)
	}
	clear(o.streams)
	o.open.Store(0)
	o.mu.Unlock()
	for _, s := range all {
		s.fail(err, true)
	}
}

// frame takes a Message, Credit or End frame f, with header h, from the
// reader. It returns a protocol error, which closes the connection.
func (o *streamOwner) frame(f *wire.Frame, h *wire.Header) error {
	s, known := o.get(f.ID)
	if s == nil {
		if !known {
			return fmt.Errorf("kiev: protocol error: %s frame for stream %d, which was never opened", frameName(f.Type), f.ID)
		}
		return nil // the stream ended while the frame was on its way
	}
	switch f.Type {
	case wire.TypeMessage:
		wakeRecv, err := s.receive(h, f.Body)
		if wakeRecv && !s.wakeQueued {
			s.wakeQueued = true
			o.wakes = append(o.wakes, s)
		}
		return err
	case wire.TypeCredit:
		if !h.HasCredit {
			return fmt.Errorf("kiev: protocol error: a Credit frame for stream %d without its Credit field", f.ID)
		}
		s.credited(h.Credit, h.Consumed)
	case wire.TypeEnd:
		return s.peerEnded()
	}
	return nil
}

// flushWakes wakes the streams whose Recv waits for the messages the
// reader gave them: the reader calls it before it may block (a read, or
// a wait for room), so that no wake waits on the peer.
func (o *streamOwner) flushWakes() {
	for i, s := range o.wakes {
		s.wakeQueued = false
		wake(s.recvWake)
		o.wakes[i] = nil
	}
	o.wakes = o.wakes[:0]
}

// frameName names a stream frame's type, with its article.
func frameName(t wire.Type) string {
	switch t {
	case wire.TypeMessage:
		return "a Message"
	case wire.TypeCredit:
		return "a Credit"
	case wire.TypeEnd:
		return "an End"
	}
	return fmt.Sprintf("a type-%d", t)
}

// Stream is one stream of a connection, on either side: the messages it
// has received, and those it sends, with the credit that bounds each.
//
// Send may be called from one goroutine at a time, and Recv from one
// (the same or another); the rest are safe for concurrent use.
type Stream struct {
	ID    uint64
	prio  uint8
	owner *streamOwner
	// recvWake holds a token when the receiving side may proceed (or,
	// before the server accepted the stream, Accepted): one waiter (see
	// Stream).
	recvWake chan struct{}
	// wakeQueued is the reader's own: s is on owner.wakes.
	wakeQueued bool

	mu sync.Mutex // guards the fields below
	// sendWake is recvWake's twin for the sending side, made by the first
	// Send that waits: most streams' Sends never wait.
	sendWake chan struct{}
	// Receiving.
	msgs     fifo[inMsg] // messages whole, oldest first
	empties  uint64      // empty messages after the last of msgs: they hold no buffer
	part     *[]byte     // the message in progress
	partLeft uint64      // its bytes still to come
	recvd    uint64      // message bytes received
	consumed uint64      // message bytes the application took
	granted  uint64      // the peer may send up to this offset
	window   uint64      // the grant's reach past consumed
	taken    uint64      // messages the application took
	reported uint64      // the taken the peer was last told of (Consumed)
	peerEnd  bool        // the peer sends no more: End, or the server's Response
	final    *Final      // the server's Response (a client's stream)
	released bool        // its budget is given back: it receives no more
	// unreturned is what the application took that the budget has not
	// been given back yet (see Recv).
	unreturned  uint64
	recvWaiting bool // Recv waits: chunk wakes it
	accepted    bool // a Credit came: the server accepted the stream
	// Sending.
	credit    uint64        // the peer lets us send up to this offset
	sent      uint64        // message bytes framed
	out       fifo[*[]byte] // the messages queued, each in its buffer; the first has outHead bytes framed
	outHead   int
	outLeft   int    // the bytes of out not yet framed
	outRef    bool   // the writer writes chunks of out's first message from its buffer
	queued    uint64 // messages queued, in all
	peerTaken uint64 // of ours, the messages the peer's application took
	first     []byte // the server's first Credit, which accepts the stream: sent before anything
	last      []byte // End, or the server's Response, or both: sent once out is empty
	sendEnded bool   // End or the Response is queued: Send fails
	finished  bool   // the Response is queued, or came: nothing more is sent
	inReady   bool   // on the link's ready list
	onLast    func() // called by the writer once last is written
	err       error  // the stream is over: everything fails with err
}

// inMsg is a message received whole, and the empty messages that came
// before it: those are counted, not kept, so that a peer's empty
// messages, which need no credit, hold no memory.
type inMsg struct {
	m       *[]byte
	empties uint64
}

// Final is the server's Response that ended a client's stream.
type Final struct {
	Response
	buf *[]byte // holds the Response's bytes
}

// Release gives back the bytes of a Final.
func (f *Final) Release() { PutBuf(f.buf) }

func newStream(o *streamOwner, id uint64, prio uint8) *Stream {
	return &Stream{
		ID: id, prio: prio, owner: o, window: InitialWindow,
		recvWake: make(chan struct{}, 1),
	}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// receive takes a chunk of a message, from the reader; wakeRecv says a
// Recv waits and may now proceed, which the caller wakes.
func (s *Stream) receive(h *wire.Header, body []byte) (wakeRecv bool, err error) {
	n := uint64(len(body))
	if len(body) > MaxChunk {
		return false, fmt.Errorf("kiev: protocol error: a chunk of %d bytes on stream %d, over the %d-byte maximum", len(body), s.ID, MaxChunk)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	inPart := s.partLeft > 0 // the chunk continues a message
	cost := n
	if !inPart {
		cost += MessageCost
	}
	switch {
	case s.peerEnd:
		return false, fmt.Errorf("kiev: protocol error: a Message on stream %d after its sender ended it", s.ID)
	case s.recvd+cost > s.granted:
		return false, fmt.Errorf("kiev: protocol error: stream %d sent past its credit: %d bytes granted, %d sent", s.ID, s.granted, s.recvd+cost)
	case !inPart && !h.HasSize:
		return false, fmt.Errorf("kiev: protocol error: the first chunk of a message on stream %d has no Size", s.ID)
	case inPart && h.HasSize:
		return false, fmt.Errorf("kiev: protocol error: a new message on stream %d before the last one's %d bytes came", s.ID, s.partLeft)
	}
	s.recvd += cost
	s.accepted = true             // a server's first frame is its Credit; be lenient all the same
	if h.Consumed > s.peerTaken { // a bidirectional stream's progress
		s.peerTaken = min(h.Consumed, s.queued)
	}
	keep := s.err == nil && !s.finished // else ended on this side: count the bytes, keep none
	if !inPart {
		if h.Size > uint64(s.owner.maxFrame) {
			return false, fmt.Errorf("kiev: protocol error: a message of %d bytes on stream %d, over the %d-byte limit (WithMaxFrameSize)", h.Size, s.ID, s.owner.maxFrame)
		}
		if h.Size == 0 && n == 0 {
			if keep {
				s.empties++
			}
			return keep && s.recvWaiting, nil
		}
		s.partLeft = h.Size
		if keep && h.Size >= n {
			s.part = msgBuf(int(min(h.Size, MaxChunk)))
		}
	}
	if n > s.partLeft {
		return false, fmt.Errorf("kiev: protocol error: a chunk on stream %d runs %d bytes past the end of its message", s.ID, n-s.partLeft)
	}
	s.partLeft -= n
	if s.part == nil {
		return false, nil
	}
	*s.part = append(*s.part, body...)
	if s.partLeft == 0 {
		s.msgs.push(inMsg{s.part, s.empties})
		s.part, s.empties = nil, 0
		return s.recvWaiting, nil
	}
	// A message larger than the window: a waiting Recv grants it the rest.
	return s.recvd == s.granted && !s.queuedLocked() && s.recvWaiting, nil
}

// msgBuf returns a buffer for the first n bytes of a message received:
// from the pool, unless its capacity would dwarf the message, so that
// what a stream holds is close to the bytes it was granted.
func msgBuf(n int) *[]byte {
	if n >= minPooledBuf {
		b := GetBuf(n)
		if cap(*b) <= 2*n {
			return b
		}
		PutBuf(b)
	}
	b := make([]byte, 0, n)
	return &b
}

// queuedLocked reports whether a message is there for Recv. REQUIRES
// s.mu is held.
func (s *Stream) queuedLocked() bool { return s.msgs.len() > 0 || s.empties > 0 }

// nextLocked takes the next message for Recv: a buffer of its own, or
// of the pool for an empty one. REQUIRES s.mu is held, and queuedLocked.
func (s *Stream) nextLocked() *[]byte {
	if s.msgs.len() == 0 {
		s.empties--
		return GetBuf(0)
	}
	if h := &s.msgs.q[s.msgs.head]; h.empties > 0 {
		h.empties--
		return GetBuf(0)
	}
	return s.msgs.pop().m
}

// credited takes the peer's Credit: it may send up to offset, and its
// application has taken taken of our messages.
func (s *Stream) credited(offset, taken uint64) {
	s.mu.Lock()
	accepting := !s.accepted
	s.accepted = true
	s.peerTaken = max(s.peerTaken, min(taken, s.queued))
	if offset > s.credit {
		s.credit = offset
		s.readyLocked()
	}
	sendWake := s.sendWake
	s.mu.Unlock()
	wake(sendWake)
	if accepting {
		wake(s.recvWake) // for Accepted
	}
}

// peerEnded takes the peer's End: it sends no more messages.
func (s *Stream) peerEnded() error {
	s.mu.Lock()
	if s.partLeft > 0 {
		left := s.partLeft
		s.mu.Unlock()
		return fmt.Errorf("kiev: protocol error: an End on stream %d inside a message, %d bytes short of its Size", s.ID, left)
	}
	s.peerEnd, s.accepted = true, true
	s.mu.Unlock()
	wake(s.recvWake)
	return nil
}

// ended takes the server's Response r, which ends a client's stream:
// Recv returns it at the end, after the messages that came before it.
func (s *Stream) ended(r *Response) {
	buf := GetBuf(len(r.Msg) + len(r.Codec) + len(r.Body))
	b := append(append(append((*buf)[:0], r.Msg...), r.Codec...), r.Body...)
	*buf = b
	f := &Final{Response: *r, buf: buf}
	f.Msg = b[:len(r.Msg)]
	f.Codec = b[len(r.Msg) : len(r.Msg)+len(r.Codec)]
	f.Body = b[len(r.Msg)+len(r.Codec):]
	s.mu.Lock()
	s.peerEnd, s.final = true, f
	s.dropOut()
	s.sendEnded, s.finished = true, true // the server takes no more of ours
	sendWake := s.sendWake
	s.mu.Unlock()
	s.owner.forget(s)
	s.release()
	wake(s.recvWake)
	wake(sendWake)
}

// release gives back what s holds of its connection's budget, once: it
// receives no more.
func (s *Stream) release() {
	s.mu.Lock()
	n := int64(0)
	if !s.released {
		s.released = true
		n = int64(s.granted - s.consumed + s.unreturned)
		s.unreturned = 0
	}
	s.mu.Unlock()
	for _, o := range s.owner.budget.give(n) {
		o.regrant()
	}
}

// Recv returns the next message, whose buffer the caller gives back with
// PutBuf once decoded. At the end it returns io.EOF, once the peer has
// sent End (or, on a client, the server answered with success), and the
// final Response, if any, with it; or the error the stream failed with.
// It waits within ctx.
func (s *Stream) Recv(ctx context.Context) (*[]byte, *Final, error) {
	s.mu.Lock()
	for !s.queuedLocked() {
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return nil, nil, err
		}
		if s.peerEnd && s.partLeft == 0 {
			f := s.final
			s.final = nil
			s.mu.Unlock()
			return nil, f, io.EOF
		}
		c := s.growForPart()
		s.recvWaiting = true
		s.mu.Unlock()
		s.sendCredit(c)
		select {
		case <-s.recvWake:
		case <-ctx.Done():
			s.mu.Lock()
			s.recvWaiting = false
			s.mu.Unlock()
			return nil, nil, ctx.Err()
		}
		s.mu.Lock()
		s.recvWaiting = false
	}
	m := s.nextLocked()
	n := uint64(len(*m)) + MessageCost
	s.consumed += n
	s.taken++
	if s.recvd == s.granted && s.granted-s.consumed <= s.window/2 && s.window < MaxWindow {
		// The sender used all its credit before we granted more: it
		// waits on us, and a larger window keeps it sending through the
		// round trip.
		s.window = min(2*s.window, MaxWindow, uint64(s.owner.budget.max/4))
	}
	// What the application took goes back to the budget a quarter of
	// the window at a time, so that the budget's lock is not taken for
	// every message.
	var back int64
	if !s.released {
		s.unreturned += n
		if s.unreturned >= s.window/4 {
			back, s.unreturned = int64(s.unreturned), 0
		}
	}
	c := s.grantLocked()
	s.mu.Unlock()
	starved := s.owner.budget.give(back)
	s.sendCredit(c)
	for _, o := range starved {
		o.regrant()
	}
	return m, nil, nil
}

// credit is a Credit frame to send, if ok.
type credit struct {
	ok             bool
	granted, taken uint64
}

// grantLocked moves the grant forward to consumed + window, as the
// budget allows, once the peer has used half the window; it returns the
// Credit to send, if any. REQUIRES s.mu is held.
func (s *Stream) grantLocked() credit {
	if s.err != nil || s.peerEnd || s.released {
		return credit{}
	}
	want := s.consumed + s.window
	if want <= s.granted || s.granted-s.consumed > s.window/2 {
		return credit{}
	}
	n := s.owner.budget.take(s, int64(want-s.granted))
	if n <= 0 {
		return credit{}
	}
	s.granted += uint64(n)
	return s.creditLocked()
}

// growForPart is the grant of a stream whose application waits for a
// message while its peer has no credit left: a message larger than the
// window is granted the rest of it, or else its sender could never
// finish it; and a stream the budget starves (stalled streams took it)
// is granted a chunk all the same, since its application takes what
// comes at once. So a stream whose application reads always moves, and
// what is held past the budget is held by readers that wait, never by
// stalled streams. REQUIRES s.mu is held.
func (s *Stream) growForPart() credit {
	if s.err != nil || s.released || s.peerEnd {
		return s.grantLocked()
	}
	if s.partLeft > 0 {
		if s.recvd < s.granted {
			return s.grantLocked()
		}
		need := s.recvd + s.partLeft - s.granted
		s.owner.budget.force(int64(need))
		s.granted += need
		return s.creditLocked()
	}
	if s.granted-s.recvd > MessageCost { // the peer can send a message
		return s.grantLocked()
	}
	if c := s.grantLocked(); s.granted-s.recvd > MessageCost {
		return c
	}
	n := min(s.window, ChunkSize) + MessageCost
	s.owner.budget.force(int64(n))
	s.granted += n
	return s.creditLocked()
}

// creditLocked is the Credit of s as it stands. REQUIRES s.mu is held.
func (s *Stream) creditLocked() credit {
	s.reported = s.taken
	return credit{true, s.granted, s.taken}
}

// sendCredit sends c, if ok.
func (s *Stream) sendCredit(c credit) {
	if !c.ok {
		return
	}
	var tmp [wire.HeaderSize + 2*(2+10)]byte
	_ = s.owner.link.Send(appendCredit(tmp[:0], s.ID, c, s.owner.maxFrame))
}

// appendCredit appends the Credit frame c of stream id to b.
func appendCredit(b []byte, id uint64, c credit, maxFrame int) []byte {
	start := len(b)
	b = wire.BeginFrame(b, wire.TypeCredit, id)
	b = wire.AppendUvarint(b, wire.KeyCredit, c.granted)
	b = wire.AppendUvarint(b, wire.KeyConsumed, c.taken)
	_ = wire.EndHeader(b, start)
	_ = wire.EndFrame(b, start, maxFrame)
	return b
}

// regrant tries again a grant the budget refused.
func (s *Stream) regrant() {
	s.mu.Lock()
	c := s.grantLocked()
	s.mu.Unlock()
	s.sendCredit(c)
}

// Grant grants the peer's messages an initial credit of window bytes, as
// the budget allows, and sends it: on a server, this is also how the
// client learns that its stream was accepted (window 0 for a stream that
// receives nothing).
//
// The Credit goes out through the stream's own queue, ahead of its
// messages, so that the client sees the acceptance first.
func (s *Stream) Grant(window int) {
	s.mu.Lock()
	s.grantInitial(window)
	c := s.creditLocked()
	s.first = appendCredit(s.first[:0], s.ID, c, s.owner.maxFrame)
	s.readyLocked()
	s.mu.Unlock()
}

// grantInitial sets the stream's window and grants up to window bytes
// as the budget allows: no more than a sixteenth of the room left, so
// that streams opened and never read cannot take the whole budget from
// those opened after them. REQUIRES s.mu is held.
func (s *Stream) grantInitial(window int) {
	if window > 0 {
		s.window = uint64(window)
		s.granted += uint64(max(s.owner.budget.takeShare(s, int64(window), 16), 0))
	}
}

// Accepted waits, within ctx, until the server accepted the stream (its
// first Credit), and reports true; or ended it unaccepted (its Response,
// which Recv returns), and reports false.
func (s *Stream) Accepted(ctx context.Context) (bool, error) {
	for {
		s.mu.Lock()
		ok, ended, err := s.accepted, s.final != nil || s.peerEnd, s.err
		s.mu.Unlock()
		switch {
		case err != nil:
			return false, err
		case ok || ended:
			return ok, nil
		}
		select {
		case <-s.recvWake:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// Send queues a copy of msg, an encoded message, as SendBuf does.
func (s *Stream) Send(ctx context.Context, msg []byte) error {
	buf := GetBuf(len(msg))
	*buf = append((*buf)[:0], msg...)
	err := s.SendBuf(ctx, buf)
	if err != nil {
		PutBuf(buf)
	}
	return err
}

// SendBuf queues the encoded message in *buf, whole: once the bytes
// queued before it fit in the credit the peer granted (and in
// maxStreamQueued), or at once when nothing is queued. ctx bounds only
// the wait: a SendBuf that gives up leaves the stream as it was. On
// success the stream takes buf, and gives it back to the pool (PutBuf)
// once framed; on failure the caller keeps it.
func (s *Stream) SendBuf(ctx context.Context, buf *[]byte) error {
	n := len(*buf)
	if n > s.owner.maxFrame {
		return fmt.Errorf("%w: a message of %d bytes, over the %d-byte limit; send less or raise WithMaxFrameSize on both sides", ErrTooLarge, n, s.owner.maxFrame)
	}
	s.mu.Lock()
	for {
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return err
		}
		if s.sendEnded {
			s.mu.Unlock()
			return ErrSendEnded
		}
		pending := uint64(s.outLeft) + MessageCost*uint64(s.out.len())
		if pending == 0 {
			break // one message a stream always queues: its sender's own memory
		}
		credited := pending+uint64(n)+MessageCost <= min(s.credit-s.sent, maxStreamQueued)
		if credited && s.owner.sendFits(n) {
			break
		}
		var room chan struct{}
		if credited { // the connection's streams have queued all they may
			s.owner.roomWaiters.Add(1)
			room = s.owner.roomChan()
			if s.owner.sendFits(n) {
				s.owner.roomWaiters.Add(-1)
				continue
			}
		}
		if s.sendWake == nil {
			s.sendWake = make(chan struct{}, 1)
		}
		sendWake := s.sendWake
		s.mu.Unlock()
		select {
		case <-sendWake:
		case <-room:
		case <-ctx.Done():
			if room != nil {
				s.owner.roomWaiters.Add(-1)
			}
			return ctx.Err()
		}
		if room != nil {
			s.owner.roomWaiters.Add(-1)
		}
		s.mu.Lock()
	}
	if cap(*buf) > 2*n+minPooledBuf {
		// A buffer that dwarfs its message: queue a copy, so that what
		// a stream holds queued is close to what it counts.
		b := msgBuf(n)
		*b = append(*b, *buf...)
		PutBuf(buf)
		buf = b
	}
	s.out.push(buf)
	s.outLeft += n
	s.owner.sendQueued.Add(int64(n))
	s.queued++
	s.readyLocked()
	s.mu.Unlock()
	return nil
}

// ErrSendEnded is what Send fails with once this side ended its sending.
var ErrSendEnded = errors.New("kiev: the stream's sending side is closed (CloseSend, or the stream ended); send nothing after it")

// Sent and Taken report the messages this side queued, and how many of
// them the peer's application took, as of the peer's last Credit.
func (s *Stream) Sent() (sent, taken uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queued, s.peerTaken
}

// CloseSend queues End after the messages queued: this side sends no
// more. It is idempotent.
func (s *Stream) CloseSend() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if s.sendEnded {
		return nil
	}
	s.last = wire.BeginFrame(s.last, wire.TypeEnd, s.ID)
	_ = wire.EndFrame(s.last, len(s.last)-wire.HeaderSize, s.owner.maxFrame)
	s.sendEnded = true
	s.readyLocked()
	wake(s.sendWake)
	return nil
}

// Finish queues frame, the server's Response, after the messages
// queued: it ends the stream, which its connection forgets once the
// frame is written. done, if not nil, is called then, or when the stream
// fails first. A second Finish does nothing.
func (s *Stream) Finish(frame []byte, done func()) error {
	s.mu.Lock()
	if s.err != nil || s.finished {
		err := s.err
		s.mu.Unlock()
		if done != nil {
			done()
		}
		return err
	}
	s.last = append(s.last, frame...)
	s.sendEnded, s.finished = true, true
	s.onLast = done
	s.readyLocked()
	msgs := s.dropIn()
	sendWake := s.sendWake
	s.mu.Unlock()
	putHeld(msgs)
	s.release() // nobody reads on: what it granted goes back to the budget
	wake(sendWake)
	return nil
}

// Reset drops what s has queued and not sent, and queues frame (the
// server's Response) at once: a drain or a maximum age that ends the
// stream without waiting for a reader that does not read.
func (s *Stream) Reset(frame []byte, done func()) error {
	s.mu.Lock()
	if !s.finished {
		s.dropOut()
	}
	s.mu.Unlock()
	return s.Finish(frame, done)
}

// dropOut forgets the messages queued. REQUIRES s.mu is held.
func (s *Stream) dropOut() {
	s.owner.framed(s.outLeft)
	for i, m := range s.out.drain() {
		if i == 0 && s.outRef {
			continue // the writer may be writing from it: the GC frees it
		}
		PutBuf(m)
	}
	s.outHead, s.outLeft, s.outRef = 0, 0, false
	s.first, s.last = nil, nil
}

// Abort ends s on this side with err, sending nothing more: the client
// canceled it, or its handler's context ended.
func (s *Stream) Abort(err error) { s.fail(err, false) }

// fail ends s with err; lost says its connection is gone, and err is
// wrapped in a StreamError that says how far the peer got.
func (s *Stream) fail(err error, lost bool) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	if lost {
		err = &StreamError{Err: err, Sent: s.queued, Taken: s.peerTaken}
	}
	s.err = err
	s.dropOut()
	msgs := s.dropIn()
	onLast := s.onLast
	s.onLast = nil
	sendWake := s.sendWake
	s.mu.Unlock()
	putHeld(msgs)
	s.owner.forget(s)
	s.release()
	wake(s.recvWake)
	wake(sendWake)
	if onLast != nil {
		onLast()
	}
}

// dropIn forgets the messages received and not taken, and returns them
// for putHeld. REQUIRES s.mu is held.
func (s *Stream) dropIn() []inMsg {
	msgs := s.msgs.drain()
	s.empties = 0
	if s.part != nil {
		msgs = append(msgs, inMsg{m: s.part})
		s.part = nil
	}
	return msgs
}

// putHeld gives back the buffers of msgs.
func putHeld(msgs []inMsg) {
	for _, h := range msgs {
		PutBuf(h.m)
	}
}

// Err is why the stream ended on this side, or nil.
func (s *Stream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// readyLocked puts s on its link's ready list if it has frames the
// writer may send. REQUIRES s.mu is held.
func (s *Stream) readyLocked() {
	if !s.inReady && s.sendable() {
		s.inReady = true
		s.owner.link.ready(s)
	}
}

// sendable reports whether the writer may send a frame of s now.
// REQUIRES s.mu is held.
func (s *Stream) sendable() bool {
	if len(s.first) > 0 {
		return true
	}
	if s.out.len() > 0 {
		if s.outHead == 0 { // a message's first chunk: its cost, and a byte if it has any
			return s.credit-s.sent >= MessageCost+min(uint64(len(*s.out.peek())), 1)
		}
		return s.credit > s.sent
	}
	return len(s.last) > 0
}

// frames appends to b up to chunks of s's frames that the credit allows,
// for the writer; more says s has frames left to send.
func (s *Stream) frames(b []byte, chunks int) (_ []byte, more bool) {
	s.mu.Lock()
	freed := false
	if len(s.first) > 0 {
		b = append(b, s.first...)
		s.first = nil
	}
	for ; chunks > 0 && s.sendable(); chunks-- {
		if s.out.len() == 0 {
			b = append(b, s.last...)
			s.last = s.last[:0]
			break
		}
		msg := *s.out.peek()
		size := len(msg)
		avail := s.credit - s.sent
		if s.outHead == 0 {
			avail -= MessageCost // sendable: there is that much
			s.sent += MessageCost
		}
		n := min(size-s.outHead, ChunkSize, int(min(avail, MaxChunk)))
		start := len(b)
		b = wire.BeginFrame(b, wire.TypeMessage, s.ID)
		if s.outHead == 0 {
			b = wire.AppendUvarint(b, wire.KeySize, uint64(size))
			if s.taken > s.reported { // how far this side's application got, for free
				b = wire.AppendUvarint(b, wire.KeyConsumed, s.taken)
				s.reported = s.taken
			}
		}
		_ = wire.EndHeader(b, start)
		body := msg[s.outHead : s.outHead+n]
		if n >= minRefChunk {
			// Written from the message's buffer, not copied (Link.write).
			_ = wire.EndFrameBefore(b, start, n, s.owner.maxFrame)
			s.owner.link.refer(len(b), body)
			s.outRef = true
		} else {
			b = append(b, body...)
			_ = wire.EndFrame(b, start, s.owner.maxFrame)
		}
		s.owner.framed(n)
		s.outHead += n
		s.outLeft -= n
		s.sent += uint64(n)
		if s.outHead == size {
			if m := s.out.pop(); s.outRef {
				s.owner.link.releaseAfterWrite(m)
			} else {
				PutBuf(m)
			}
			s.outHead, s.outRef = 0, false
			freed = true
		}
	}
	more = s.sendable()
	s.inReady = more
	var onLast func()
	done := s.finished && len(s.last) == 0 && s.out.len() == 0
	if done {
		onLast, s.onLast = s.onLast, nil
	}
	sendWake := s.sendWake
	s.mu.Unlock()
	if freed {
		wake(sendWake)
	}
	if done {
		s.owner.forget(s)
	}
	if onLast != nil {
		onLast()
	}
	return b, more
}

// streamBudget bounds what a connection's streams may hold received and
// not yet taken by their application: the credit granted and not yet
// consumed, over all of them. Under pressure a stream of low priority is
// granted less: it may not dip into a reserve kept for more important
// ones.
type streamBudget struct {
	max int64

	mu      sync.Mutex // guards the fields below
	used    int64
	starved []*Stream // streams refused a grant, to try again as room comes
}

// reserve is the part of the budget a stream of priority p may not take:
// 45% of it at priority 0, none at 9.
func (b *streamBudget) reserve(p uint8) int64 { return b.max * int64(9-min(p, 9)) / 20 }

// take grants s up to n bytes, and returns how many; 0 puts s on the
// list of streams to grant again once room comes.
func (b *streamBudget) take(s *Stream, n int64) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.max - b.used - b.reserve(s.prio)
	n = min(n, room)
	if n <= 0 {
		b.starved = append(b.starved, s)
		return 0
	}
	b.used += n
	return n
}

// takeShare grants s up to n bytes and no more than 1/part of the room
// left, and returns how many.
func (b *streamBudget) takeShare(s *Stream, n int64, part int64) int64 {
	b.mu.Lock()
	room := b.max - b.used - b.reserve(s.prio)
	b.mu.Unlock()
	return b.take(s, min(n, room/part))
}

// force takes n bytes whatever the budget says: a message larger than a
// window, whose receiver waits for it.
func (b *streamBudget) force(n int64) {
	b.mu.Lock()
	b.used += n
	b.mu.Unlock()
}

// give gives n bytes back, and returns the streams to grant again.
func (b *streamBudget) give(n int64) []*Stream {
	if n == 0 {
		return nil
	}
	b.mu.Lock()
	b.used -= n
	var starved []*Stream
	if len(b.starved) > 0 && b.used < b.max {
		starved, b.starved = b.starved, nil
	}
	b.mu.Unlock()
	return starved
}

// fifo is a queue that reuses its array once drained.
type fifo[T any] struct {
	q    []T
	head int
}

func (f *fifo[T]) len() int { return len(f.q) - f.head }
func (f *fifo[T]) peek() T  { return f.q[f.head] }
func (f *fifo[T]) push(v T) {
	if f.head > 0 && f.head >= len(f.q)/2 { // a queue that never drains does not grow
		n := copy(f.q, f.q[f.head:])
		clear(f.q[n:])
		f.q, f.head = f.q[:n], 0
	}
	f.q = append(f.q, v)
}
func (f *fifo[T]) pop() T {
	var zero T
	v := f.q[f.head]
	f.q[f.head] = zero
	f.head++
	if f.head == len(f.q) {
		f.q, f.head = f.q[:0], 0
	}
	return v
}

// drain takes every value out.
func (f *fifo[T]) drain() []T {
	q := f.q[f.head:]
	*f = fifo[T]{}
	return q
}

package kiev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"reflect"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/callstats"
	"github.com/kievrpc/kiev/internal/transport"
)

// StreamKind says whether a method streams, and which way.
type StreamKind uint8

// The kinds of methods.
const (
	Unary        StreamKind = iota // one args, one reply: not a stream
	ServerStream                   // one args, then messages from the server (Out)
	ClientStream                   // messages from the client (In), then one reply
	BidiStream                     // messages both ways (In and Out)
)

func (k StreamKind) String() string {
	switch k {
	case Unary:
		return "unary"
	case ServerStream:
		return "server stream"
	case ClientStream:
		return "client stream"
	case BidiStream:
		return "bidirectional stream"
	}
	return fmt.Sprintf("StreamKind(%d)", uint8(k))
}

// Out is the sending side of a stream, as its handler takes it:
//
//	func (f *Feed) Watch(ctx context.Context, q Query, out kiev.Out[Event]) error
//
// Its methods are safe for use by one goroutine at a time; the handler
// may hand it to another goroutine, which must be done with it by the
// time the handler returns.
type Out[T any] struct{ s *serverStream }

// Send queues v for the client, whole or not at all. It waits, within
// ctx, while the client has not yet granted credit for the messages
// queued before it; a Send that gives up leaves the stream usable. It
// fails once the stream has ended: the client closed it or went away,
// or the handler's context ended.
func (o Out[T]) Send(ctx context.Context, v T) error {
	if o.s == nil {
		return errUnboundStream
	}
	return sendBoxed(ctx, &o.s.sendBox, v, o.s.send)
}

// Close ends the sending side (a half-close): the client's Recv returns
// io.EOF once it has the messages sent before, while the handler may go
// on reading In. Returning from the handler closes it too. It is
// idempotent.
func (o Out[T]) Close() error {
	if o.s == nil {
		return errUnboundStream
	}
	return o.s.s.CloseSend()
}

// In is the receiving side of a stream, as its handler takes it:
//
//	func (f *Feed) Upload(ctx context.Context, in kiev.In[Chunk], sum *Sum) error
//
// Its methods are safe for use by one goroutine at a time.
type In[T any] struct{ s *serverStream }

// Recv returns the client's next message. It returns io.EOF once the
// client has finished sending (CloseSend) and every message before has
// been returned, and an error once the stream has ended otherwise. It
// waits within ctx; a Recv that gives up leaves the stream usable.
func (i In[T]) Recv(ctx context.Context) (T, error) {
	var v T
	if i.s == nil {
		return v, errUnboundStream
	}
	return recvBoxed[T](ctx, &i.s.recvBox, i.s.recv)
}

// sendBoxed sends v with send: v itself when T is a pointer (In[*pb.Event]
// and Out[*pb.Event] carry generated protobuf messages), so that the
// codec is handed *pb.Event, never **pb.Event; else a pointer to a copy
// of v in the box in *slot (boxOf).
func sendBoxed[T any](ctx context.Context, slot *any, v T, send func(context.Context, any) error) error {
	if reflect.TypeFor[T]().Kind() == reflect.Pointer {
		return send(ctx, any(v))
	}
	p := boxOf[T](slot)
	*p = v
	err := send(ctx, p)
	*p = *new(T) // the box keeps nothing of the message
	return err
}

// recvBoxed receives a message with recv: into a new message when T is
// a pointer (decodable), else into the box in *slot, whose value it
// returns.
func recvBoxed[T any](ctx context.Context, slot *any, recv func(context.Context, any) error) (T, error) {
	var v T
	if reflect.TypeFor[T]().Kind() == reflect.Pointer {
		err := recv(ctx, decodable(&v))
		return v, err
	}
	p := boxOf[T](slot)
	err := recv(ctx, p)
	v, *p = *p, *new(T)
	return v, err
}

// boxOf returns where a stream's message of type T is encoded from, or
// decoded into: the box in *slot, kept by the stream for its next
// message, so that a Send or a Recv copies its message there instead of
// allocating a copy the codec may keep. A box larger than maxBoxed is not
// kept: an idle stream holds a small one at most.
func boxOf[T any](slot *any) *T {
	if p, ok := (*slot).(*T); ok {
		return p
	}
	p := new(T)
	if unsafe.Sizeof(*p) <= maxBoxed {
		*slot = p
	}
	return p
}

const maxBoxed = 256

// decodable is what a codec decodes a message into, for *v to hold it:
// v itself, or when T is a pointer, a new message that *v is set to.
func decodable[T any](v *T) any {
	if t := reflect.TypeFor[T](); t.Kind() == reflect.Pointer {
		m := reflect.New(t.Elem()).Interface().(T)
		*v = m
		return m
	}
	return v
}

// All returns the client's messages, for a range loop, until io.EOF,
// which ends the loop without an error, or another error, which is the
// loop's last value.
func (i In[T]) All(ctx context.Context) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for {
			v, err := i.Recv(ctx)
			if err == io.EOF {
				return
			}
			if !yield(v, err) || err != nil {
				return
			}
		}
	}
}

var errUnboundStream = errors.New("kiev: this In or Out is not a stream's: use the one the handler was given")

// inSide and outSide mark In and Out, for the method contract, which
// finds them by reflection and makes them for each stream.
type inSide interface {
	bindIn(ss *serverStream) reflect.Value
}

type outSide interface {
	bindOut(ss *serverStream) reflect.Value
}

func (In[T]) bindIn(ss *serverStream) reflect.Value   { return reflect.ValueOf(In[T]{ss}) }
func (Out[T]) bindOut(ss *serverStream) reflect.Value { return reflect.ValueOf(Out[T]{ss}) }

var (
	typeOfInSide  = reflect.TypeFor[inSide]()
	typeOfOutSide = reflect.TypeFor[outSide]()
)

// isStreamMethod reports whether the method of type mt (receiver first)
// takes an In or an Out.
func isStreamMethod(mt reflect.Type) bool {
	for i := 1; i < mt.NumIn(); i++ {
		if t := mt.In(i); t.Implements(typeOfInSide) || t.Implements(typeOfOutSide) {
			return true
		}
	}
	return false
}

// suitableStream checks a stream method against the contract.
func suitableStream(m reflect.Method) (*method, string) {
	mt := m.Type
	in := mt.NumIn() - 1
	if in != 3 || mt.In(1) != typeOfContext {
		return nil, "a stream method takes (ctx context.Context, args A or in kiev.In[M], out kiev.Out[M] or reply *R)"
	}
	a, b := mt.In(2), mt.In(3)
	if mt.NumOut() != 1 || mt.Out(0) != typeOfError {
		return nil, "must return exactly one value, of type error"
	}
	mth := &method{fn: m.Func, withCtx: true}
	mth.streams.readings = new(callstats.Readings) // for the status page's rates
	switch {
	case a.Implements(typeOfOutSide):
		return nil, fmt.Sprintf("its second argument is %s; kiev.Out comes last: (ctx, args, out kiev.Out[M]) or (ctx, in kiev.In[M], out kiev.Out[M])", a)
	case b.Implements(typeOfInSide):
		return nil, fmt.Sprintf("its last argument is %s; kiev.In comes first: (ctx, in kiev.In[M], reply *R) or (ctx, in kiev.In[M], out kiev.Out[M])", b)
	case a.Implements(typeOfInSide) && b.Implements(typeOfOutSide):
		mth.kind, mth.inType, mth.outType = BidiStream, a, b
	case a.Implements(typeOfInSide):
		if b.Kind() != reflect.Pointer {
			return nil, fmt.Sprintf("reply type %s is not a pointer; take *%s", b, b)
		}
		if !exportedOrBuiltin(b) {
			return nil, fmt.Sprintf("reply type %s is not exported", b)
		}
		mth.kind, mth.inType, mth.replyType = ClientStream, a, b.Elem()
	default:
		if !exportedOrBuiltin(a) {
			return nil, fmt.Sprintf("argument type %s is not exported", a)
		}
		mth.kind, mth.outType, mth.argType, mth.argIsPtr = ServerStream, b, a, a.Kind() == reflect.Pointer
	}
	return mth, ""
}

// serverStream is a stream as its handler's In and Out use it.
type serverStream struct {
	sc    *serverCall
	s     transport.HandlerStream
	codec codec.Codec
	// Out's and In's boxes (boxOf), each used by one goroutine at a time.
	sendBox, recvBox any
}

func (ss *serverStream) send(ctx context.Context, v any) error {
	buf := transport.GetBuf(0)
	b, err := ss.codec.Marshal((*buf)[:0], v)
	*buf = b
	if err != nil {
		transport.PutBuf(buf)
		return fmt.Errorf("kiev: %s: encoding a message (codec %s): %w", ss.sc.m.name, ss.codec.Name(), err)
	}
	if err = ss.s.SendBuf(ctx, buf); err != nil { // on success, the stream takes buf
		transport.PutBuf(buf)
		return ss.err(err)
	}
	ss.sc.m.streams.sent(len(b))
	ss.sc.req.hooks.message(true, len(b), v)
	return nil
}

func (ss *serverStream) recv(ctx context.Context, v any) error {
	m, _, err := ss.s.Recv(ctx)
	if err != nil {
		return ss.err(err)
	}
	defer transport.PutBuf(m)
	ss.sc.m.streams.received(len(*m))
	if err := ss.codec.Unmarshal(*m, v); err != nil {
		return fmt.Errorf("kiev: %s: decoding a message (codec %s) into %T: %w", ss.sc.m.name, ss.codec.Name(), v, err)
	}
	ss.sc.req.hooks.message(false, len(*m), v)
	return nil
}

// err is what a handler sees of a stream's error: the handler's context's
// error once it has ended (the client canceled, the deadline passed, the
// server shuts down), else the stream's.
func (ss *serverStream) err(err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	if cerr := ss.sc.ctx.Err(); cerr != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", cerr, err)
	}
	return err
}

// invokeStream is invoke for a stream method: it binds In and Out to the
// call's stream, and decodes a server stream's args.
func (s *Server) invokeStream(ctx context.Context, req *Request, sc *serverCall) error {
	m := sc.m
	ss := &serverStream{sc: sc, s: sc.sink.Stream(sc), codec: sc.codec}
	if m.direct.ok {
		return s.invokeStreamDirect(ctx, req, sc, ss)
	}
	var a, b reflect.Value
	switch m.kind {
	case ServerStream:
		argp, err := sc.decodeArgs(req)
		if err != nil {
			return err
		}
		a = argp
		if !m.argIsPtr {
			a = argp.Elem()
		}
		b = reflect.Zero(m.outType).Interface().(outSide).bindOut(ss)
	case ClientStream:
		a = reflect.Zero(m.inType).Interface().(inSide).bindIn(ss)
		replyp := m.newReply()
		req.Reply = replyp.Interface()
		b = replyp
	case BidiStream:
		a = reflect.Zero(m.inType).Interface().(inSide).bindIn(ss)
		b = reflect.Zero(m.outType).Interface().(outSide).bindOut(ss)
	}
	transport.PutBuf(sc.body)
	sc.body = nil
	// ctx as a Value of type context.Context, which Call passes as it is:
	// a Value of ctx's own type is checked against the interface, method
	// by method, on every call.
	ctxv := reflect.ValueOf(&ctx).Elem()
	out := m.fn.Call([]reflect.Value{m.rcvr, ctxv, a, b})
	if err := out[0].Interface(); err != nil {
		return err.(error)
	}
	return nil
}

// invokeStreamDirect is invokeStream without reflect.Value.Call (see
// directCall): In and Out, structs of one pointer, are passed as the
// *serverStream they hold, and a server stream's args by pointer.
func (s *Server) invokeStreamDirect(ctx context.Context, req *Request, sc *serverCall, ss *serverStream) error {
	m := sc.m
	var a, b unsafe.Pointer
	switch m.kind {
	case ServerStream:
		argp, err := sc.decodeArgs(req)
		if err != nil {
			return err
		}
		a, b = argp.UnsafePointer(), unsafe.Pointer(ss)
	case ClientStream:
		replyp := m.newReply()
		req.Reply = replyp.Interface()
		a, b = unsafe.Pointer(ss), replyp.UnsafePointer()
	case BidiStream:
		a, b = unsafe.Pointer(ss), unsafe.Pointer(ss)
	}
	transport.PutBuf(sc.body)
	sc.body = nil
	return m.direct.call(ctx, a, b)
}

// The direct call passes an In or an Out as the pointer it holds.
var (
	_ [unsafe.Sizeof(In[int]{}) - unsafe.Sizeof(unsafe.Pointer(nil))]struct{}
	_ [unsafe.Sizeof(unsafe.Pointer(nil)) - unsafe.Sizeof(Out[int]{})]struct{}
)

// openStream runs a stream call the scheduler admitted: it accepts the
// stream (its first Credit tells the client) and runs the handler on a
// goroutine of its own, so that the stream holds no worker of the
// scheduler, nor a place under its method's adaptive limit. It returns
// at once, as the end of the call the scheduler timed.
func (sc *serverCall) openStream(start time.Time) (end time.Time, sampled bool) {
	s := sc.srv
	if n := s.streamsOpen.Add(1); n > int64(s.opts.maxServerStreams) {
		s.streamsOpen.Add(-1)
		sc.m.stats.record(start, -1, CodeOverloaded)
		transport.PutBuf(sc.body)
		sc.body = nil
		sc.ctx.cancel(context.Canceled)
		sc.replyError(CodeOverloaded, fmt.Sprintf("kiev: %s refused: %d streams are already open on this server, its limit (WithMaxServerStreams); open it on another server", sc.m.name, s.opts.maxServerStreams))
		sc.sink.Done(sc)
		return start, false
	}
	window := 0
	if sc.m.kind != ServerStream {
		window = transport.InitialWindow
	}
	sc.m.streams.opened()
	sc.sink.Stream(sc).Grant(window)
	select {
	case s.runners.work <- streamJob{sc, start}: // an idle runner takes it
	default:
		go s.runStreams(streamJob{sc, start})
	}
	return start, true
}

// streamRunners are the goroutines that run streams' handlers: each
// waits, once its handler has returned, for the next stream, up to
// maxIdleRunners of them and until the server closes. A goroutine made
// for each stream would grow its stack to what a handler needs, copying
// it each time, which cost a stream's open a quarter of its work.
type streamRunners struct {
	work chan streamJob // unbuffered: only an idle runner takes a job
	idle atomic.Int32
}

// streamJob is a stream to run, admitted at start.
type streamJob struct {
	sc    *serverCall
	start time.Time
}

// maxIdleRunners bounds the goroutines that wait for the next stream.
const maxIdleRunners = 64

// runStreams runs j's stream, then those handed to it while it waits.
func (s *Server) runStreams(j streamJob) {
	for {
		j.sc.runStream(j.start)
		if s.runners.idle.Add(1) > maxIdleRunners {
			s.runners.idle.Add(-1)
			return
		}
		select {
		case j = <-s.runners.work:
			s.runners.idle.Add(-1)
		case <-s.done:
			s.runners.idle.Add(-1)
			return
		}
	}
}

// runStream runs a stream's handler, then ends the stream with its
// status: after the messages it sent, its Response, which for a client
// stream carries the reply.
func (sc *serverCall) runStream(start time.Time) {
	s := sc.srv
	defer sc.sink.Done(sc)
	defer s.streamsOpen.Add(-1)
	defer sc.m.streams.closed()
	st := sc.sink.Stream(sc)
	sc.ctx.start(start)
	var aged *time.Timer
	if d := s.opts.maxStreamAge; d > 0 {
		aged = time.AfterFunc(jitter(d), func() { sc.endStream(errStreamAged) })
	}
	sc.handling.Store(true)
	err := sc.protect(func() error { return s.handler(&sc.ctx, &sc.req) })
	if aged != nil {
		aged.Stop()
	}
	sc.handling.Store(false)
	end := time.Now()
	if why := sc.ended.Load(); why != nil {
		err = *why // drained or aged: the client reopens elsewhere
	}
	code := CodeOK
	if err != nil {
		code = codeOf(err)
	}
	sc.m.stats.record(end, end.Sub(start), code)
	sc.logCall(end.Sub(start), code, err)
	if sc.body != nil {
		transport.PutBuf(sc.body)
		sc.body = nil
	}
	expired := sc.ctx.Err() == context.DeadlineExceeded && sc.ended.Load() == nil
	sc.ctx.cancel(context.Canceled)
	if sc.st.CallerGone.Load() || expired {
		st.Abort(context.Canceled)
		return
	}
	if err != nil {
		sc.replyError(codeOf(err), err.Error())
		return
	}
	sc.reply()
}

// streamCanceled ends the stream of a running handler whose context
// ended with err (the client canceled, the deadline passed, the server
// closes): its Send and Recv, which may wait on another context, fail at
// once. A stream not yet running, or ended by endStream, is answered
// instead.
func (sc *serverCall) streamCanceled(err error) {
	if sc.handling.Load() && sc.ended.Load() == nil {
		sc.sink.Stream(sc).Abort(err)
	}
}

// endStream ends a stream's handler with why, a CodeShutdown error: the
// server drains, or the stream reached its maximum age. The client is
// answered with why once the handler returns, after the messages it
// sent, and reopens the stream elsewhere.
func (sc *serverCall) endStream(why error) {
	sc.ended.CompareAndSwap(nil, &why)
	sc.ctx.cancel(why)
}

var (
	errStreamAged    = &ServerError{Code: CodeShutdown, Message: "kiev: the stream reached its maximum age on this server (WithMaxStreamAge); reopen it, and the client's balancer may pick another server"}
	errStreamDrained = &ServerError{Code: CodeShutdown, Message: "kiev: the server is shutting down and ended the stream; reopen it on another server"}
)

// jitter returns d less up to a tenth of it at random, so that streams
// opened together do not all end together.
func jitter(d time.Duration) time.Duration {
	return d - time.Duration(rand.Int64N(int64(d)/10+1))
}

// Stream defaults; see the options of the same names.
const (
	DefaultMaxStreams       = transport.DefaultMaxStreams
	DefaultMaxServerStreams = 100000
	DefaultStreamBudget     = transport.DefaultStreamBudget
	DefaultStreamDrain      = 10 * time.Second
)

// WithMaxStreams bounds the streams one connection may have open on a
// Server at once (DefaultMaxStreams, 10,000); a stream past it is refused
// with ErrOverloaded. Its Settings tell the client.
func WithMaxStreams(n int) ServerOption {
	return serverOption(func(o *serverOptions) { o.maxStreams = n })
}

// WithMaxServerStreams bounds the streams whose handlers run at once on a
// Server, over all its connections (DefaultMaxServerStreams, 100,000); a
// stream past it is refused with ErrOverloaded, which a client retries
// on another server.
func WithMaxServerStreams(n int) ServerOption {
	return serverOption(func(o *serverOptions) { o.maxServerStreams = n })
}

// WithStreamBudget bounds the message bytes a connection's streams may
// hold received and not yet taken by their application (the handlers'
// In, the client's Recv), over all of them (DefaultStreamBudget, 16
// MiB): a stream's window is credit taken from it, so memory is bounded
// by the budget, not by streams × window. Under pressure, streams of low
// priority are granted less first. A message larger than its stream's
// window is granted whole once its receiver waits for it.
func WithStreamBudget(n int) Option {
	return bothOption(func(o *connOptions) { o.streamBudget = n })
}

// WithMaxStreamAge ends each stream about d after it opened (less up to
// a tenth, at random, so that streams opened together end apart): its
// handler's context is canceled, and once the handler returns, the
// client gets, after the messages sent before, an ErrShutdown error that
// says to reopen the stream, which its balancer may send to another
// server. So long streams move when servers are added. 0, the default,
// means no maximum.
func WithMaxStreamAge(d time.Duration) ServerOption {
	return serverOption(func(o *serverOptions) { o.maxStreamAge = d })
}

// WithStreamDrain bounds how long Shutdown lets open streams run on
// (DefaultStreamDrain, 10 s), within its own context: then each stream's
// handler's context is canceled, and the client gets an ErrShutdown
// error that says to reopen the stream on another server.
func WithStreamDrain(d time.Duration) ServerOption {
	return serverOption(func(o *serverOptions) { o.streamDrain = d })
}

// endStreams ends every open stream with why (errStreamDrained).
func (s *Server) endStreams(why error) {
	for _, c := range keysOf(s, s.conns) {
		c.CancelStreams(why)
	}
}

// streamMismatch says why a call cannot run m: a stream method called
// as a unary one, a unary method opened as a stream, or a stream over a
// transport that carries none.
func streamMismatch(m *method, hd *transport.Head) (Code, string) {
	switch {
	case hd.IsStream && hd.Stream == nil:
		return CodeBadRequest, fmt.Sprintf("kiev: %s: streams need a connection (TCP, TLS or a Unix socket); this transport carries unary calls only", m.name)
	case m.kind != Unary && !hd.IsStream:
		return CodeBadRequest, fmt.Sprintf("kiev: %s is a %s method; open it with Client.Stream, not Call", m.name, m.kind)
	case m.kind == Unary && hd.IsStream:
		return CodeBadRequest, fmt.Sprintf("kiev: %s is not a stream method; call it with Client.Call", m.name)
	}
	return CodeOK, ""
}

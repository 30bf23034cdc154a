package kiev

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/transport"
	"github.com/kievrpc/kiev/shed"
)

// A server call, whatever front it came through (a TCP connection, a UDP
// socket, HTTP or FastCGI, a net/rpc ServerCodec): the front reads what
// the call asks for and makes it with makeCall (plumbing.Open for the
// fronts of package transport), hands it to the scheduler (submit), and
// takes its answer through its transport.Sink. Everything between, the
// scheduler, interceptors, the method, metrics and logs, is the same for
// every front.

// maxUnknownName bounds the name of an unknown method that interceptors
// and logs see: the peer's to choose, up to a 64 KiB header.
const maxUnknownName = 256

// callHead is what a front read of a call, for makeCall.
type callHead struct {
	m        *method // s.unknown for a name the server lacks
	asked    string  // the name asked for, if m is s.unknown
	codec    codec.Codec
	id       uint64
	peer     net.Addr
	tls      *tls.ConnectionState
	md       Metadata
	claimed  Priority  // the priority the caller claims
	deadline time.Time // zero: none
	body     *[]byte   // the encoded args, from the buffer pool; the call owns it
}

// makeCall makes a call as every front does: its Request, and its
// context, whose values come from base, with its metadata, priority (see
// WithPriorityPolicy) and deadline.
func (s *Server) makeCall(in *callHead, base context.Context, sink transport.Sink) *serverCall {
	sc := &serverCall{srv: s, sink: sink, m: in.m, codec: in.codec, body: in.body}
	sc.st.ID = in.id
	sc.req = Request{ServiceMethod: in.m.name, ID: in.id, Peer: in.peer, Codec: in.codec.Name(), Metadata: in.md, TLS: in.tls, Stream: in.m.kind, call: sc}
	if in.m == s.unknown {
		sc.req.ServiceMethod = truncate(in.asked, maxUnknownName)
	}
	sc.ctx.parent = base
	sc.ctx.call = sc
	sc.ctx.md = in.md
	sc.ctx.priority = s.priority(&sc.req, in.claimed)
	sc.ctx.deadline = in.deadline
	return sc
}

// lookupCall finds the method a call names: with interceptors, a name
// the server lacks gives s.unknown, so that they judge the call first.
func (s *Server) lookupCall(name []byte) (*method, error) {
	m, err := s.lookup(name)
	if err != nil {
		if len(s.opts.interceptors) == 0 {
			return nil, err
		}
		m = s.unknown
	}
	return m, nil
}

// plumbing is a Server as the fronts of package transport see it: what
// they hand their calls to.
type plumbing Server

// Open makes the call hd asks for, or says why it cannot: no such method,
// or an unknown codec.
func (p *plumbing) Open(hd *transport.Head, base context.Context, sink transport.Sink) (transport.Call, Code, string) {
	sc, code, msg := (*Server)(p).open(hd, base, sink)
	if sc == nil {
		return nil, code, msg // not a nil *serverCall in an interface
	}
	return sc, 0, ""
}

func (s *Server) open(hd *transport.Head, base context.Context, sink transport.Sink) (*serverCall, Code, string) {
	m, err := s.lookupCall(hd.Method)
	if err != nil {
		transport.PutBuf(hd.Owned)
		return nil, CodeNotFound, err.Error()
	}
	cd := s.codecs[string(hd.Codec)]
	if cd == nil {
		transport.PutBuf(hd.Owned)
		return nil, CodeBadRequest, fmt.Sprintf("kiev: unknown codec %q; this server knows %s", hd.Codec, s.codecNames())
	}
	if code, msg := streamMismatch(m, hd); code != CodeOK && m != s.unknown {
		transport.PutBuf(hd.Owned)
		return nil, code, msg
	}
	in := callHead{m: m, codec: cd, id: hd.ID, peer: hd.Addr, tls: hd.TLS, claimed: DefaultPriority, deadline: hd.Deadline, body: hd.Owned}
	if m == s.unknown {
		in.asked = string(hd.Method)
	}
	in.md = hd.Metadata(PacketKeyMetadata)
	if hd.HasPriority {
		in.claimed = Priority(hd.Priority)
	}
	if in.body == nil {
		in.body = transport.GetBuf(len(hd.Body))
		*in.body = append((*in.body)[:0], hd.Body...)
	}
	return s.makeCall(&in, base, sink), 0, ""
}

// Refuse counts a call refused at WithMaxConcurrentCalls, before it is
// opened.
func (p *plumbing) Refuse(method []byte, where string) (Code, string) {
	s := (*Server)(p)
	m, err := s.lookupCall(method)
	if err != nil {
		return CodeNotFound, err.Error()
	}
	return s.refuseAtLimit(m, where)
}

// Submit hands the call to the scheduler.
func (sc *serverCall) Submit(base context.Context) { sc.srv.submit(sc, base) }

// RunInline runs the call on the calling goroutine, if the scheduler
// would start it at once.
func (sc *serverCall) RunInline() bool { return sc.srv.sched.RunInline(sc) }

// refuseAtLimit counts a call of m refused at WithMaxConcurrentCalls,
// and returns what it is answered.
func (s *Server) refuseAtLimit(m *method, what string) (Code, string) {
	m.stats.record(time.Now(), -1, CodeOverloaded)
	return CodeOverloaded, fmt.Sprintf("kiev: %s refused: %d calls are already in flight %s, the server's limit (WithMaxConcurrentCalls); retry later or on another server", m.name, s.opts.maxCalls, what)
}

// priority is the priority a call that claims one is scheduled at: what
// WithPriorityPolicy decides, or the claim.
func (s *Server) priority(req *Request, claimed Priority) Priority {
	if policy := s.opts.priorityPolicy; policy != nil {
		return min(policy(req, claimed), MaxPriority)
	}
	return min(claimed, MaxPriority)
}

// submit hands a call to the scheduler.
func (s *Server) submit(sc *serverCall, base context.Context) {
	if err := base.Err(); err != nil {
		sc.ctx.cancel(err)
	}
	s.sched.Submit(sc)
}

// Release returns a call that will not run or be answered.
func (sc *serverCall) Release() {
	if sc.body != nil {
		transport.PutBuf(sc.body)
		sc.body = nil
	}
}

func (s *Server) codecNames() string {
	return strings.Join(slices.Sorted(maps.Keys(s.codecs)), ", ")
}

// serverCall is one call in flight.
type serverCall struct {
	srv   *Server
	sink  transport.Sink
	m     *method
	codec codec.Codec
	st    transport.CallState // its id; the caller is gone; it is answered
	body  *[]byte
	ctx   callContext // the handler's context
	req   Request
	// A stream's: why its handler was ended (endStream), and whether the
	// handler runs.
	ended    atomic.Pointer[error]
	handling atomic.Bool
}

// State, Name, Estimate, Cancel and Release make a serverCall a
// transport.Call.
var _ transport.Call = (*serverCall)(nil)

func (sc *serverCall) State() *transport.CallState     { return &sc.st }
func (sc *serverCall) Name() string                    { return sc.m.name }
func (sc *serverCall) Estimate() time.Duration         { return sc.m.cost.Estimate() }
func (sc *serverCall) ReplySize() *transport.ReplySize { return &sc.m.replies }
func (sc *serverCall) Cancel(err error) {
	if err == errStreamDrained && sc.st.Stream != nil {
		sc.endStream(err) // answered, once its handler returns, with why
		return
	}
	sc.ctx.cancel(err)
}

// Priority, Deadline, Canceled, Cost, Run and Drop make a serverCall a
// shed.Task, and Flow a shed.FlowTask: each connection is a flow that the
// scheduler shares its limits fairly with the others.

func (sc *serverCall) Priority() int               { return int(sc.ctx.priority) }
func (sc *serverCall) Deadline() (time.Time, bool) { return sc.ctx.Deadline() }
func (sc *serverCall) Canceled() bool              { return sc.st.CallerGone.Load() }
func (sc *serverCall) Cost() *shed.ServiceTime     { return &sc.m.cost }

// Flow is the call's connection's, for fairness; nil over UDP and HTTP.
// (Asked of the sink, not held: a field would take serverCall past its
// allocation size class.)
func (sc *serverCall) Flow() *shed.Flow { return sc.sink.Flow() }

// Drop answers a call the scheduler will not run.
func (sc *serverCall) Drop(r shed.Reason) {
	defer sc.sink.Done(sc)
	code := CodeOverloaded
	if r == shed.Deadline {
		code = CodeDeadlineExceeded
	}
	sc.m.stats.record(time.Now(), -1, code)
	sc.srv.hist.droppedAt[sc.ctx.priority].Add(1)
	transport.PutBuf(sc.body)
	sc.body = nil
	if h := sc.srv.opts.dropHook; h != nil {
		h(&sc.ctx, &sc.req, r)
	}
	sc.ctx.cancel(context.Canceled)
	if sc.st.CallerGone.Load() {
		return
	}
	if msg := sc.m.dropped[r]; msg != "" {
		sc.replyErr(code, msg, r == shed.Limited)
	}
}

// dropMessages builds, once per method, the answers to its calls the
// scheduler drops, by reason, so that refusing a call under overload costs
// no allocation. A canceled call gets no answer.
func dropMessages(name string) []string {
	m := make([]string, len(shed.Reasons()))
	m[shed.Evicted] = "kiev: " + name + " was shed: the server is overloaded and a more important call took its place in the queue; retry on another server"
	m[shed.Refused] = "kiev: " + name + " was refused: the server is overloaded and its queue is full of calls as important; retry on another server"
	m[shed.Expired] = "kiev: " + name + " was shed: it waited in the overloaded server's queue past the wait limit; retry on another server"
	m[shed.Deadline] = "kiev: " + name + " was not run: too little time was left before the caller's deadline"
	m[shed.Limited] = "kiev: " + name + " was refused at its adaptive limit: it has slowed down (its dependency is likely slow), and the call could not start in time; the server's other methods are not held; retry on another server"
	return m
}

// Run executes the interceptor chain and the method, then replies.
func (sc *serverCall) Run() { sc.RunTimed(time.Now()) }

// RunTimed is Run for a call started at start, reporting when the handler
// ended, which makes a serverCall a shed.TimedTask: the scheduler takes
// the handler's time from the clock reads the call's metrics make anyway.
// A call that was refused, by the handler (ErrOverloaded, or a
// shed.Resource's ErrResourceBusy) or before it, is no sample of its
// method's service time.
func (sc *serverCall) RunTimed(start time.Time) (end time.Time, sampled bool) {
	if sc.sink.Stream(sc) != nil {
		return sc.openStream(start)
	}
	defer sc.sink.Done(sc)
	if n, over := sc.sink.Backlogged(); over && !sc.st.CallerGone.Load() {
		// Its reply would only add to the pile the caller does not read.
		sc.m.stats.record(start, -1, CodeOverloaded)
		transport.PutBuf(sc.body)
		sc.body = nil
		sc.ctx.cancel(context.Canceled)
		sc.replyError(CodeOverloaded, fmt.Sprintf("kiev: %s was not run: %v", sc.m.name, &transport.BacklogError{Queued: n}))
		return start, false
	}
	sc.ctx.start(start)
	sc.srv.inFlight.Add(1)
	err := sc.protect(func() error { return sc.srv.handler(&sc.ctx, &sc.req) })
	end = time.Now()
	sc.srv.inFlight.Add(-1)
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
	expired := sc.ctx.Err() == context.DeadlineExceeded
	sc.ctx.cancel(context.Canceled) // the handler is done; so are its goroutines' ctx
	sampled = code != CodeOverloaded
	if sc.st.CallerGone.Load() || expired {
		// The caller has stopped waiting; a reply would only cost
		// bandwidth.
		return end, sampled
	}
	if err != nil {
		sc.replyError(code, err.Error())
		return end, sampled
	}
	sc.reply()
	return end, true
}

// protect runs f and turns a panic into a CodeInternal error.
func (sc *serverCall) protect(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			stack := make([]byte, 8<<10)
			stack = stack[:runtime.Stack(stack, false)]
			sc.srv.logLimited(slog.LevelError, "kiev: handler panicked", "method", sc.m.name, "panic", p, "stack", string(stack))
			err = &ServerError{Code: CodeInternal, Message: fmt.Sprintf("kiev: %s panicked: %v", sc.m.name, p)}
		}
	}()
	return f()
}

// invoke is the innermost Handler: decode args, call the method.
func (s *Server) invoke(ctx context.Context, req *Request) error {
	sc := req.call
	if sc == nil {
		return &ServerError{Code: CodeInternal, Message: "kiev: a server interceptor passed on a Request it built itself; pass on the *Request it was given"}
	}
	if sc.m == s.unknown {
		msg := "kiev: no method " + req.ServiceMethod
		if _, err := s.lookup([]byte(req.ServiceMethod)); err != nil {
			msg = err.Error()
		}
		return &ServerError{Code: CodeNotFound, Message: msg}
	}
	if sc.m.kind != Unary {
		return s.invokeStream(ctx, req, sc)
	}
	argp, err := sc.decodeArgs(req)
	if err != nil {
		return err
	}
	transport.PutBuf(sc.body)
	sc.body = nil
	replyp := sc.m.newReply()
	req.Reply = replyp.Interface()
	return sc.m.call(ctx, argp, replyp)
}

// decodeArgs decodes the call's args into a new value of its method's
// args type, which req.Args is set to, and returns a pointer to it.
func (sc *serverCall) decodeArgs(req *Request) (reflect.Value, error) {
	argp := sc.m.newArg()
	if err := sc.codec.Unmarshal(*sc.body, argp.Interface()); err != nil {
		return argp, &ServerError{Code: CodeBadRequest, Message: fmt.Sprintf("kiev: decoding args of %s (codec %s): %v", sc.m.name, sc.codec.Name(), err)}
	}
	req.Args = argp.Interface()
	return argp, nil
}

func (sc *serverCall) reply() {
	switch err := sc.sink.Reply(sc, sc.codec, sc.req.Reply).(type) {
	case nil:
	case *transport.EncodeError:
		sc.srv.logLimited(slog.LevelError, "kiev: encoding reply failed", "method", sc.m.name, "codec", sc.codec.Name(), "err", err.Err)
		sc.replyError(CodeInternal, fmt.Sprintf("kiev: encoding reply of %s (codec %s): %v", sc.m.name, sc.codec.Name(), err.Err))
	case *transport.BacklogError:
		sc.replyError(CodeOverloaded, fmt.Sprintf("kiev: reply of %s dropped: %v", sc.m.name, err))
	default:
		sc.replyError(CodeTooLarge, fmt.Sprintf("kiev: reply of %s is too large: %v", sc.m.name, err))
	}
}

// replyError answers the call with an error. A message too long for the
// sink (a datagram, say) is cut short.
func (sc *serverCall) replyError(code Code, msg string) { sc.replyErr(code, msg, false) }

// replyErr sends an error Response; limited marks an Overloaded error as
// the method's, refused at its adaptive limit, not the server's.
func (sc *serverCall) replyErr(code Code, msg string, limited bool) {
	if sc.sink.Fail(sc, code, msg, limited) != nil && len(msg) > maxShortError {
		_ = sc.sink.Fail(sc, code, msg[:maxShortError]+"...", limited)
	}
}

// maxShortError is the length error messages are cut to when they do not
// fit whole.
const maxShortError = 256

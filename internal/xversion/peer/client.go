package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/codec"
)

// clientConfig says where and how the scenarios call.
type clientConfig struct {
	tcp, udp  string // the server's addresses; Ctl is called over tcp
	udpSigned string // the server's address for signed UDP calls, if it has one
	network   string // "tcp" or "udp": what the scenarios call over
	codec     string // "msgpack" or "protobuf"
}

// Result is one scenario's outcome, printed as a JSON line.
type Result struct {
	Scenario string `json:"scenario"`
	Class    string `json:"class"`
	Detail   string `json:"detail,omitempty"`
}

// scenarioTimeout bounds each scenario.
const scenarioTimeout = 20 * time.Second

// scenario is one check; run returns its class and what it saw.
type scenario struct {
	name string
	run  func(r *runner, ctx context.Context) (class, detail string)
}

// scenarios run in this order.
var scenarios = []scenario{
	{"call", (*runner).call},
	{"meta", (*runner).meta},
	{"deadline", (*runner).deadline},
	{"deadline-expired", (*runner).deadlineExpired},
	{"priority", (*runner).priority},
	{"cancel", (*runner).cancel},
	{"error-code", (*runner).errorCode},
	{"error-long", (*runner).errorLong},
	{"not-found", (*runner).notFound},
	{"big-reply", (*runner).bigReply},
	{"signed", (*runner).signed},
	{"drain", (*runner).drain},
	{"drain-load", (*runner).drainLoad},
	{"stream", (*runner).stream},
}

// runClient runs the named scenarios (all if none), printing a Result
// for each.
func runClient(cfg clientConfig, names []string, out io.Writer) error {
	if cfg.network != "tcp" && cfg.network != "udp" {
		return fmt.Errorf("-net %q: want tcp or udp", cfg.network)
	}
	r := &runner{cfg: cfg, service: msgpackService, codec: codec.Msgpack}
	switch cfg.codec {
	case "msgpack":
	case "protobuf":
		r.service, r.codec = protobufService, codec.Protobuf
	default:
		return fmt.Errorf("-codec %q: want msgpack or protobuf", cfg.codec)
	}
	defer r.close()
	c, err := r.dial(cfg.tcp, cfg.udp)
	if err != nil {
		return err
	}
	r.c = c
	enc := json.NewEncoder(out)
	for _, name := range names {
		if !slices.ContainsFunc(scenarios, func(s scenario) bool { return s.name == name }) {
			return fmt.Errorf("no scenario %q", name)
		}
	}
	for _, s := range scenarios {
		if len(names) > 0 && !slices.Contains(names, s.name) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
		class, detail := s.run(r, ctx)
		cancel()
		if err := enc.Encode(Result{Scenario: s.name, Class: class, Detail: detail}); err != nil {
			return err
		}
	}
	return nil
}

// runner runs scenarios against one server.
type runner struct {
	cfg     clientConfig
	codec   codec.Codec
	service string       // the test service's name for the codec
	c       *kiev.Client // calls the server over cfg.network
	ctl     *kiev.Client // calls Ctl over TCP with msgpack; dialed when first needed
	closers []*kiev.Client
}

// dial dials the address of cfg.network, with the scenarios' codec and
// datagram limit.
func (r *runner) dial(tcp, udp string, opts ...kiev.DialOption) (*kiev.Client, error) {
	target := tcp
	if r.cfg.network == "udp" {
		target = "udp://" + udp
	}
	opts = append([]kiev.DialOption{
		kiev.WithCodec(r.codec),
		kiev.WithLogger(logger()),
		kiev.WithPacket(kiev.Packet{MaxDatagram: maxDatagram}),
	}, opts...)
	c, err := kiev.Dial(target, opts...)
	if err != nil {
		return nil, err
	}
	r.closers = append(r.closers, c)
	return c, nil
}

func (r *runner) close() {
	for _, c := range r.closers {
		c.Close()
	}
}

// control calls a Ctl method.
func (r *runner) control(ctx context.Context, method string, a CtlMsg) (CtlMsg, error) {
	if r.ctl == nil {
		c, err := kiev.Dial(r.cfg.tcp, kiev.WithLogger(logger()))
		if err != nil {
			return CtlMsg{}, err
		}
		r.ctl = c
		r.closers = append(r.closers, c)
	}
	var reply CtlMsg
	err := r.ctl.Call(ctx, "Ctl."+method, a, &reply)
	if err != nil {
		err = fmt.Errorf("Ctl.%s: %w", method, err)
	}
	return reply, err
}

// payload is a call's args or reply, whatever the codec.
type payload struct {
	ID   int64
	Name string
	Tags []int64
}

// invoke calls method of the test service on c with the runner's codec.
func (r *runner) invoke(ctx context.Context, c *kiev.Client, method string, in payload) (payload, error) {
	m := r.service + "." + method
	if r.codec == codec.Protobuf {
		var reply pbSmall
		err := c.Call(ctx, m, &pbSmall{Id: in.ID, Name: in.Name, Tags: in.Tags}, &reply)
		return payload{reply.GetId(), reply.GetName(), reply.GetTags()}, err
	}
	var reply Msg
	err := c.Call(ctx, m, &Msg{ID: in.ID, Name: in.Name, Tags: in.Tags}, &reply)
	return payload{reply.ID, reply.Name, reply.Tags}, err
}

// classify names the error a call failed with: "ok" for none, the first
// of kiev's errors it matches, "code N" for a ServerError of another code,
// or "other: " and its text.
func classify(err error) string {
	if err == nil {
		return "ok"
	}
	for _, k := range []struct {
		name string
		err  error
	}{
		{"ErrOverloaded", kiev.ErrOverloaded},
		{"ErrShutdown", kiev.ErrShutdown},
		{"ErrUnavailable", kiev.ErrUnavailable},
		{"ErrNotFound", kiev.ErrNotFound},
		{"ErrTooLarge", kiev.ErrTooLarge},
		{"ErrBadRequest", kiev.ErrBadRequest},
		{"ErrInternal", kiev.ErrInternal},
		{"ErrUnauthenticated", kiev.ErrUnauthenticated},
		{"DeadlineExceeded", context.DeadlineExceeded},
		{"Canceled", context.Canceled},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	var se *kiev.ServerError
	if errors.As(err, &se) {
		return fmt.Sprintf("code %d", se.Code)
	}
	return "other: " + err.Error()
}

// failed is the class and detail of a call that failed where it should
// not have, or of a setup step that failed.
func failed(what string, err error) (string, string) {
	return classify(err), fmt.Sprintf("%s: %v", what, err)
}

// newToken names a Wait call.
func newToken(scenario string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return scenario + "-" + hex.EncodeToString(b[:])
}

// call: one plain call, its reply equal to its args.
func (r *runner) call(ctx context.Context) (string, string) {
	in := payload{ID: 42, Name: "hello, kiev", Tags: []int64{1, 2, 300000}}
	out, err := r.invoke(ctx, r.c, "Echo", in)
	if err != nil {
		return failed("Echo", err)
	}
	if out.ID != in.ID || out.Name != in.Name || !slices.Equal(out.Tags, in.Tags) {
		return "wrong", fmt.Sprintf("Echo(%+v) = %+v", in, out)
	}
	return "ok", "echoed"
}

// meta: two metadata pairs reach the handler.
func (r *runner) meta(ctx context.Context) (string, string) {
	ctx = kiev.WithMetadata(ctx, metaTrace, "trace-7f3a", metaUser, "ann")
	out, err := r.invoke(ctx, r.c, "Meta", payload{})
	if err != nil {
		return failed("Meta", err)
	}
	if want := "trace-7f3a|ann"; out.Name != want {
		return "wrong", fmt.Sprintf("the handler saw %q, want %q", out.Name, want)
	}
	return "ok", "both pairs seen"
}

// deadline: a call with 5s left reaches the handler with at most that
// left.
func (r *runner) deadline(ctx context.Context) (string, string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := r.invoke(ctx, r.c, "Deadline", payload{})
	if err != nil {
		return failed("Deadline", err)
	}
	if left := time.Duration(out.ID) * time.Microsecond; left <= 0 || left > 5*time.Second {
		return "wrong", fmt.Sprintf("the handler's deadline was %v away (-1µs: none), want (0, 5s]", left)
	}
	return "ok", "handler had <= 5s"
}

// deadlineExpired: a call whose 100ms deadline passes while its handler
// waits fails with context.DeadlineExceeded, and the handler's ctx ends
// with its deadline too.
func (r *runner) deadlineExpired(ctx context.Context) (string, string) {
	tk := newToken("deadline")
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := r.invoke(cctx, r.c, "Wait", payload{Name: tk})
	class := classify(err)
	o, oerr := r.control(ctx, "Outcome", CtlMsg{Token: tk})
	if oerr != nil {
		return failed("Ctl.Outcome", oerr)
	}
	if class == "DeadlineExceeded" && o.Err != context.DeadlineExceeded.Error() {
		return "wrong", fmt.Sprintf("the caller's error: %v; the handler's ctx ended with %q", err, o.Err)
	}
	return class, fmt.Sprintf("caller: %v; handler: %s", err, o.Err)
}

// priority: each priority set reaches the handler, and none set is
// DefaultPriority.
func (r *runner) priority(ctx context.Context) (string, string) {
	for _, p := range []int{0, 1, 5, 8, 9, -1} {
		cctx, want := ctx, kiev.Priority(p)
		if p < 0 {
			want = kiev.DefaultPriority
		} else {
			cctx = kiev.WithPriority(ctx, want)
		}
		out, err := r.invoke(cctx, r.c, "Priority", payload{})
		if err != nil {
			return failed(fmt.Sprintf("Priority at %d", p), err)
		}
		if kiev.Priority(out.ID) != want {
			return "wrong", fmt.Sprintf("sent priority %d (-1: none), the handler saw %d", p, out.ID)
		}
	}
	return "ok", "0, 1, 5, 8, 9 and none (5) seen"
}

// cancel: a call canceled while its handler runs fails with
// context.Canceled, and the handler's ctx is canceled.
func (r *runner) cancel(ctx context.Context) (string, string) {
	tk := newToken("cancel")
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := r.invoke(cctx, r.c, "Wait", payload{Name: tk})
		done <- err
	}()
	if _, err := r.control(ctx, "Started", CtlMsg{Token: tk}); err != nil {
		cancel()
		<-done
		return failed("waiting for the handler", err)
	}
	cancel()
	err := <-done
	class := classify(err)
	o, oerr := r.control(ctx, "Outcome", CtlMsg{Token: tk})
	if oerr != nil {
		return failed("Ctl.Outcome", oerr)
	}
	if class == "Canceled" && o.Err != context.Canceled.Error() {
		return "wrong", fmt.Sprintf("the caller's error: %v; the handler's ctx ended with %q", err, o.Err)
	}
	return class, fmt.Sprintf("caller: %v; handler: %s", err, o.Err)
}

// errorCode: a handler's error with code 451 reaches the caller as a
// *kiev.ServerError with that code and its text, and the handler ran
// once.
func (r *runner) errorCode(ctx context.Context) (string, string) {
	return r.fail(ctx, 0)
}

// errorLong: errorCode with a text 400 bytes longer, made by the handler,
// so that over UDP the error's Response is over 3 times its request (the
// amplification bound).
func (r *runner) errorLong(ctx context.Context) (string, string) {
	return r.fail(ctx, 400)
}

// fail calls Fail with code 451 and a text extra bytes longer than its
// args' Name. If the handler ran other than once, the class says how many
// times.
func (r *runner) fail(ctx context.Context, extra int64) (string, string) {
	tk := newToken("unavailable for legal reasons")
	msg, args := tk, payload{ID: 451, Name: tk}
	if extra > 0 {
		msg += " " + strings.Repeat("x", int(extra))
		args.Tags = []int64{extra}
	}
	_, err := r.invoke(ctx, r.c, "Fail", args)
	o, cerr := r.control(ctx, "Runs", CtlMsg{Token: tk})
	if cerr != nil {
		return failed("Ctl.Runs", cerr)
	}
	class := classify(err)
	var se *kiev.ServerError
	switch {
	case err == nil:
		return "wrong", fmt.Sprintf("Fail succeeded; the handler ran %d times", o.Ran)
	case errors.As(err, &se) && se.Code == 451 && se.Message != msg && strings.Contains(se.Message, "Packet.MaxAmplification") && o.Ran == 1:
		// A Retry of the held error, to a client older than tickets: it
		// keeps the code, and says why the text is not there.
		return "code 451, text held", fmt.Sprintf("%s; the handler ran once", truncate(se.Message, 120))
	case errors.As(err, &se) && se.Code == 451 && se.Message != msg:
		return "wrong", fmt.Sprintf("code 451 with text %q, want %q", truncate(se.Message, 60), truncate(msg, 60))
	case o.Ran != 1:
		class = fmt.Sprintf("%s, ran %d times", class, o.Ran)
	}
	return class, fmt.Sprintf("%s; the handler ran %d times", truncate(err.Error(), 120), o.Ran)
}

// notFound: a method the service lacks fails with ErrNotFound.
func (r *runner) notFound(ctx context.Context) (string, string) {
	_, err := r.invoke(ctx, r.c, "Nope", payload{})
	if err == nil {
		return "wrong", "a call of XV.Nope succeeded"
	}
	return classify(err), truncate(err.Error(), 100)
}

// bigReply: a reply of 3,000 bytes, over 3 times its request's (the UDP
// amplification bound), within one datagram. The handler must run once
// for the call: if it ran more often (the client retried a call it was
// told had not run), the class says how many times.
func (r *runner) bigReply(ctx context.Context) (string, string) {
	const n = 3000
	tk := newToken("big")
	out, err := r.invoke(ctx, r.c, "Big", payload{ID: n, Name: tk})
	o, cerr := r.control(ctx, "Runs", CtlMsg{Token: tk})
	if cerr != nil {
		return failed("Ctl.Runs", cerr)
	}
	ran := fmt.Sprintf("the handler ran %d times", o.Ran)
	switch {
	case err == nil && (len(out.Name) != n || o.Ran != 1):
		return "wrong", fmt.Sprintf("a reply of %d bytes, want %d; %s", len(out.Name), n, ran)
	case err != nil && o.Ran > 1:
		return fmt.Sprintf("%s, ran %d times", classify(err), o.Ran), fmt.Sprintf("%v; %s", err, ran)
	case err != nil:
		return classify(err), fmt.Sprintf("%v; %s", err, ran)
	}
	return "ok", fmt.Sprintf("a %d-byte reply; %s", n, ran)
}

// signed (UDP only; "n/a" over TCP): a call signed with packetKey, if
// this build can sign, to the server's socket for signed calls, if it has
// one, else to its plain one. A server that checks signatures must see
// the key's id; one older than signatures skips their fields and runs
// the call; a signed server refuses an unsigned call with
// ErrUnauthenticated.
func (r *runner) signed(ctx context.Context) (string, string) {
	if r.cfg.network != "udp" {
		return "n/a", "signatures are for datagrams"
	}
	addr, want := r.cfg.udp, ""
	if r.cfg.udpSigned != "" {
		addr, want = r.cfg.udpSigned, packetKeyID
	}
	c, err := r.dial(r.cfg.tcp, addr, signingClient()...)
	if err != nil {
		return failed("dial", err)
	}
	out, err := r.invoke(ctx, c, "Signer", payload{})
	how := fmt.Sprintf("client signs: %v, server checks: %v", canSign, want != "")
	switch {
	case err != nil:
		return classify(err), fmt.Sprintf("%s; %v", how, err)
	case !canSign && want != "":
		return "wrong", how + "; an unsigned call ran"
	case out.Name != want:
		return "wrong", fmt.Sprintf("%s; the handler saw key %q, want %q", how, out.Name, want)
	}
	return "ok", how
}

// drain: while a call runs on a server that drains, new calls fail with
// ErrShutdown, the running call succeeds, and the server ends cleanly.
func (r *runner) drain(ctx context.Context) (string, string) {
	sp, err := r.control(ctx, "Spawn", CtlMsg{})
	if err != nil {
		return failed("Ctl.Spawn", err)
	}
	c, err := r.dial(sp.TCP, sp.UDP, kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		return failed("dial", err)
	}
	tk := newToken("drain")
	held := make(chan error, 1)
	go func() {
		_, err := r.invoke(ctx, c, "Wait", payload{Name: tk})
		held <- err
	}()
	release := func() {
		_, _ = r.control(ctx, "Release", CtlMsg{Token: tk})
		<-held
	}
	if _, err := r.control(ctx, "Started", CtlMsg{Token: tk}); err != nil {
		release()
		return failed("waiting for the held call", err)
	}
	if _, err := r.control(ctx, "StartDrain", CtlMsg{ID: sp.ID}); err != nil {
		release()
		return failed("Ctl.StartDrain", err)
	}
	// New calls are answered until the drain begins, and refused after.
	var before int
	var refused error
	for refused == nil {
		if _, refused = r.invoke(ctx, c, "Echo", payload{ID: 1}); refused == nil {
			before++
		}
	}
	if _, err := r.control(ctx, "Release", CtlMsg{Token: tk}); err != nil {
		return failed("Ctl.Release", err)
	}
	heldErr := <-held
	d, err := r.control(ctx, "AwaitDrain", CtlMsg{ID: sp.ID})
	if err != nil {
		return failed("Ctl.AwaitDrain", err)
	}
	detail := fmt.Sprintf("new calls answered until the drain began (%d), then refused: %v; the running call: %v", before, refused, heldErr)
	switch {
	case heldErr != nil:
		return "running call: " + classify(heldErr), detail
	case !errors.Is(refused, kiev.ErrShutdown):
		return "refused: " + classify(refused), detail
	case d.Err != "":
		return "wrong", detail + "; the server: " + d.Err
	}
	return "ok", detail
}

// drainLoad: 8 callers call in a loop while their server drains, each
// until its first error. Every call must succeed or be refused
// (ErrShutdown or ErrUnavailable), and a call that ran must have
// succeeded: the class is "ok" if the successes equal the calls the
// server completed, "unknown outcome" if calls that ran were reported
// failed (as a server without the last GoAway's LastID may do), "wrong"
// for anything else. Over UDP, where no connection ends, a call sent
// after the socket closed is answered by nobody and ends at its
// deadline, 1s (DeadlineExceeded); a reply that takes longer would count
// as an unknown outcome.
func (r *runner) drainLoad(ctx context.Context) (string, string) {
	sp, err := r.control(ctx, "Spawn", CtlMsg{})
	if err != nil {
		return failed("Ctl.Spawn", err)
	}
	c, err := r.dial(sp.TCP, sp.UDP)
	if err != nil {
		return failed("dial", err)
	}
	const callers, warm = 8, 5
	callTimeout := 5 * time.Second
	if r.cfg.network == "udp" {
		callTimeout = time.Second
	}
	var (
		mu   sync.Mutex // guards ok and errs
		ok   int64
		errs = map[string]int{}
		wg   sync.WaitGroup
	)
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	ready := make(chan struct{}, callers)
	for i := range callers {
		wg.Go(func() {
			for n := 0; ; n++ {
				cctx, cancel := context.WithTimeout(lctx, callTimeout)
				_, err := r.invoke(cctx, c, "Work", payload{ID: int64(i)})
				cancel()
				mu.Lock()
				if err != nil {
					errs[classify(err)]++
				} else {
					ok++
				}
				mu.Unlock()
				if n == warm {
					ready <- struct{}{}
				}
				if err != nil {
					if n < warm {
						ready <- struct{}{}
					}
					return
				}
			}
		})
	}
	for range callers {
		<-ready
	}
	d, err := r.control(ctx, "Drain", CtlMsg{ID: sp.ID})
	if err != nil {
		stop()
	}
	wg.Wait()
	if err != nil {
		return failed("Ctl.Drain", err)
	}
	var kinds []string
	var unexpected bool
	for k, n := range errs {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		switch k {
		case "ErrShutdown", "ErrUnavailable":
		case "DeadlineExceeded":
			unexpected = unexpected || r.cfg.network != "udp"
		default:
			unexpected = true
		}
	}
	sort.Strings(kinds)
	detail := fmt.Sprintf("%d calls succeeded, %d ran; refused: %s", ok, d.Ran, strings.Join(kinds, ", "))
	switch {
	case unexpected || d.Err != "":
		return "wrong", detail + "; the server: " + d.Err
	case ok < d.Ran:
		return "unknown outcome", detail
	case ok > d.Ran:
		return "wrong", detail
	}
	return "ok", detail
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

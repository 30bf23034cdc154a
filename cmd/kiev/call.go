package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/reflection"
)

var callCommand = &command{
	name:     "call",
	synopsis: "[flags] <target> <Service.Method> [json | -]",
	summary:  "call a method with JSON arguments and print the reply as JSON",
	help: `
Call sends the JSON arguments (or null if there are none; "-" reads them
from standard input) to Service.Method on the target and prints the reply
as indented JSON. The arguments travel as msgpack. Call matches the keys
of each JSON object to the fields of the struct it fills as encoding/json
does: by field name (the msgpack or json tag, if the field has one),
exactly or else without regard to case, and a key that names no field is
an error that lists the fields there are. See 'kiev describe' for the
names and types a method takes. A JSON argument that starts with "-" goes
after "--".

A server stream (a method that sends kiev.Out messages) prints each
message as it arrives, as JSON on a line of its own, and then the
stream's status: "OK, after n messages" on standard error, or its error,
with exit status 1. The stream runs until it ends, or Ctrl-C; --timeout
bounds it only if given.

A client stream or a bidirectional stream (a method that takes kiev.In)
sends a sequence of JSON values, each one message: those of the JSON
argument, or, without one or with "-", those read from standard input as
they come (one per line, for instance), until it ends. Then it finishes
sending. A client stream prints its reply as a unary call does; a
bidirectional stream prints each message the server sends as it
arrives, a line of JSON each, and then its status, as a server stream
does. A message that is not valid JSON, or does not fit the method's
message type, ends the stream and says which message it was.

Examples:
  kiev call 127.0.0.1:7000 Arith.Add '{"A": 7, "B": 8}'
  kiev call --meta trace-id=abc --timeout 2s zookeeper://zk:2181/Arith Arith.Add '{"A": 1, "B": 2}'
  echo '{"A": 7, "B": 8}' | kiev call unix:///run/arith.sock Arith.Add -
  kiev call 127.0.0.1:7000 Feed.Watch '{"From": 1}' | jq .N
  kiev call 127.0.0.1:7000 Feed.Upload '{"Data": "aGk="} {"Data": "dGhlcmU="}'
  kiev call 127.0.0.1:7000 Feed.Chat < messages.ndjson`,
	newRunner: func() runner { return &callCmd{} },
}

type callCmd struct {
	fs       *flag.FlagSet
	priority uint
	timeout  time.Duration
	meta     metaFlag
	codec    string
}

func (c *callCmd) flags(fs *flag.FlagSet) {
	c.fs = fs
	fs.UintVar(&c.priority, "priority", uint(kiev.DefaultPriority), "the call's priority `n`, 0 (shed first under overload) to 9 (shed last)")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "give up on the call after `duration`; 0 waits as long as it takes. A stream runs as long as it lasts unless --timeout is given")
	fs.Var(&c.meta, "meta", "send metadata `key=value` with the call; repeat for more pairs")
	fs.StringVar(&c.codec, "codec", "msgpack", "the `name` of the codec to send the call in; only msgpack can carry JSON")
}

func (c *callCmd) run(ctx context.Context, cl *cli, args []string) error {
	if err := wantArgs("call", args, 2, 3, "<target> <Service.Method> [json]"); err != nil {
		return err
	}
	target, method := args[0], args[1]
	if err := c.check(method); err != nil {
		return err
	}
	client, err := cl.dial("call", target, c.timeout)
	if err != nil {
		return err
	}
	defer client.Close()

	callCtx := kiev.WithPriority(ctx, kiev.Priority(c.priority))
	if len(c.meta) > 0 {
		callCtx = kiev.WithMetadata(callCtx, c.meta...)
	}
	callCtx, cancel := withTimeout(callCtx, c.timeout)
	defer cancel()
	mi, err := methodInfo(callCtx, client, method)
	if err != nil {
		return callFailed(ctx, target, method, c.timeout, err)
	}
	if mi != nil && mi.ClientStreaming {
		in := cl.stdin
		if len(args) == 3 && args[2] != "-" {
			in = strings.NewReader(args[2])
		}
		return c.sendStream(ctx, cl, client, target, method, mi, in)
	}
	var text []byte
	switch {
	case len(args) < 3:
		text = []byte("null")
	case args[2] == "-":
		if text, err = io.ReadAll(cl.stdin); err != nil {
			return fmt.Errorf("reading the arguments from standard input: %v", err)
		}
	default:
		text = []byte(args[2])
	}
	callArgs, err := parseJSONArgs(text)
	if err != nil {
		return usagef("call", "%v", err)
	}
	if mi != nil {
		if callArgs, err = fitArgs(callArgs, mi.Args); err != nil {
			return usagef("call", "%s: %v", method, err)
		}
	}
	if mi != nil && mi.ServerStreaming {
		return c.stream(ctx, cl, client, target, method, callArgs)
	}
	var reply any
	if err := client.Call(callCtx, method, callArgs, &reply); err != nil {
		return callFailed(ctx, target, method, c.timeout, err)
	}
	return printJSON(cl.stdout, jsonable(reply))
}

// streamContext is the context a stream runs in: the call's priority
// and metadata, and only a --timeout given bounds it (returned, 0 for
// none), as Ctrl-C ends it.
func (c *callCmd) streamContext(ctx context.Context) (context.Context, context.CancelFunc, time.Duration) {
	streamCtx := kiev.WithPriority(ctx, kiev.Priority(c.priority))
	if len(c.meta) > 0 {
		streamCtx = kiev.WithMetadata(streamCtx, c.meta...)
	}
	timeout := time.Duration(0)
	if c.timeoutSet() {
		timeout = c.timeout
	}
	streamCtx, cancel := withTimeout(streamCtx, timeout)
	return streamCtx, cancel, timeout
}

// stream opens method's server stream with args and prints its messages
// as they come, a line of JSON each, then its status: OK on stderr, or
// its error.
func (c *callCmd) stream(ctx context.Context, cl *cli, client *kiev.Client, target, method string, args any) error {
	streamCtx, cancel, timeout := c.streamContext(ctx)
	defer cancel()
	s, err := client.Stream(streamCtx, method, args)
	if err != nil {
		return callFailed(ctx, target, method, timeout, err)
	}
	defer s.Close()
	return c.printMessages(ctx, cl, s, streamCtx, target, method, timeout)
}

// printMessages prints the messages s receives as they come, a line of
// JSON each, then its status: OK on stderr, or its error.
func (c *callCmd) printMessages(ctx context.Context, cl *cli, s *kiev.Stream, streamCtx context.Context, target, method string, timeout time.Duration) error {
	enc := json.NewEncoder(cl.stdout)
	enc.SetEscapeHTML(false)
	for n := 0; ; n++ {
		var msg any
		err := s.Recv(streamCtx, &msg)
		if err == io.EOF {
			fmt.Fprintf(cl.stderr, "kiev call: %s: OK, after %s\n", method, messages(n))
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w, after %s", callFailed(ctx, target, method, timeout, err), messages(n))
		}
		if err := enc.Encode(jsonable(msg)); err != nil {
			return fmt.Errorf("printing message %d as JSON: %v", n+1, err)
		}
	}
}

// sendStream opens method's client or bidirectional stream and sends it
// the JSON values read from in, one message each, then finishes
// sending. A client stream's reply is printed as a unary call's; a
// bidirectional stream's messages as a server stream's, as they come,
// while the messages from in are still being sent.
func (c *callCmd) sendStream(ctx context.Context, cl *cli, client *kiev.Client, target, method string, mi *reflection.MethodInfo, in io.Reader) error {
	streamCtx, cancel, timeout := c.streamContext(ctx)
	defer cancel()
	s, err := client.Stream(streamCtx, method, nil)
	if err != nil {
		return callFailed(ctx, target, method, timeout, err)
	}
	defer s.Close()
	if !mi.ServerStreaming {
		n, err := sendMessages(streamCtx, s, in, mi.Args)
		if err != nil {
			return c.sendFailed(ctx, s, streamCtx, target, method, timeout, n, err)
		}
		var reply any
		if err := s.Recv(streamCtx, &reply); err != nil {
			return fmt.Errorf("%w, after sending %s", callFailed(ctx, target, method, timeout, err), messages(n))
		}
		return printJSON(cl.stdout, jsonable(reply))
	}
	type sendEnd struct {
		n   int
		err error
	}
	sending := make(chan sendEnd, 1)
	go func() {
		n, err := sendMessages(streamCtx, s, in, mi.Args)
		sending <- sendEnd{n, err}
		var ue *usageError
		if errors.As(err, &ue) {
			s.Close() // a message that is not sent ends the stream
		}
	}()
	recvErr := c.printMessages(ctx, cl, s, streamCtx, target, method, timeout)
	s.Close() // a Send waiting for credit returns
	select {
	case end := <-sending:
		var ue *usageError
		if errors.As(end.err, &ue) {
			return end.err // why the stream ended
		}
	default:
		// Still reading its input, which cannot be interrupted; the
		// stream is over, and the command ends anyway.
	}
	return recvErr
}

// sendFailed explains why sending a client stream's message n+1 failed:
// the stream's own error if the server ended it (Send's io.EOF), or
// err.
func (c *callCmd) sendFailed(ctx context.Context, s *kiev.Stream, streamCtx context.Context, target, method string, timeout time.Duration, n int, err error) error {
	if errors.Is(err, io.EOF) {
		var reply any
		if rerr := s.Recv(streamCtx, &reply); rerr != nil && rerr != io.EOF {
			return fmt.Errorf("%w, after sending %s", callFailed(ctx, target, method, timeout, rerr), messages(n))
		}
		return fmt.Errorf("%s: the server ended the stream after %s, before taking them all", method, messages(n))
	}
	var ue *usageError
	if errors.As(err, &ue) {
		return err
	}
	return fmt.Errorf("%w, after sending %s", callFailed(ctx, target, method, timeout, err), messages(n))
}

// sendMessages sends s the JSON values read from in, fitted to shape, one
// message each, as they come, then finishes sending. It returns how many
// it sent, and the error that stopped it: a usage error for a value that
// is not JSON or does not fit, or Send's.
func sendMessages(ctx context.Context, s *kiev.Stream, in io.Reader, shape reflection.TypeShape) (int, error) {
	dec := json.NewDecoder(in)
	dec.UseNumber()
	for n := 0; ; n++ {
		var v any
		if err := dec.Decode(&v); err != nil {
			if errors.Is(err, io.EOF) {
				return n, s.CloseSend()
			}
			return n, usagef("call", "message %d is not valid JSON: %v; send one JSON value per message", n+1, err)
		}
		msg, err := fitArgs(numbers(v), shape)
		if err != nil {
			return n, usagef("call", "message %d: %v", n+1, err)
		}
		if err := s.Send(ctx, msg); err != nil {
			return n, err
		}
	}
}

// messages says n messages in English.
func messages(n int) string {
	if n == 1 {
		return "1 message"
	}
	return fmt.Sprintf("%d messages", n)
}

// timeoutSet reports whether --timeout was given.
func (c *callCmd) timeoutSet() bool {
	set := false
	c.fs.Visit(func(f *flag.Flag) { set = set || f.Name == "timeout" })
	return set
}

// check validates the flags and the method name.
func (c *callCmd) check(method string) error {
	if c.priority > uint(kiev.MaxPriority) {
		return usagef("call", "--priority %d is out of range; use 0 (shed first) to %d (shed last)", c.priority, kiev.MaxPriority)
	}
	if c.timeout < 0 {
		return usagef("call", "--timeout %v is negative; use a duration such as 5s, or 0 for none", c.timeout)
	}
	switch c.codec {
	case "msgpack":
	case "proto", "protobuf":
		return usagef("call", "--codec %s needs generated protobuf types, which kiev cannot build from JSON; use msgpack", c.codec)
	default:
		return usagef("call", "unknown --codec %q; use msgpack", c.codec)
	}
	if i := strings.LastIndexByte(method, '.'); i <= 0 || i == len(method)-1 {
		return usagef("call", "method %q is not of the form Service.Method, such as Arith.Add", method)
	}
	return nil
}

// metaFlag collects --meta key=value pairs, flattened for kiev.WithMetadata.
type metaFlag []string

func (m *metaFlag) String() string { return strings.Join(*m, ",") }

func (m *metaFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not key=value", s)
	}
	*m = append(*m, k, v)
	return nil
}

// withTimeout bounds ctx by d, unless d is 0.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d == 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// dial dials target for cmd, refusing a bare service name, which only a
// registry could resolve. The client logs its warnings to stderr.
func (cl *cli) dial(cmd, target string, timeout time.Duration) (*kiev.Client, error) {
	if target != "" && !strings.ContainsAny(target, ":/[]") {
		return nil, usagef(cmd, "target %q is a service name, which needs a registry; write zookeeper://host:2181/%s, or the server's host:port", target, target)
	}
	logger := slog.New(slog.NewTextHandler(cl.stderr, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	opts := []kiev.DialOption{kiev.WithLogger(logger)}
	if timeout > 0 {
		opts = append(opts, kiev.WithDialTimeout(timeout))
	}
	c, err := kiev.Dial(target, opts...)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "kiev: ")
		if strings.HasPrefix(msg, "Dial ") {
			return nil, usagef(cmd, "%s", msg) // a malformed target
		}
		return nil, fmt.Errorf("cannot connect to %s: %s; is the server running there?", target, msg)
	}
	return c, nil
}

// callFailed explains why a call of method on target failed. ctx is run's
// signal context.
func callFailed(ctx context.Context, target, method string, timeout time.Duration, err error) error {
	if err := interrupted(ctx); err != nil {
		return err
	}
	var se *kiev.ServerError
	if errors.As(err, &se) {
		return fmt.Errorf("%s: %s: %s", method, codeText(se.Code), strings.TrimPrefix(se.Message, "kiev: "))
	}
	msg := strings.TrimPrefix(err.Error(), "kiev: ")
	msg = strings.TrimPrefix(msg, "call "+method+": ")
	if errors.Is(err, context.DeadlineExceeded) {
		hint := "raise --timeout"
		if strings.HasPrefix(target, "zookeeper://") || strings.HasPrefix(target, "zk://") {
			hint += ", or check with 'kiev list' that the service has providers"
		}
		return fmt.Errorf("%s: no reply within the deadline of %v; %s", method, timeout, hint)
	}
	return fmt.Errorf("%s: %s", method, msg)
}

// codeText names a code in a message: one of kiev's by its name, such as
// NotFound, and a handler's own as "code 404".
func codeText(c kiev.Code) string {
	s := c.String()
	if s == strconv.FormatUint(uint64(c), 10) {
		return "code " + s
	}
	return s
}

// parseJSONArgs decodes one JSON value for msgpack: numbers become int64
// (or uint64) when integral and float64 otherwise, since msgpack decodes
// an integer into a float field but not a float into an integer field.
func parseJSONArgs(text []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the JSON arguments are empty; pass null for none")
		}
		return nil, jsonError(text, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		off := int(dec.InputOffset())
		if err != nil {
			return nil, jsonError(text, err)
		}
		return nil, fmt.Errorf("the JSON arguments hold more than one value; wrap them in an array or object. The second starts at %s", where(text, off))
	}
	return numbers(v), nil
}

// jsonError says where in text a JSON decoding error is.
func jsonError(text []byte, err error) error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("the JSON arguments are not valid JSON: %v, at %s", se, where(text, int(se.Offset)))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("the JSON arguments end too soon, at %s; close every string, object and array", where(text, len(text)))
	}
	return fmt.Errorf("the JSON arguments are not valid JSON: %v", err)
}

// where describes byte offset off of text as a line and column, with the
// line itself and a caret under the column.
func where(text []byte, off int) string {
	off = min(max(off, 0), len(text))
	line := 1 + bytes.Count(text[:off], []byte("\n"))
	start := bytes.LastIndexByte(text[:off], '\n') + 1
	end := bytes.IndexByte(text[start:], '\n')
	if end < 0 {
		end = len(text) - start
	}
	col := off - start // the offending byte is the one before off
	if col == 0 {
		col = 1
	}
	src := string(text[start : start+end])
	return fmt.Sprintf("line %d, column %d:\n\t%s\n\t%s^", line, col, src, strings.Repeat(" ", col-1))
}

// numbers replaces each json.Number in v.
func numbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		return number(v)
	case map[string]any:
		for k, e := range v {
			v[k] = numbers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = numbers(e)
		}
	}
	return v
}

func number(n json.Number) any {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i
	}
	if u, err := strconv.ParseUint(string(n), 10, 64); err == nil {
		return u
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return string(n) // out of float64's range; let the server say
	}
	if f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64 {
		return int64(f) // 1e3, 2.0
	}
	return f
}

// jsonable converts a decoded msgpack reply into a value encoding/json
// can print: maps with non-string keys get string keys, and non-finite
// floats become strings.
func jsonable(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = jsonable(e)
		}
		return v
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []any:
		for i, e := range v {
			v[i] = jsonable(e)
		}
		return v
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return strconv.FormatFloat(v, 'g', -1, 64)
		}
	case float32:
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return strconv.FormatFloat(float64(v), 'g', -1, 32)
		}
	}
	return v
}

// printJSON prints v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("printing the reply as JSON: %v", err)
	}
	return nil
}

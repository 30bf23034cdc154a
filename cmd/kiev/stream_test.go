package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/internal/servetest"
)

// Feed is a service of streams, one of each kind.
type Feed struct{}

type Query struct {
	From int `json:"from"`
	To   int `json:"to"`
}

type Event struct {
	N    int    `json:"n"`
	Text string `json:"text"`
}

type Chunk struct{ Data []byte }

type Sum struct{ Bytes int }

func (Feed) Watch(ctx context.Context, q Query, out kiev.Out[Event]) error {
	for i := q.From; i < q.To; i++ {
		if err := out.Send(ctx, Event{N: i, Text: "<&>"}); err != nil {
			return err
		}
	}
	if q.From < 0 {
		return kiev.Errorf(404, "nothing before %d", q.To)
	}
	return nil
}

func (Feed) Upload(ctx context.Context, in kiev.In[Chunk], sum *Sum) error {
	for c, err := range in.All(ctx) {
		if err != nil {
			return err
		}
		sum.Bytes += len(c.Data)
	}
	return nil
}

func (Feed) Chat(ctx context.Context, in kiev.In[Event], out kiev.Out[Event]) error {
	for e, err := range in.All(ctx) {
		if err != nil {
			return err
		}
		if err := out.Send(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

func serveFeed(t *testing.T) string {
	t.Helper()
	srv := kiev.NewServer()
	if err := srv.Register(Feed{}); err != nil {
		t.Fatal(err)
	}
	return servetest.Start(t, srv)
}

func TestDescribeStreams(t *testing.T) {
	addr := serveFeed(t)
	want := `Feed.Chat(stream Event{n int, text string}) stream Event{n int, text string}
Feed.Upload(stream Chunk{Data []byte}) Sum{Bytes int}
Feed.Watch(Query{from int, to int}) stream Event{n int, text string}
`
	stdout, stderr, code := kievRun(t, "describe", addr)
	if code != exitOK || stdout != want || stderr != "" {
		t.Errorf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", code, stdout, want, stderr)
	}
}

func TestCallServerStream(t *testing.T) {
	addr := serveFeed(t)
	stdout, stderr, code := kievRun(t, "call", addr, "Feed.Watch", `{"From": 1, "to": 4}`)
	want := `{"n":1,"text":"<&>"}
{"n":2,"text":"<&>"}
{"n":3,"text":"<&>"}
`
	if code != exitOK || stdout != want || stderr != "kiev call: Feed.Watch: OK, after 3 messages\n" {
		t.Errorf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", code, stdout, want, stderr)
	}
}

func TestCallServerStreamThatFails(t *testing.T) {
	addr := serveFeed(t)
	stdout, _ := wantRun(t, exitFailed, nil, []string{"kiev call: Feed.Watch: code 404: nothing before 0, after 1 message\n"},
		"call", addr, "Feed.Watch", `{"from": -1, "to": 0}`)
	if stdout != `{"n":-1,"text":"<&>"}`+"\n" {
		t.Errorf("stdout: %q; want the one message", stdout)
	}
}

// kievRunIn runs the kiev command as run does, with stdin as its
// standard input.
func kievRunIn(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cl := &cli{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errOut}
	code = cl.main(context.Background(), args)
	return out.String(), errOut.String(), code
}

func TestCallClientStream(t *testing.T) {
	addr := serveFeed(t)
	// The messages in the argument, and on standard input.
	stdout, stderr, code := kievRun(t, "call", addr, "Feed.Upload", `{"Data": "abc"} {"data": "defgh"}`)
	if code != exitOK || stdout != "{\n  \"Bytes\": 8\n}\n" || stderr != "" {
		t.Errorf("exit %d\nstdout:\n%s\nstderr: %s", code, stdout, stderr)
	}
	stdout, stderr, code = kievRunIn(t, "{\"Data\": \"ab\"}\n{\"Data\": \"c\"}\n", "call", addr, "Feed.Upload")
	if code != exitOK || stdout != "{\n  \"Bytes\": 3\n}\n" || stderr != "" {
		t.Errorf("from stdin: exit %d\nstdout:\n%s\nstderr: %s", code, stdout, stderr)
	}
	// No message at all is a stream of none.
	stdout, _, code = kievRunIn(t, "", "call", addr, "Feed.Upload", "-")
	if code != exitOK || stdout != "{\n  \"Bytes\": 0\n}\n" {
		t.Errorf("no messages: exit %d\nstdout:\n%s", code, stdout)
	}
}

func TestCallBidirectionalStream(t *testing.T) {
	addr := serveFeed(t)
	stdout, stderr, code := kievRunIn(t, `{"n": 1, "text": "a"}`+"\n"+`{"N": 2, "Text": "b"}`+"\n", "call", addr, "Feed.Chat")
	want := `{"n":1,"text":"a"}
{"n":2,"text":"b"}
`
	if code != exitOK || stdout != want || stderr != "kiev call: Feed.Chat: OK, after 2 messages\n" {
		t.Errorf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", code, stdout, want, stderr)
	}
}

// A message that is not JSON, or does not fit the method's message type,
// ends the stream, saying which message it was.
func TestCallStreamBadMessage(t *testing.T) {
	addr := serveFeed(t)
	for m, first := range map[string]string{"Feed.Upload": `{"Data": "x"}`, "Feed.Chat": `{"n": 1}`} {
		_, stderr, code := kievRunIn(t, first+"\n"+`{"n": `, "call", addr, m)
		if code != exitUsage || !strings.Contains(stderr, "message 2 is not valid JSON") {
			t.Errorf("%s with a broken second message: exit %d, stderr: %s", m, code, stderr)
		}
	}
	_, stderr, code := kievRunIn(t, `{"n": 1, "colour": "red"}`, "call", addr, "Feed.Chat")
	if code != exitUsage || !strings.Contains(stderr, "message 1: ") || !strings.Contains(stderr, "colour") {
		t.Errorf("a message with a field Event lacks: exit %d, stderr: %s", code, stderr)
	}
}

// Gate's Talk takes one message, then ends its stream with an error.
type Gate struct{}

func (Gate) Talk(ctx context.Context, in kiev.In[Event], out kiev.Out[Event]) error {
	if _, err := in.Recv(ctx); err != nil {
		return err
	}
	return kiev.Errorf(409, "one is enough")
}

// A bidirectional stream the server ends, while standard input is still
// open (a terminal, say), ends the command with the stream's status: it
// does not wait for more input.
func TestCallBidirectionalStreamEndedByServer(t *testing.T) {
	srv := kiev.NewServer()
	if err := srv.Register(Gate{}); err != nil {
		t.Fatal(err)
	}
	addr := servetest.Start(t, srv)
	stdin, w := io.Pipe()
	defer w.Close()
	go w.Write([]byte(`{"n": 1}` + "\n")) // and never closed
	var out, errOut bytes.Buffer
	cl := &cli{stdin: stdin, stdout: &out, stderr: &errOut}
	code := cl.main(context.Background(), []string{"call", addr, "Gate.Talk"})
	if code != exitFailed || !strings.Contains(errOut.String(), "code 409: one is enough, after 0 messages") {
		t.Errorf("exit %d, stderr: %s", code, errOut.String())
	}
}

package main

import (
	"context"
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

func TestCallRefusesClientStreams(t *testing.T) {
	addr := serveFeed(t)
	for _, m := range []string{"Feed.Upload", "Feed.Chat"} {
		wantRun(t, exitUsage, nil, []string{"kiev call: " + m + " takes a stream of messages from the client, which kiev call does not send"}, "call", addr, m)
	}
}

package transport

import (
	"context"
	"errors"
	"testing"
)

func TestAcceptedFormat(t *testing.T) {
	for _, tc := range []struct {
		accept []string
		want   streamFormat
	}{
		{[]string{"text/event-stream"}, formatSSE},
		{[]string{"application/x-ndjson; charset=utf-8"}, formatNDJSON},
		{[]string{"application/json, application/x-ndjson;q=0.9, text/event-stream"}, formatNDJSON},
		{[]string{"application/json", "text/event-stream"}, formatSSE},
		{[]string{"*/*"}, 0},
		{nil, 0},
		{[]string{";;;"}, 0},
	} {
		if got := acceptedFormat(tc.accept); got != tc.want {
			t.Errorf("acceptedFormat(%q) = %d; want %d", tc.accept, got, tc.want)
		}
	}
}

func TestSameOrigin(t *testing.T) {
	for _, tc := range []struct {
		origin, host string
		want         bool
	}{
		{"http://127.0.0.1:8080", "127.0.0.1:8080", true},
		{"https://Example.com", "example.com", true},
		{"https://example.com", "example.com:8443", false},
		{"https://evil.example", "example.com", false},
		{"null", "example.com", false},
		{"", "example.com", false},
	} {
		if got := sameOrigin(tc.origin, tc.host); got != tc.want {
			t.Errorf("sameOrigin(%q, %q) = %v; want %v", tc.origin, tc.host, got, tc.want)
		}
	}
}

func TestAppendEventSplitsLines(t *testing.T) {
	got := string(appendEvent(nil, "end", []byte("{\n\"a\": 1\r\n}")))
	if want := "event: end\ndata: {\ndata: \"a\": 1\ndata: }\n\n"; got != want {
		t.Errorf("appendEvent = %q; want %q", got, want)
	}
	if got := string(formatNDJSON.appendMessage(nil, []byte(`{"a":1}`))); got != "{\"a\":1}\n" {
		t.Errorf("an NDJSON message is %q", got)
	}
}

func TestHTTPStreamSendWaitsForTheWriter(t *testing.T) {
	s := newHTTPStream(formatNDJSON, 16)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Send(ctx, []byte(`{}`)); !errors.Is(err, context.Canceled) {
		t.Errorf("Send with no writer and its ctx done = %v; want context.Canceled", err)
	}
	if err := s.Send(context.Background(), make([]byte, 17)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Send past MaxFrame = %v; want ErrTooLarge", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Send(context.Background(), []byte(`{"n":1}`)) }()
	m := <-s.msgs
	if string(*m) != "{\"n\":1}\n" {
		t.Errorf("the writer got %q", *m)
	}
	PutBuf(m)
	if err := <-done; err != nil {
		t.Errorf("Send = %v", err)
	}
	s.CloseSend()
	if err := s.Send(context.Background(), []byte(`{}`)); !errors.Is(err, ErrSendEnded) {
		t.Errorf("Send after CloseSend = %v; want ErrSendEnded", err)
	}
	s.Abort(errClientLeft)
	if err := s.Send(context.Background(), []byte(`{}`)); !errors.Is(err, errClientLeft) {
		t.Errorf("Send after Abort = %v; want its error", err)
	}
}

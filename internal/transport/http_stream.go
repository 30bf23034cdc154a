package transport

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/kievrpc/kiev/internal/codes"
)

// The HTTP front serves a server stream as Server-Sent Events or as
// NDJSON, as the request's Accept asks. Its handler runs as over a
// connection: the open passes the scheduler, then the handler runs on a
// goroutine of its own. Its Out sends through an httpStream, which hands
// each message to the request's goroutine; that goroutine writes and
// flushes it, and only then takes the next, so that the HTTP connection
// itself paces the handler. The request's context ending (the client
// left) cancels the handler's.

// streamFormat is how a server stream's messages are written.
type streamFormat uint8

const (
	formatSSE    streamFormat = iota + 1 // text/event-stream
	formatNDJSON                         // application/x-ndjson
)

const (
	contentTypeSSE    = "text/event-stream"
	contentTypeNDJSON = "application/x-ndjson"
)

// checkStream checks a request for a server stream, and returns the
// format its Accept asks for; or answers why not and returns 0. A
// stream takes POST with a JSON body, or GET with its args as JSON in
// the args parameter (as EventSource sends it), from a page of the
// server's own origin.
func (f *HTTPFront) checkStream(w http.ResponseWriter, r *http.Request, name string) streamFormat {
	switch r.Method {
	case http.MethodGet:
		if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host) {
			f.error(w, codeForbidden, fmt.Sprintf("kiev: %s: a GET from a page of another origin (%s) is refused, so that no web page can open the services' streams unasked; serve the page from this server's origin, or POST with Content-Type: application/json", name, o))
			return 0
		}
	case http.MethodPost:
		if ct := r.Header.Get("Content-Type"); !jsonContentType(ct) {
			f.error(w, codeUnsupportedMediaType, fmt.Sprintf("kiev: %s takes a JSON body sent as Content-Type: application/json, not %q (with curl: -H 'Content-Type: application/json')", name, ct))
			return 0
		}
	default:
		w.Header().Set("Allow", "GET, POST")
		f.error(w, codeMethodNotAllowed, fmt.Sprintf("kiev: %s is a server stream: it takes POST with a JSON body, or GET with the JSON args in the args parameter, not %s", name, r.Method))
		return 0
	}
	format := acceptedFormat(r.Header.Values("Accept"))
	if format == 0 {
		f.error(w, codeNotAcceptable, fmt.Sprintf("kiev: %s is a server stream, sent as %s (Server-Sent Events) or %s (a JSON message a line); ask for one with Accept (with curl: -H 'Accept: %s')", name, contentTypeSSE, contentTypeNDJSON, contentTypeNDJSON))
	}
	return format
}

// acceptedFormat is the first stream format the Accept headers name, or
// 0 if none.
func acceptedFormat(accept []string) streamFormat {
	for _, a := range accept {
		for t := range strings.SplitSeq(a, ",") {
			mt, _, err := mime.ParseMediaType(t)
			switch {
			case err != nil:
			case mt == contentTypeSSE:
				return formatSSE
			case mt == contentTypeNDJSON:
				return formatNDJSON
			}
		}
	}
	return 0
}

// sameOrigin reports whether origin, a request's Origin header, is of
// the host the request was sent to.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, host)
}

// httpStream is a server stream's end over HTTP, its handler's Out.
// Send hands each message, framed, to the request's goroutine (msgs is
// unbuffered), so at most one message waits while another is written.
type httpStream struct {
	format   streamFormat
	maxFrame int
	msgs     chan *[]byte  // framed messages, to the request's goroutine
	accepted chan struct{} // closed by Grant: the stream opened
	quit     chan struct{} // closed by Abort: the stream ended
	grant    sync.Once
	abort    sync.Once

	mu        sync.Mutex // guards the fields below
	err       error      // why it ended, once quit is closed
	sendEnded bool       // CloseSend: the handler sends no more
}

func newHTTPStream(format streamFormat, maxFrame int) *httpStream {
	return &httpStream{format: format, maxFrame: maxFrame,
		msgs: make(chan *[]byte), accepted: make(chan struct{}), quit: make(chan struct{})}
}

// errClientLeft is what a handler's Send fails with once the HTTP client
// went away (its context says so too).
var errClientLeft = errors.New("kiev: the HTTP client went away; stop sending")

// SendBuf is Send of *buf, which it gives back to the pool on success.
func (s *httpStream) SendBuf(ctx context.Context, buf *[]byte) error {
	err := s.Send(ctx, *buf)
	if err == nil {
		PutBuf(buf)
	}
	return err
}

// Send hands msg to the request's goroutine, whole, once it has written
// the message before; ctx bounds the wait.
func (s *httpStream) Send(ctx context.Context, msg []byte) error {
	if len(msg) > s.maxFrame {
		return fmt.Errorf("%w: a message of %d bytes, over the %d-byte limit; send less or raise WithMaxFrameSize", ErrTooLarge, len(msg), s.maxFrame)
	}
	s.mu.Lock()
	err, ended := s.err, s.sendEnded
	s.mu.Unlock()
	switch {
	case err != nil:
		return err
	case ended:
		return ErrSendEnded
	}
	buf := GetBuf(len(msg) + 16)
	*buf = s.format.appendMessage((*buf)[:0], msg)
	select {
	case s.msgs <- buf:
		return nil
	case <-s.quit:
		PutBuf(buf)
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.err
	case <-ctx.Done():
		PutBuf(buf)
		return ctx.Err()
	}
}

// Recv: the client of a server stream sends no messages.
func (s *httpStream) Recv(context.Context) (*[]byte, *Final, error) { return nil, nil, io.EOF }

// CloseSend ends the handler's sending; the stream ends as the handler
// returns.
func (s *httpStream) CloseSend() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sendEnded = true
	return nil
}

// Grant opens the stream (a server stream's client sends no messages to
// grant credit to): the request's goroutine writes the response's
// header.
func (s *httpStream) Grant(int) { s.grant.Do(func() { close(s.accepted) }) }

// Abort ends the stream with err: Send fails with it.
func (s *httpStream) Abort(err error) {
	s.abort.Do(func() {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(s.quit)
	})
}

// appendMessage appends msg, a JSON value, framed: an SSE event, or a
// line.
func (sf streamFormat) appendMessage(b, msg []byte) []byte {
	if sf == formatNDJSON {
		return append(append(b, msg...), '\n')
	}
	return appendEvent(b, "", msg)
}

// appendEvent appends an SSE event of type event ("" for a message) with
// data, a line of data: for each of its lines.
func appendEvent(b []byte, event string, data []byte) []byte {
	if event != "" {
		b = append(append(append(b, "event: "...), event...), '\n')
	}
	for line := range bytes.Lines(data) {
		line = bytes.TrimRight(line, "\r\n")
		b = append(append(append(b, "data: "...), line...), '\n')
	}
	return append(b, '\n')
}

// serveStream writes the stream of call c: an answer as a call's if it
// ends before it opens (refused under overload, say); else, from its
// open, its messages as they come, then its end, until the call is done
// or the client leaves. (The args of a stream are decoded once it is
// open: args that do not decode end it with a BadRequest error event.)
func (f *HTTPFront) serveStream(w http.ResponseWriter, r *http.Request, c Call, hs *httpSink, timeout time.Duration) {
	st := hs.stream
	select {
	case <-st.accepted:
	case <-hs.end:
		st.Abort(ErrSendEnded)
		f.answer(w, c, hs, timeout)
		return
	case <-r.Context().Done():
		clientLeft(c, st)
		return
	}
	hs.uncount()
	st.writeHeader(w)
	rc := http.NewResponseController(w)
	// An event stream opens with a comment, which EventSource skips: a
	// proxy such as nginx passes the header on only with body bytes. An
	// NDJSON stream's header goes with its first line through nginx.
	var open []byte
	if st.format == formatSSE {
		open = []byte(": open\n\n")
	}
	_, err := w.Write(open) // even empty, as net/http/fcgi writes a header only in Write
	if err == nil {
		err = rc.Flush()
	}
	var ping <-chan time.Time // an event stream's keepalive
	if st.format == formatSSE {
		t := time.NewTicker(cmp.Or(f.cfg.Keepalive, DefaultSSEKeepalive))
		defer t.Stop()
		ping = t.C
	}
	quiet := true // nothing written since the last tick
	for err == nil {
		select {
		case m := <-st.msgs:
			_, err = w.Write(*m)
			PutBuf(m)
			if err == nil {
				err = rc.Flush()
			}
			quiet = false
		case <-ping:
			if quiet {
				if _, err = w.Write(ssePing); err == nil {
					err = rc.Flush()
				}
			}
			quiet = true
		case <-hs.end:
			f.writeEnd(w, rc, c, hs, timeout)
			return
		case <-r.Context().Done():
			clientLeft(c, st)
			return
		}
	}
	clientLeft(c, st) // a write failed
}

// ssePing is an event stream's keepalive: a comment, which EventSource
// skips.
var ssePing = []byte(": ping\n\n")

// clientLeft ends the handler of c, whose client went away. (Not left to
// ServeHTTP's AfterFunc of the request's context, which a return on that
// context's Done may stop before it runs.)
func clientLeft(c Call, st *httpStream) {
	st.Abort(errClientLeft)
	c.State().CallerGone.Store(true)
	c.Cancel(context.Canceled)
}

// writeHeader writes the header of a stream's response.
func (s *httpStream) writeHeader(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: pass each message on as it comes
	if s.format == formatSSE {
		h.Set("Content-Type", contentTypeSSE)
	} else {
		h.Set("Content-Type", contentTypeNDJSON)
		h.Set("Trailer", HeaderCode)
	}
	w.WriteHeader(http.StatusOK)
}

// writeEnd writes the end of a stream: for SSE, an end event, or an
// error event with the code and message; for NDJSON, nothing, or the
// error as a last line, its code also in the Kiev-Error-Code trailer.
func (f *HTTPFront) writeEnd(w http.ResponseWriter, rc *http.ResponseController, c Call, hs *httpSink, timeout time.Duration) {
	code, msg := hs.code, hs.msg
	if !hs.sent { // the handler ran past its deadline, so no end was made
		code, msg = codes.DeadlineExceeded, fmt.Sprintf("kiev: %s ran past its deadline (%v)", c.Name(), timeout)
	}
	hs.stream.Abort(ErrSendEnded)
	buf := GetBuf(0)
	defer PutBuf(buf)
	b := (*buf)[:0]
	name := codeName(code)
	switch {
	case hs.stream.format == formatSSE && code == codes.OK:
		b = appendEvent(b, "end", []byte(`{"code":"OK"}`))
	case hs.stream.format == formatSSE:
		b = appendEvent(b, "error", errorJSON(name, msg))
	case code != codes.OK:
		b = append(append(b, errorJSON(name, msg)...), '\n')
		w.Header().Set(HeaderCode, name)
	}
	*buf = b
	if len(b) > 0 {
		_, _ = w.Write(b)
	}
	_ = rc.Flush()
}

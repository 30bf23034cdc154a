package kiev_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/kievrpc/kiev"
)

// FuzzHTTPJSON sends arbitrary bodies to the HTTP front's JSON-to-args
// path: each gets a reply or a 400 with a JSON error, never a crash, a
// hang or a 5xx.
func FuzzHTTPJSON(f *testing.F) {
	for _, seed := range []string{
		`{"Name":"ann","Count":3,"Tags":["a","b"]}`,
		``, `null`, `{}`, `[]`, `"x"`, `{"Name":`, `{"Count":1e400}`, `{"Count":"1"}`,
		`{"Tags":[1,2]}`, `{"Name":"\ud800"}`, `{"a":{"b":{"c":[[[[[]]]]]}}}`, `{"Name":"a"} {"Name":"b"}`,
	} {
		f.Add([]byte(seed))
	}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err := srv.Register(&Web{}); err != nil {
		f.Fatal(err)
	}
	defer srv.Close()
	h := srv.HTTPHandler()
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/Web.Hello", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
			var r WebReply
			if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
				t.Fatalf("200 with a body that is not a reply: %q", rec.Body)
			}
		case http.StatusBadRequest:
			var e struct{ Error, Code string }
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code != "BadRequest" || e.Error == "" {
				t.Fatalf("400 without a JSON error: %q", rec.Body)
			}
		default:
			t.Fatalf("body %q: status %d, %s", body, rec.Code, rec.Body)
		}
	})
}

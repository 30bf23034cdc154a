package config_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kievrpc/kiev/clients/config"
	"github.com/kievrpc/kiev/internal/logtest"
)

func newApollo(t testing.TB, opts config.ApolloOptions) *config.Apollo {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger, _ = logtest.New(t)
	}
	src, err := config.NewApollo(opts)
	if err != nil {
		t.Fatalf("NewApollo: %v", err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// next runs src.Next in a goroutine and returns the channel of its
// outcome.
func next(ctx context.Context, src config.Source) <-chan nextResult {
	ch := make(chan nextResult, 1)
	go func() {
		s, err := src.Next(ctx)
		ch <- nextResult{s, err}
	}()
	return ch
}

type nextResult struct {
	snap config.Snapshot
	err  error
}

// TestApolloProtocol follows the requests of a load and a change: a
// configs request without releaseKey, a first long poll with -1 that
// answers at once, a configs request with the releaseKey that answers
// 304, long polls that time out with 304, and on a release a 200, a
// fetch, and a poll with the new notificationId.
func TestApolloProtocol(t *testing.T) {
	fa := newFakeApollo(t, "shop", map[string]string{"addr": ":8080"})
	src := newApollo(t, config.ApolloOptions{Server: fa.url() + "/", AppID: "shop", ClientIP: "10.0.0.7"})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	s0, err := src.Load(ctx)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if v, _ := s0.Get("addr"); v != ":8080" || !strings.HasPrefix(s0.Version(), "2024") {
		t.Fatalf("Load = %v version %q", s0.Map(), s0.Version())
	}
	q := fa.lastQuery("configs")
	if q.Has("releaseKey") || q.Get("ip") != "10.0.0.7" {
		t.Errorf("first configs query = %v, want no releaseKey and ip=10.0.0.7", q)
	}

	res := next(ctx, src)
	fa.waitCount(t, "notifications 200", 1) // the first poll, with -1
	fa.waitCount(t, "configs 304", 1)       // the fetch it triggered
	if q := fa.lastQuery("configs"); q.Get("releaseKey") != s0.Version() {
		t.Errorf("configs query after the first poll = %v, want releaseKey %s", q, s0.Version())
	}
	fa.waitCount(t, "notifications 304", 2) // two long polls timed out
	var asked []map[string]any
	if err := json.Unmarshal([]byte(fa.lastQuery("notifications").Get("notifications")), &asked); err != nil || len(asked) != 1 ||
		asked[0]["namespaceName"] != "application" || asked[0]["notificationId"] != float64(1) {
		t.Errorf("notifications parameter = %v (%v), want the namespace with id 1", asked, err)
	}
	select {
	case r := <-res:
		t.Fatalf("Next returned with no release: %v, %v", r.snap.Map(), r.err)
	default:
	}

	fa.publish("application", map[string]string{"addr": ":9090"})
	r := receive(t, res, "Next after a release")
	if r.err != nil {
		t.Fatalf("Next: %v", r.err)
	}
	if v, _ := r.snap.Get("addr"); v != ":9090" || r.snap.Version() == s0.Version() {
		t.Fatalf("Next = %v version %q", r.snap.Map(), r.snap.Version())
	}
	res = next(ctx, src)
	fa.waitCount(t, "notifications 304", 3)
	if q := fa.lastQuery("notifications"); !strings.Contains(q.Get("notifications"), `"notificationId":2`) {
		t.Errorf("notifications query after the release = %v, want id 2", q)
	}
	src.Close()
	if r := receive(t, res, "Next ended by Close"); !errors.Is(r.err, config.ErrClosed) {
		t.Fatalf("Next ended by Close: %v", r.err)
	}
}

// TestApolloNotModified sends a notification with no new release: the
// fetch it triggers answers 304 and Next goes on waiting, returning only
// the next real release.
func TestApolloNotModified(t *testing.T) {
	fa := newFakeApollo(t, "shop", map[string]string{"a": "1"})
	src := newApollo(t, config.ApolloOptions{Server: fa.url(), AppID: "shop"})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := src.Load(ctx); err != nil {
		t.Fatalf("Load: %v", err)
	}
	res := next(ctx, src)
	fa.waitCount(t, "configs 304", 1)
	fa.notifyOnly("application")
	fa.waitCount(t, "configs 304", 2)
	fa.publish("application", map[string]string{"a": "2"})
	r := receive(t, res, "Next after a release")
	if r.err != nil || r.snap.Map()["a"] != "2" {
		t.Fatalf("Next = %v, %v; want a=2", r.snap.Map(), r.err)
	}
	if n := fa.count("configs 200"); n != 2 {
		t.Errorf("%d configs requests answered 200, want 2: the load and the release", n)
	}
}

// TestApolloServerRestart restarts the config service under a Client,
// first with no change, then with a release made while it was down.
func TestApolloServerRestart(t *testing.T) {
	fa := newFakeApollo(t, "shop", map[string]string{"level": "1"})
	logger, log := logtest.New(t)
	src := newApollo(t, config.ApolloOptions{Server: fa.url(), AppID: "shop", Logger: logger})
	c, err := config.New(context.Background(), src, config.Options{
		Snapshot:      filepath.Join(t.TempDir(), "config.json"),
		Logger:        logger,
		MaxRetryDelay: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer c.Close()
	changes := make(chan config.Snapshot, 10)
	c.OnChange(func(_, new config.Snapshot) { changes <- new })
	fa.waitCount(t, "notifications 304", 1) // following the service

	for _, release := range []bool{false, true} {
		mark := log.Mark()
		fa.stopServer()
		log.WaitFor(t, mark, "level=WARN", "cannot read the config source")
		if err := c.Health(context.Background()); !errors.Is(err, config.ErrUnavailable) || !strings.Contains(err.Error(), fa.addr) {
			t.Fatalf("Health while the service is down: %v, want ErrUnavailable naming %s", err, fa.addr)
		}
		if release {
			fa.publish("application", map[string]string{"level": "2"})
		}
		fa.startServer(t)
		log.WaitFor(t, mark, "the config source is back")
		if err := c.Health(context.Background()); err != nil {
			t.Fatalf("Health once the service is back: %v", err)
		}
	}
	got := receive(t, changes, "the release made while the service was down")
	if v, _ := got.Get("level"); v != "2" {
		t.Fatalf("change = %v, want level 2", got.Map())
	}
	select {
	case s := <-changes:
		t.Fatalf("a second change, %v: the restart with no release should deliver none", s.Map())
	default:
	}
	if s := c.Stats(); s.Changes != 1 || !s.Up || s.Errors < 2 || s.Loads < 3 {
		t.Errorf("Stats = %+v, want 1 change, up, at least 2 errors and 3 loads", s)
	}
}

// TestApolloSignature signs requests with the access key secret, and
// checks that a wrong or missing secret makes a clear error, and that no
// secret reaches the log.
func TestApolloSignature(t *testing.T) {
	const secret = "a93ab23b59044e10b9bce61c4629e666"
	fa := newFakeApollo(t, "shop", map[string]string{"a": "1"}, withSecret(secret))
	logger, log := logtest.New(t)

	good := newApollo(t, config.ApolloOptions{Server: fa.url(), AppID: "shop", Secret: secret, ClientIP: "10.0.0.7", Logger: logger})
	c, err := config.New(context.Background(), good, config.Options{Logger: logger})
	if err != nil {
		t.Fatalf("New with the right secret: %v", err)
	}
	defer c.Close()
	changed := make(chan config.Snapshot, 1)
	c.OnChange(func(_, new config.Snapshot) { changed <- new })
	fa.waitCount(t, "notifications 304", 1) // signed long polls too
	fa.publish("application", map[string]string{"a": "2"})
	if s := receive(t, changed, "change"); s.Map()["a"] != "2" {
		t.Fatalf("change = %v", s.Map())
	}
	if n := fa.count("401"); n != 0 {
		t.Fatalf("%d requests refused with the right secret", n)
	}

	for _, tt := range []struct{ name, secret, want string }{
		{"wrong secret", "not-the-secret", "check ApolloOptions.Secret"},
		{"no secret", "", "set ApolloOptions.Secret"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bad := newApollo(t, config.ApolloOptions{Server: fa.url(), AppID: "shop", Secret: tt.secret, Logger: logger})
			_, err := config.New(context.Background(), bad, config.Options{Logger: logger})
			if !errors.Is(err, config.ErrUnauthorized) || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, want ErrUnauthorized with 401 saying %q", err, tt.want)
			}
		})
	}
	if all := log.All(); strings.Contains(all, secret) || strings.Contains(all, "not-the-secret") {
		t.Errorf("the log holds a secret:\n%s", all)
	}
}

// TestApolloErrors checks the errors of a namespace that does not exist,
// of a server error and of a body that does not parse.
func TestApolloErrors(t *testing.T) {
	fa := newFakeApollo(t, "shop", map[string]string{"a": "1"})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, err := newApollo(t, config.ApolloOptions{Server: fa.url(), AppID: "shop", Namespace: "nope"}).Load(ctx)
	if !errors.Is(err, config.ErrNotFound) || !strings.Contains(err.Error(), `Namespace "nope"`) {
		t.Errorf("Load of an unknown namespace: %v, want ErrNotFound naming it", err)
	}

	for _, tt := range []struct {
		status int
		body   string
		want   error
		text   string
	}{
		{500, "java.lang.NullPointerException", config.ErrUnavailable, "500 Internal Server Error"},
		{200, "<html>proxy login</html>", config.ErrMalformed, "configs response"},
		{200, `{"appId":"shop"}`, config.ErrMalformed, "configurations"},
		{200, `{"configurations":{"port":8080}}`, config.ErrMalformed, "configs response"},
		{304, "", config.ErrMalformed, "304"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tt.status)
			w.Write([]byte(tt.body))
		}))
		src := newApollo(t, config.ApolloOptions{Server: srv.URL, AppID: "shop"})
		_, err := src.Load(ctx)
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
			t.Errorf("Load of %d %q: %v, want %v saying %q", tt.status, tt.body, err, tt.want, tt.text)
		}
		src.Close()
		srv.Close()
	}
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	_, err = newApollo(t, config.ApolloOptions{Server: srv.URL, AppID: "shop"}).Load(ctx)
	if !errors.Is(err, config.ErrUnavailable) {
		t.Errorf("Load from a closed server: %v, want ErrUnavailable", err)
	}
}

func TestApolloOptions(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts config.ApolloOptions
		want string
	}{
		{"no server", config.ApolloOptions{AppID: "shop"}, "Server is empty"},
		{"unparsable", config.ApolloOptions{Server: "http://[::1", AppID: "shop"}, "missing ']'"},
		{"no scheme", config.ApolloOptions{Server: "apollo:8080", AppID: "shop"}, "not an http or https URL"},
		{"other scheme", config.ApolloOptions{Server: "ftp://apollo", AppID: "shop"}, "not an http or https URL"},
		{"no host", config.ApolloOptions{Server: "http:///configs", AppID: "shop"}, "no host"},
		{"query", config.ApolloOptions{Server: "http://apollo?x=1", AppID: "shop"}, "query"},
		{"no app", config.ApolloOptions{Server: "http://apollo"}, "AppID is empty"},
		{"slash in app", config.ApolloOptions{Server: "http://apollo", AppID: "a/b"}, "AppID"},
		{"slash in namespace", config.ApolloOptions{Server: "http://apollo", AppID: "a", Namespace: "x/y"}, "Namespace"},
		{"negative timeout", config.ApolloOptions{Server: "http://apollo", AppID: "a", Timeout: -time.Second}, "negative"},
		{"negative poll timeout", config.ApolloOptions{Server: "http://apollo", AppID: "a", PollTimeout: -time.Second}, "negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src, err := config.NewApollo(tt.opts)
			if err == nil {
				src.Close()
				t.Fatal("NewApollo succeeded")
			}
			if !errors.Is(err, config.ErrOptions) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewApollo: %v, want ErrOptions saying %q", err, tt.want)
			}
		})
	}
	src, err := config.NewApollo(config.ApolloOptions{Server: "https://ops:pa55word@apollo.example.com/cfg", AppID: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if s := src.String(); strings.Contains(s, "pa55word") || !strings.Contains(s, "apollo.example.com/cfg") ||
		!strings.Contains(s, "cluster=default") || !strings.Contains(s, "namespace=application") {
		t.Errorf("String() = %q, want the URL without password and the defaults", s)
	}
}

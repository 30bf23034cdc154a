package config

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults of ApolloOptions.
const (
	DefaultApolloCluster     = "default"
	DefaultApolloNamespace   = "application"
	DefaultApolloTimeout     = 10 * time.Second
	DefaultApolloPollTimeout = 90 * time.Second
)

// maxApolloBody bounds the body of an Apollo response.
const maxApolloBody = 16 << 20

// ApolloOptions configures an Apollo source. Server and AppID are
// required; the zero value of every other field is a working default.
type ApolloOptions struct {
	// Server is the base URL of Apollo's config service, as
	// "http://apollo-config:8080"; a path prefix is kept.
	Server string

	// AppID is the application's id in Apollo.
	AppID string

	// Cluster is the cluster to read: "default" if empty.
	Cluster string

	// Namespace is the namespace to read: "application" if empty. A
	// namespace of another format than properties is named with its
	// suffix, as "app.json", and Apollo serves its whole document as the
	// value of one key, "content".
	Namespace string

	// Secret is the access key secret, for apps whose access keys Apollo
	// enforces: every request is then signed with it. It is never logged
	// nor sent. Empty means no signature.
	Secret string

	// ClientIP, if set, is sent as the "ip" parameter, which Apollo uses
	// to pick gray releases.
	ClientIP string

	// Timeout bounds each configs request. Zero means
	// DefaultApolloTimeout (10 s).
	Timeout time.Duration

	// PollTimeout bounds each notifications request, which the server
	// holds for up to 60 s when nothing changes. Zero means
	// DefaultApolloPollTimeout (90 s); it must exceed the server's hold.
	PollTimeout time.Duration

	// HTTPClient makes the requests; its own Timeout, if any, must exceed
	// PollTimeout. Nil means a client of the source's own, whose idle
	// connections Close closes.
	HTTPClient *http.Client

	// Logger receives the protocol's steps at debug level. Nil discards
	// them. The Client logs errors and changes.
	Logger *slog.Logger
}

// Apollo is a Source reading one namespace of Apollo's config service
// over its open HTTP API, and following it with notifications long
// polls. The package doc summarises the protocol. Make one with
// NewApollo.
type Apollo struct {
	prefix      string // the server's base URL, without a trailing slash
	redacted    string // prefix without credentials, for logs
	appID       string
	cluster     string
	namespace   string
	secret      []byte
	clientIP    string
	timeout     time.Duration
	pollTimeout time.Duration
	hc          *http.Client
	transport   *http.Transport // ours, to close; nil with ApolloOptions.HTTPClient
	log         *slog.Logger

	closing   context.Context // ends at Close
	close     context.CancelFunc
	closeOnce sync.Once

	// Owned by the goroutine calling Load and Next.
	last           Snapshot
	loaded         bool
	resync         bool  // fetch at the next Next, then return the result
	notificationID int64 // the last one Apollo notified; -1 before any
}

var _ Source = (*Apollo)(nil)

// NewApollo returns an Apollo source. It checks opts and fails with an
// error wrapping ErrOptions if Server is not an http or https URL, or if
// AppID is missing; it makes no request.
func NewApollo(opts ApolloOptions) (*Apollo, error) {
	if strings.TrimSpace(opts.Server) == "" {
		return nil, fmt.Errorf(`%w: ApolloOptions.Server is empty; give the config service's URL, as "http://apollo-config:8080"`, ErrOptions)
	}
	u, err := url.Parse(opts.Server)
	switch {
	case err != nil:
		return nil, fmt.Errorf(`%w: ApolloOptions.Server: %v; give the config service's URL, as "http://apollo-config:8080"`, ErrOptions, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf(`%w: ApolloOptions.Server %q is not an http or https URL; give it as "http://apollo-config:8080"`, ErrOptions, u.Redacted())
	case u.Host == "":
		return nil, fmt.Errorf(`%w: ApolloOptions.Server %q has no host`, ErrOptions, u.Redacted())
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf(`%w: ApolloOptions.Server %q has a query or a fragment; give the base URL only`, ErrOptions, u.Redacted())
	}
	for _, f := range []struct{ name, value string }{
		{"AppID", opts.AppID}, {"Cluster", opts.Cluster}, {"Namespace", opts.Namespace},
	} {
		if strings.ContainsAny(f.value, "/?#") || strings.TrimSpace(f.value) != f.value {
			return nil, fmt.Errorf("%w: ApolloOptions.%s %q holds a '/', '?', '#' or surrounding spaces", ErrOptions, f.name, f.value)
		}
	}
	switch {
	case opts.AppID == "":
		return nil, fmt.Errorf("%w: ApolloOptions.AppID is empty; give the application's id in Apollo", ErrOptions)
	case opts.Timeout < 0:
		return nil, fmt.Errorf("%w: negative ApolloOptions.Timeout %v", ErrOptions, opts.Timeout)
	case opts.PollTimeout < 0:
		return nil, fmt.Errorf("%w: negative ApolloOptions.PollTimeout %v", ErrOptions, opts.PollTimeout)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &Apollo{
		prefix:         strings.TrimSuffix(u.String(), "/"),
		redacted:       strings.TrimSuffix(u.Redacted(), "/"),
		appID:          opts.AppID,
		cluster:        cmp.Or(opts.Cluster, DefaultApolloCluster),
		namespace:      cmp.Or(opts.Namespace, DefaultApolloNamespace),
		clientIP:       opts.ClientIP,
		timeout:        cmp.Or(opts.Timeout, DefaultApolloTimeout),
		pollTimeout:    cmp.Or(opts.PollTimeout, DefaultApolloPollTimeout),
		hc:             opts.HTTPClient,
		log:            logger,
		resync:         true,
		notificationID: -1,
	}
	if opts.Secret != "" {
		a.secret = []byte(opts.Secret)
	}
	if a.hc == nil {
		a.transport = http.DefaultTransport.(*http.Transport).Clone()
		a.hc = &http.Client{Transport: a.transport}
	}
	a.closing, a.close = context.WithCancel(context.Background())
	return a, nil
}

// String describes the source, without credentials.
func (a *Apollo) String() string {
	return fmt.Sprintf("apollo %s app=%s cluster=%s namespace=%s", a.redacted, a.appID, a.cluster, a.namespace)
}

// Close ends the requests in progress and closes idle connections.
func (a *Apollo) Close() error {
	a.closeOnce.Do(func() {
		a.close()
		if a.transport != nil {
			a.transport.CloseIdleConnections()
		}
	})
	return nil
}

// Load fetches the namespace's configuration.
func (a *Apollo) Load(ctx context.Context) (Snapshot, error) {
	if a.closing.Err() != nil {
		return Snapshot{}, ErrClosed
	}
	a.loaded = false // a full fetch, without releaseKey
	snap, _, err := a.fetch(ctx)
	if err != nil {
		a.resync = true
		return Snapshot{}, err
	}
	a.resync = false
	return snap, nil
}

// Next long-polls Apollo's notifications until the namespace has a new
// release, then fetches it; see Source.
func (a *Apollo) Next(ctx context.Context) (Snapshot, error) {
	if a.closing.Err() != nil {
		return Snapshot{}, ErrClosed
	}
	if a.resync {
		snap, _, err := a.fetch(ctx)
		if err != nil {
			return Snapshot{}, err
		}
		a.resync = false
		return snap, nil
	}
	for {
		notified, err := a.poll(ctx)
		if err == nil && notified {
			var snap Snapshot
			var changed bool
			snap, changed, err = a.fetch(ctx)
			if err == nil && changed {
				return snap, nil
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				a.resync = true
			}
			return Snapshot{}, err
		}
	}
}

// apolloConfig is the body of a configs response.
type apolloConfig struct {
	AppID          string            `json:"appId"`
	Cluster        string            `json:"cluster"`
	NamespaceName  string            `json:"namespaceName"`
	Configurations map[string]string `json:"configurations"`
	ReleaseKey     string            `json:"releaseKey"`
}

// apolloNotification is an element of a notifications request's
// parameter and of its response's body.
type apolloNotification struct {
	NamespaceName  string `json:"namespaceName"`
	NotificationID int64  `json:"notificationId"`
}

// decodeApolloConfig parses the body of a configs response.
func decodeApolloConfig(body []byte) (apolloConfig, error) {
	var c apolloConfig
	if err := json.Unmarshal(body, &c); err != nil {
		return apolloConfig{}, fmt.Errorf("%w: Apollo's configs response: %v", ErrMalformed, err)
	}
	if c.Configurations == nil {
		return apolloConfig{}, fmt.Errorf(`%w: Apollo's configs response has no "configurations"`, ErrMalformed)
	}
	return c, nil
}

// decodeApolloNotifications parses the body of a notifications response.
func decodeApolloNotifications(body []byte) ([]apolloNotification, error) {
	var ns []apolloNotification
	if err := json.Unmarshal(body, &ns); err != nil {
		return nil, fmt.Errorf("%w: Apollo's notifications response: %v", ErrMalformed, err)
	}
	return ns, nil
}

// fetch GETs the namespace's configs, with the releaseKey held if Load or
// Next read one. It reports whether the configuration is new: 200 with
// another releaseKey or other values. On 304 it returns the last snapshot.
func (a *Apollo) fetch(ctx context.Context) (Snapshot, bool, error) {
	q := url.Values{}
	if a.loaded {
		q.Set("releaseKey", a.last.Version())
	}
	if a.clientIP != "" {
		q.Set("ip", a.clientIP)
	}
	path := "/configs/" + url.PathEscape(a.appID) + "/" + url.PathEscape(a.cluster) + "/" + url.PathEscape(a.namespace)
	status, body, err := a.get(ctx, path, q, a.timeout)
	if err != nil {
		return Snapshot{}, false, err
	}
	if status == http.StatusNotModified {
		if !a.loaded {
			return Snapshot{}, false, fmt.Errorf("%w: Apollo answered 304 Not Modified to a request without releaseKey", ErrMalformed)
		}
		a.log.Debug("kiev/clients/config: Apollo configs not modified", "source", a.String(), "releaseKey", a.last.Version())
		return a.last, false, nil
	}
	c, err := decodeApolloConfig(body)
	if err != nil {
		return Snapshot{}, false, err
	}
	snap := NewSnapshot(c.Configurations, c.ReleaseKey)
	changed := !a.loaded || snap.Version() != a.last.Version() || !snap.Equal(a.last)
	a.last, a.loaded = snap, true
	a.log.Debug("kiev/clients/config: Apollo configs fetched", "source", a.String(), "releaseKey", c.ReleaseKey, "keys", snap.Len())
	return snap, changed, nil
}

// poll makes one notifications long poll and reports whether Apollo
// notified a new release of the namespace.
func (a *Apollo) poll(ctx context.Context) (bool, error) {
	param, _ := json.Marshal([]apolloNotification{{NamespaceName: a.namespace, NotificationID: a.notificationID}})
	q := url.Values{"appId": {a.appID}, "cluster": {a.cluster}, "notifications": {string(param)}}
	if a.clientIP != "" {
		q.Set("ip", a.clientIP)
	}
	status, body, err := a.get(ctx, "/notifications/v2", q, a.pollTimeout)
	if err != nil {
		return false, err
	}
	if status == http.StatusNotModified {
		a.log.Debug("kiev/clients/config: Apollo long poll ended with no change", "source", a.String())
		return false, nil
	}
	ns, err := decodeApolloNotifications(body)
	if err != nil {
		return false, err
	}
	for _, n := range ns {
		if !sameNamespace(n.NamespaceName, a.namespace) {
			continue
		}
		if n.NotificationID == a.notificationID {
			// Polling again at once would spin: treat it as a failure, so
			// that the Client waits before trying again.
			return false, fmt.Errorf("%w: Apollo notified namespace %s with the notificationId it was sent, %d", ErrMalformed, a.namespace, n.NotificationID)
		}
		a.log.Debug("kiev/clients/config: Apollo notified a release", "source", a.String(), "notificationId", n.NotificationID)
		a.notificationID = n.NotificationID
		return true, nil
	}
	// Polling again at once could spin here too.
	return false, fmt.Errorf("%w: Apollo answered a notifications long poll with no notification for namespace %s", ErrMalformed, a.namespace)
}

// sameNamespace compares namespace names as Apollo does: ignoring case,
// with or without the ".properties" suffix of the default format.
func sameNamespace(a, b string) bool {
	a = strings.TrimSuffix(strings.ToLower(a), ".properties")
	b = strings.TrimSuffix(strings.ToLower(b), ".properties")
	return a == b
}

// get GETs path with query, within ctx, timeout and Close, and returns
// the status, 200 or 304, and the body. Other statuses are errors.
func (a *Apollo) get(ctx context.Context, path string, query url.Values, timeout time.Duration) (int, []byte, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stop := context.AfterFunc(a.closing, cancel)
	defer stop()

	u := a.prefix + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrOptions, err)
	}
	req.Header.Set("Accept", "application/json")
	if a.secret != nil {
		ts := strconv.FormatInt(time.Now().UnixMilli(), 10)
		req.Header.Set("Timestamp", ts)
		req.Header.Set("Authorization", "Apollo "+a.appID+":"+apolloSignature(a.secret, ts, req.URL.RequestURI()))
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		switch {
		case a.closing.Err() != nil:
			return 0, nil, ErrClosed
		case ctx.Err() != nil:
			return 0, nil, ctx.Err()
		case rctx.Err() != nil:
			err = fmt.Errorf("no answer within %v", timeout)
		}
		return 0, nil, fmt.Errorf("%w: GET %s%s: %v", ErrUnavailable, a.redacted, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxApolloBody+1))
	if err != nil {
		switch {
		case a.closing.Err() != nil:
			return 0, nil, ErrClosed
		case ctx.Err() != nil:
			return 0, nil, ctx.Err()
		}
		return 0, nil, fmt.Errorf("%w: GET %s%s: reading the response: %v", ErrUnavailable, a.redacted, path, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		if len(body) > maxApolloBody {
			return 0, nil, fmt.Errorf("%w: GET %s%s: the response exceeds %d bytes", ErrMalformed, a.redacted, path, maxApolloBody)
		}
		return resp.StatusCode, body, nil
	case http.StatusNotModified:
		return resp.StatusCode, nil, nil
	case http.StatusUnauthorized, http.StatusForbidden:
		hint := "the app enforces access keys: set ApolloOptions.Secret to one of its secrets"
		if a.secret != nil {
			hint = "check ApolloOptions.Secret against the app's access keys, and this host's clock (Apollo refuses timestamps a minute off)"
		}
		return 0, nil, fmt.Errorf("%w: Apollo answered %s to GET %s%s for app %s; %s",
			ErrUnauthorized, resp.Status, a.redacted, path, a.appID, hint)
	case http.StatusNotFound:
		return 0, nil, fmt.Errorf("%w: Apollo answered %s to GET %s%s: check AppID %q, Cluster %q and Namespace %q, and that the namespace is released",
			ErrNotFound, resp.Status, a.redacted, path, a.appID, a.cluster, a.namespace)
	default:
		return 0, nil, fmt.Errorf("%w: Apollo answered %s to GET %s%s: %s", ErrUnavailable, resp.Status, a.redacted, path, excerpt(body))
	}
}

// apolloSignature signs a request as Apollo's access keys require:
// base64(HMAC-SHA1(secret, timestamp + "\n" + pathWithQuery)).
func apolloSignature(secret []byte, timestamp, pathWithQuery string) string {
	m := hmac.New(sha1.New, secret)
	m.Write([]byte(timestamp + "\n" + pathWithQuery))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// excerpt returns the start of an error response's body, for errors.
func excerpt(body []byte) string {
	body = bytes.TrimSpace(body)
	if len(body) > 200 {
		return strconv.Quote(string(body[:200])) + "..."
	}
	return strconv.Quote(string(body))
}

package config_test

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeApollo follows the protocol of Apollo's config service, as the
// package doc summarises it, for one app and cluster. Its state, the
// releases and notification ids that Apollo keeps in its database,
// outlives the HTTP servers that serve it: stop and start make a server
// restart on the same address.
type fakeApollo struct {
	appID   string
	cluster string
	secret  string        // if set, requests must be signed with it
	hold    time.Duration // how long a notifications long poll is held

	mu       sync.Mutex
	ns       map[string]*fakeNamespace // by lower-case name
	lastID   int64                     // of the last notification, across namespaces
	released chan struct{}             // closed and replaced at each notification
	counts   map[string]int            // "configs 200", "notifications 304", "401"...
	queries  []url.Values              // of every request, in order
	counted  chan struct{}             // closed and replaced at each count

	srv  *httptest.Server
	addr string
	stop chan struct{} // closed when srv stops
}

type fakeNamespace struct {
	name           string
	values         map[string]string
	releaseKey     string
	notificationID int64
}

// newFakeApollo makes an app with the namespace "application" holding
// initial, and starts serving it on a free port until the test ends. opts
// change the server before it starts.
func newFakeApollo(t testing.TB, appID string, initial map[string]string, opts ...func(*fakeApollo)) *fakeApollo {
	a := &fakeApollo{
		appID:    appID,
		cluster:  "default",
		hold:     200 * time.Millisecond,
		ns:       map[string]*fakeNamespace{},
		released: make(chan struct{}),
		counts:   map[string]int{},
		counted:  make(chan struct{}),
	}
	for _, o := range opts {
		o(a)
	}
	a.publish("application", initial)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a.addr = l.Addr().String()
	a.serve(l)
	t.Cleanup(a.stopServer)
	return a
}

// withSecret makes the server demand signatures made with secret.
func withSecret(secret string) func(*fakeApollo) {
	return func(a *fakeApollo) { a.secret = secret }
}

// url returns the config service's base URL.
func (a *fakeApollo) url() string { return "http://" + a.addr }

func (a *fakeApollo) serve(l net.Listener) {
	a.srv = httptest.NewUnstartedServer(http.HandlerFunc(a.handle))
	a.srv.Listener.Close()
	a.srv.Listener = l
	a.stop = make(chan struct{})
	a.srv.Start()
}

// stopServer stops serving, dropping every connection, as a crashed
// server does. The state stays.
func (a *fakeApollo) stopServer() {
	if a.srv == nil {
		return
	}
	close(a.stop)
	a.srv.CloseClientConnections()
	a.srv.Close()
	a.srv = nil
}

// startServer serves again on the same address.
func (a *fakeApollo) startServer(t testing.TB) {
	t.Helper()
	l, err := net.Listen("tcp", a.addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", a.addr, err)
	}
	a.serve(l)
}

// publish releases values in namespace ns, with a new releaseKey and a
// new notification, as Apollo's portal does.
func (a *fakeApollo) publish(ns string, values map[string]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.namespace(ns)
	n.values = maps.Clone(values)
	a.lastID++
	n.releaseKey = fmt.Sprintf("20240601000000-release%d", a.lastID)
	n.notificationID = a.lastID
	close(a.released)
	a.released = make(chan struct{})
}

// notifyOnly sends a notification for ns with no new release.
func (a *fakeApollo) notifyOnly(ns string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lastID++
	a.namespace(ns).notificationID = a.lastID
	close(a.released)
	a.released = make(chan struct{})
}

func (a *fakeApollo) namespace(name string) *fakeNamespace {
	key := strings.ToLower(name)
	n := a.ns[key]
	if n == nil {
		n = &fakeNamespace{name: name}
		a.ns[key] = n
	}
	return n
}

// count returns how many requests ended with what.
func (a *fakeApollo) count(what string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.counts[what]
}

// waitCount waits until at least n requests ended with what.
func (a *fakeApollo) waitCount(t testing.TB, what string, n int) {
	t.Helper()
	timeout := time.NewTimer(waitTimeout)
	defer timeout.Stop()
	for {
		a.mu.Lock()
		got, counted := a.counts[what], a.counted
		a.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-counted:
		case <-timeout.C:
			t.Fatalf("%d requests ended with %q within %v, want %d", got, what, waitTimeout, n)
		}
	}
}

// lastQuery returns the query of the last request to path's kind,
// "configs" or "notifications".
func (a *fakeApollo) lastQuery(kind string) url.Values {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := len(a.queries) - 1; i >= 0; i-- {
		if a.queries[i].Get("_kind") == kind {
			return a.queries[i]
		}
	}
	return nil
}

func (a *fakeApollo) record(what string, q url.Values, kind string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.counts[what]++
	if q != nil {
		q = maps.Clone(q)
		q.Set("_kind", kind)
		a.queries = append(a.queries, q)
	}
	close(a.counted)
	a.counted = make(chan struct{})
}

func (a *fakeApollo) handle(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	if a.secret != "" {
		if err := a.checkSignature(r); err != nil {
			a.record("401", nil, "")
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
	}
	switch {
	case strings.HasPrefix(r.URL.Path, "/configs/"):
		a.configs(w, r)
	case r.URL.Path == "/notifications/v2":
		a.notifications(w, r)
	default:
		http.NotFound(w, r)
	}
}

// checkSignature verifies Apollo's access key signature.
func (a *fakeApollo) checkSignature(r *http.Request) error {
	ts := r.Header.Get("Timestamp")
	ms, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("bad Timestamp %q", ts)
	}
	if d := time.Since(time.UnixMilli(ms)); d > time.Minute || d < -time.Minute {
		return fmt.Errorf("Timestamp %v off", d)
	}
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Apollo ")
	if !ok {
		return fmt.Errorf("no Apollo Authorization")
	}
	app, sig, _ := strings.Cut(auth, ":")
	m := hmac.New(sha1.New, []byte(a.secret))
	m.Write([]byte(ts + "\n" + r.RequestURI))
	want := base64.StdEncoding.EncodeToString(m.Sum(nil))
	if app != a.appID || !hmac.Equal([]byte(sig), []byte(want)) {
		return fmt.Errorf("bad signature")
	}
	return nil
}

func (a *fakeApollo) configs(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/configs/"), "/")
	q := r.URL.Query()
	if len(parts) != 3 || parts[0] != a.appID || parts[1] != a.cluster {
		a.record("configs 404", q, "configs")
		http.NotFound(w, r)
		return
	}
	a.mu.Lock()
	n := a.ns[strings.ToLower(parts[2])]
	var body []byte
	status := http.StatusOK
	switch {
	case n == nil || n.releaseKey == "":
		status = http.StatusNotFound
	case q.Get("releaseKey") == n.releaseKey:
		status = http.StatusNotModified
	default:
		body, _ = json.Marshal(map[string]any{
			"appId": a.appID, "cluster": a.cluster, "namespaceName": n.name,
			"configurations": n.values, "releaseKey": n.releaseKey,
		})
	}
	a.mu.Unlock()
	a.record(fmt.Sprintf("configs %d", status), q, "configs")
	switch status {
	case http.StatusOK:
		w.Header().Set("Content-Type", "application/json;charset=UTF-8")
		w.Write(body)
	case http.StatusNotFound:
		http.NotFound(w, r)
	default:
		w.WriteHeader(status)
	}
}

func (a *fakeApollo) notifications(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var asked []struct {
		NamespaceName  string `json:"namespaceName"`
		NotificationID int64  `json:"notificationId"`
	}
	if err := json.Unmarshal([]byte(q.Get("notifications")), &asked); err != nil || len(asked) == 0 ||
		q.Get("appId") != a.appID || q.Get("cluster") != a.cluster {
		a.record("notifications 400", q, "notifications")
		http.Error(w, "bad notifications request", http.StatusBadRequest)
		return
	}
	hold := time.NewTimer(a.hold)
	defer hold.Stop()
	for {
		type notification struct {
			NamespaceName  string         `json:"namespaceName"`
			NotificationID int64          `json:"notificationId"`
			Messages       map[string]any `json:"messages"`
		}
		var out []notification
		a.mu.Lock()
		for _, n := range asked {
			if ns := a.ns[strings.ToLower(n.NamespaceName)]; ns != nil && ns.notificationID > n.NotificationID {
				key := a.appID + "+" + a.cluster + "+" + n.NamespaceName
				out = append(out, notification{n.NamespaceName, ns.notificationID,
					map[string]any{"details": map[string]int64{key: ns.notificationID}}})
			}
		}
		released := a.released
		a.mu.Unlock()
		if len(out) > 0 {
			a.record("notifications 200", q, "notifications")
			body, _ := json.Marshal(out)
			w.Header().Set("Content-Type", "application/json;charset=UTF-8")
			w.Write(body)
			return
		}
		select {
		case <-released:
		case <-hold.C:
			a.record("notifications 304", q, "notifications")
			w.WriteHeader(http.StatusNotModified)
			return
		case <-r.Context().Done():
			return
		case <-a.stop:
			return
		}
	}
}

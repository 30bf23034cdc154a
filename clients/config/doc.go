// Package config is kiev's configuration client: it reads a service's
// configuration from a config center, decodes it into a struct, and
// follows its changes, so that a service reloads without a restart and
// starts even while the config center is down.
//
// A Client reads from a Source. Four ship with the package:
//
//   - [Apollo], Apollo's config service over its open HTTP API;
//   - [ZooKeeper], the data of one ZooKeeper node, watched;
//   - [Dir], a local directory with one file per key, which needs no
//     server: the default for development and tests, and for
//     configurations mounted as files (a Kubernetes ConfigMap);
//   - [Memory], in memory, for tests.
//
// Package configtest holds the conformance suite every Source passes.
//
// # Using it
//
// A service makes a source, then a Client, and decodes the configuration
// into its own struct:
//
//	src, err := config.NewApollo(config.ApolloOptions{
//		Server: "http://apollo-config:8080",
//		AppID:  "shop",
//		Secret: os.Getenv("APOLLO_SECRET"), // if the app enforces access keys
//	})
//	if err != nil { ... } // bad options, refused at once
//	c, err := config.New(ctx, src, config.Options{
//		Snapshot: "/var/lib/shop/config.json",
//		Logger:   slog.Default(),
//	})
//	if err != nil { ... } // neither the source nor the snapshot file answered
//	defer c.Close()
//
//	type Config struct {
//		Addr    string        `config:"addr"`
//		Timeout time.Duration `config:"timeout"`
//		DB      struct {
//			Host string // from key "DB.Host", or "db.host": case is ignored
//			Port int
//		}
//		Hosts []string `config:"hosts"` // JSON: ["a","b"]
//	}
//	cfg := Config{Timeout: time.Second} // fields with no key keep their values
//	if err := c.Decode(&cfg); err != nil { ... }
//
//	c.OnChange(func(old, new config.Snapshot) {
//		var next Config
//		if err := new.Decode(&next); err != nil {
//			log.Printf("keeping the old configuration: %v", err)
//			return
//		}
//		apply(next)
//	})
//
// New reads the source once, within Options.LoadTimeout. If the source
// cannot be read, New starts from the snapshot file and logs a warning
// that says so; it fails only if that file is missing or unreadable too.
// Then the Client follows the source in the background until Close.
//
// # Values and decoding
//
// A configuration is a set of keys with string values (a [Snapshot]),
// as in Apollo's properties namespaces. [Snapshot.Decode] (and
// [Client.Decode]) sets the exported fields of a struct:
//
//   - A field's key is its tag `config:"name"`, or its name. A key
//     matches exactly or, failing that, ignoring case. `config:"-"` skips
//     a field; `config:"name,required"` makes a missing key an error.
//   - Strings are taken as they are; bools, integers, floats and
//     time.Duration ("1.5s") are parsed, ignoring surrounding spaces;
//     types that implement encoding.TextUnmarshaler (time.Time,
//     netip.Addr, slog.Level) decode themselves; []byte takes the bytes.
//     Slices, maps, arrays and structs are parsed as JSON, so a list is
//     written ["a","b"].
//   - A struct field whose own key is absent is filled from the keys
//     under its key and a dot: DB.Host from "DB.Host". Embedded structs'
//     fields are promoted, as in encoding/json.
//   - A field whose key is absent keeps its value: set defaults before
//     Decode. Keys that match no field are ignored.
//
// Decode reports every field it could not set, and then changes nothing.
//
// # Changes
//
// A change is a version of the configuration whose values differ from the
// current ones. The Client delivers each change once, to every callback
// registered with [Client.OnChange], in order, from one goroutine: a
// callback never runs concurrently with another, nor with itself. A new
// version with the same values (a release that changed nothing, data
// rewritten as it was) delivers nothing. Callbacks run after
// [Client.Current] already returns the new version, and a slow callback
// delays later callbacks, never the reading of the source.
//
// # The snapshot file
//
// With Options.Snapshot set, the Client writes each new version to that
// file, atomically (a temporary file renamed over it), readable by its
// owner only. It is JSON:
//
//	{"v":1,"source":"apollo http://apollo-config:8080 app=shop cluster=default namespace=application",
//	 "version":"20240601-1a2b3c","saved":"2024-06-01T10:00:00Z","values":{"addr":":8080"}}
//
// A Client that starts while its source is down serves that file's
// values, logs at WARN level "the config source is unreachable; starting
// from the snapshot file", reports the source down in Health and Stats,
// and keeps trying the source; when it answers, the Client follows it
// and delivers a change if the values differ.
//
// # Health and metrics
//
// [Client.Health] returns nil while the Client follows its source, and
// otherwise an error for a status page: since when the source fails, why,
// and which version is served meanwhile. [Client.Stats] returns counters
// (loads, changes, errors, the last successful read, the source up or
// down) for a monitor.
//
// # Apollo's HTTP API
//
// An [Apollo] source reads one namespace of one app, in one cluster, with
// two requests of Apollo's open API for clients in other languages than
// Java (apolloconfig.com, "Other language client user guide"):
//
// Configs, without cache:
//
//	GET {server}/configs/{appId}/{clusterName}/{namespaceName}?releaseKey={releaseKey}&ip={clientIp}
//
// answers 200 with the namespace's current release,
//
//	{"appId":"shop","cluster":"default","namespaceName":"application",
//	 "configurations":{"addr":":8080","timeout":"2s"},"releaseKey":"20240601-1a2b3c"}
//
// or 304 Not Modified, with no body, when releaseKey is the current
// release's: the client sends the releaseKey it holds (none at first).
// ip is optional; Apollo uses it for gray releases. The releaseKey is the
// Snapshot's version. A namespace of another format than properties
// ("app.json", "app.yaml") has one key, "content", holding the document.
//
// Notifications, a long poll:
//
//	GET {server}/notifications/v2?appId={appId}&cluster={clusterName}&notifications={json}
//
// where notifications is the URL-encoded JSON array
// [{"namespaceName":"application","notificationId":-1}], the
// notificationId being the last one the server notified (-1 at first).
// The server holds the request until a namespace has a newer release, for
// at most 60 s; then it answers 304, or 200 with the namespaces that
// changed and their new ids:
//
//	[{"namespaceName":"application","notificationId":101,"messages":{"details":{"shop+default+application":101}}}]
//
// The client then fetches the namespace's configs, with its releaseKey,
// and polls again with the new id. A client's poll timeout must exceed the
// server's hold: this package waits 90 s. A first poll with -1 answers at
// once with the current id.
//
// Access keys: if the app enforces them, every request carries two
// headers,
//
//	Timestamp: {milliseconds since 1970}
//	Authorization: Apollo {appId}:{signature}
//
// where signature is base64(HMAC-SHA1(secret, timestamp + "\n" +
// pathWithQuery)) and pathWithQuery is the request's path and query as
// sent, "/configs/shop/default/application?ip=10.0.0.7". The server
// refuses a bad signature, or a timestamp more than a minute off its
// clock, with 401.
//
// The source reports 401 as ErrUnauthorized and 404 (no such app, cluster
// or namespace) as ErrNotFound; the Client retries both, with growing
// delays, as it does after network errors.
//
// # ZooKeeper's node
//
// A [ZooKeeper] source reads one node, whose data is a JSON object:
//
//	{"addr":":8080","timeout":"2s","db.port":5432,"hosts":["a","b"]}
//
// A string member's value is the string; any other member's value is its
// JSON text ("5432", `["a","b"]`), which Decode parses into the field's
// type; a null member is absent. Empty data is an empty configuration.
// The Snapshot's version is the node's modification zxid. The source
// watches the node with GetW, re-armed after every event; it keeps the
// last value while the ensemble is unreachable, and reads the node again
// when its session is back or a new one is made. A node that is missing
// or does not parse is reported to the Client, which keeps its
// configuration, until the node is fixed.
//
// # The directory
//
// A [Dir] source reads a directory: each regular file is a key with its
// file's name, and the file's content, less one trailing newline, is the
// value. Names starting with "." and subdirectories are skipped; links
// are followed. The directory is read again every DirOptions.Interval (1 s)
// and a change is any difference of content. Replace a directory
// atomically, by renaming a new one over it or swapping a link to it, as
// Kubernetes does for ConfigMap volumes (their "..data" link is
// followed): changing files one by one may show a half-done change, which
// the Client then delivers in steps.
package config

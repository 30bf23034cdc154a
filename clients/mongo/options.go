package mongo

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"
)

// Defaults of Options.
const (
	DefaultURI            = "mongodb://127.0.0.1:27017"
	DefaultDatabase       = "test"
	DefaultConnectTimeout = 10 * time.Second
	DefaultSlowThreshold  = 100 * time.Millisecond
	DefaultName           = "default"
)

// exampleURI ends the errors about a URI, to show what one looks like.
const exampleURI = "mongodb://user:password@db1:27017,db2:27017/shop?replicaSet=rs0"

// Options configures a Client. The zero value works: a server on
// 127.0.0.1:27017, database "test", the defaults below. Every field can be
// loaded from the config center with config.Client.Decode; the keys are
// the `config` tags.
type Options struct {
	// URI is the MongoDB connection string: the servers, the credentials
	// and every option of the driver, as the MongoDB manual documents them
	// (www.mongodb.com/docs/manual/reference/connection-string). A replica
	// set is written with its members and name,
	//
	//	mongodb://user:password@db1:27017,db2:27017,db3:27017/shop?replicaSet=rs0&readPreference=secondaryPreferred
	//
	// and the driver finds the other members and follows elections.
	// "mongodb+srv://" URIs are resolved by New. Options this driver does
	// not know are refused, so a misspelt one is not silently ignored. The
	// URI's path is the database credentials are checked against, unless
	// authSource says otherwise. Empty means DefaultURI.
	URI string `config:"uri"`

	// Database is the database DB returns. Empty means the URI's path,
	// else DefaultDatabase ("test").
	Database string `config:"database"`

	// MaxPoolSize caps the connections to each server. Zero means the
	// URI's maxPoolSize, else the driver's default, 100. Setting both is
	// refused.
	MaxPoolSize int `config:"max_pool_size"`

	// ConnectTimeout bounds the opening of one connection: dialling, TLS
	// and the handshake. Zero means the URI's connectTimeoutMS, else
	// DefaultConnectTimeout (10 s). Setting both is refused. It also
	// bounds Health when its ctx has no deadline.
	ConnectTimeout time.Duration `config:"connect_timeout"`

	// SlowThreshold is the duration from which a command that succeeded
	// is logged, at Warn level, as slow. Zero means DefaultSlowThreshold
	// (100 ms).
	SlowThreshold time.Duration `config:"slow_threshold"`

	// Name tells this Client's metrics and log lines from other Clients'
	// of the process: the value of their "client" label and attribute.
	// Empty means DefaultName ("default").
	Name string `config:"name"`

	// Logger receives the Client's log: servers becoming available
	// (Info) or unreachable, pools cleared, failed and slow commands
	// (Warn), connections opened and closed, writes that failed for some
	// documents (Debug); the package doc lists it all. Records are logged
	// with the operation's context, so a handler built with
	// kiev.NewContextHandler adds the kiev call's attributes. Nil
	// discards the log.
	Logger *slog.Logger `config:"-"`

	// Registerer is where the Client registers its metrics. Nil means
	// prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer `config:"-"`
}

// settings are Options with the defaults applied and the URI parsed.
type settings struct {
	Options
	cs *connstring.ConnString
}

// check validates opts and applies the defaults. Its errors wrap
// ErrOptions, name the field and never hold the URI's password.
func (opts Options) check() (settings, error) {
	s := settings{Options: opts}
	s.URI = cmp.Or(s.URI, DefaultURI)
	cs, err := connstring.ParseAndValidate(s.URI)
	if err != nil {
		return s, fmt.Errorf("%w: URI: %s; want one like %s", ErrOptions, redactURI(s.URI, err.Error()), exampleURI)
	}
	s.cs = cs
	if len(cs.UnknownOptions) > 0 {
		names := slices.Sorted(func(yield func(string) bool) {
			for k := range cs.UnknownOptions {
				if !yield(k) {
					return
				}
			}
		})
		return s, fmt.Errorf("%w: URI: unknown option %q (option names are case-insensitive); want one like %s",
			ErrOptions, strings.Join(names, `", "`), exampleURI)
	}
	field := "Database"
	if s.Database == "" && cs.Database != "" {
		field = "the URI's database (its path)"
	}
	s.Database = cmp.Or(s.Database, cs.Database, DefaultDatabase)
	if err := checkDatabaseName(field, s.Database); err != nil {
		return s, err
	}
	switch {
	case s.MaxPoolSize < 0:
		return s, fmt.Errorf("%w: MaxPoolSize is %d; want 0 for the default or a positive number", ErrOptions, s.MaxPoolSize)
	case s.MaxPoolSize > 0 && cs.MaxPoolSizeSet:
		return s, fmt.Errorf("%w: MaxPoolSize is %d and the URI sets maxPoolSize=%d; set one of them", ErrOptions, s.MaxPoolSize, cs.MaxPoolSize)
	case s.ConnectTimeout < 0:
		return s, fmt.Errorf("%w: ConnectTimeout is %v; want 0 for the default or a positive duration", ErrOptions, s.ConnectTimeout)
	case s.ConnectTimeout > 0 && cs.ConnectTimeoutSet:
		return s, fmt.Errorf("%w: ConnectTimeout is %v and the URI sets connectTimeoutMS=%d; set one of them",
			ErrOptions, s.ConnectTimeout, cs.ConnectTimeout.Milliseconds())
	case s.SlowThreshold < 0:
		return s, fmt.Errorf("%w: SlowThreshold is %v; want 0 for the default (%v) or a positive duration", ErrOptions, s.SlowThreshold, DefaultSlowThreshold)
	}
	if s.ConnectTimeout == 0 {
		s.ConnectTimeout = DefaultConnectTimeout
		if cs.ConnectTimeoutSet {
			s.ConnectTimeout = cs.ConnectTimeout
		}
	}
	s.SlowThreshold = cmp.Or(s.SlowThreshold, DefaultSlowThreshold)
	s.Name = cmp.Or(s.Name, DefaultName)
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.Registerer == nil {
		s.Registerer = prometheus.DefaultRegisterer
	}
	return s, nil
}

// checkDatabaseName refuses the database names MongoDB refuses: too
// long, or holding one of the characters /\. "$ or NUL. field names where
// the name came from, for the error.
func checkDatabaseName(field, name string) error {
	if len(name) > 63 {
		return fmt.Errorf("%w: %s %q is %d bytes long; MongoDB allows 63", ErrOptions, field, name, len(name))
	}
	if i := strings.IndexAny(name, "/\\. \"$\x00"); i >= 0 {
		return fmt.Errorf("%w: %s %q holds %q, which MongoDB does not allow in a database name", ErrOptions, field, name, name[i:i+1])
	}
	return nil
}

// redactURI replaces the password of uri, if msg holds it, with "xxxxx".
// The driver's parse errors do not quote the password today; this keeps
// it that way.
func redactURI(uri, msg string) string {
	_, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return msg
	}
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return msg
	}
	_, pw, ok := strings.Cut(rest[:at], ":")
	if !ok || pw == "" {
		return msg
	}
	return strings.ReplaceAll(msg, pw, "xxxxx")
}

package mysql

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"
)

// Defaults of Options.
const (
	DefaultMaxOpen         = 50
	DefaultMaxIdle         = 10
	DefaultConnMaxLifetime = 30 * time.Minute
	DefaultConnMaxIdleTime = 5 * time.Minute
	DefaultConnectTimeout  = 10 * time.Second
	DefaultDialTimeout     = 5 * time.Second
	DefaultSlowThreshold   = 200 * time.Millisecond
	DefaultName            = "default"
)

// exampleDSN is shown in the errors about DSNs.
const exampleDSN = "user:password@tcp(10.0.0.1:3306)/shop?parseTime=true"

// Options configures a DB. Only DSN is required; every other field's zero
// value works: a pool of DefaultMaxOpen connections, no replicas, no
// logging, metrics on prometheus.DefaultRegisterer.
//
// The fields with a config tag load from a config center with
// config.Client.Decode; under a prefix "mysql" the keys are "mysql.dsn",
// "mysql.replicas" (a JSON list of DSNs), "mysql.max_open" and so on.
type Options struct {
	// DSN is the primary server's data source name, in
	// github.com/go-sql-driver/mysql's format:
	//
	//	user:password@tcp(10.0.0.1:3306)/shop?parseTime=true&loc=UTC
	//
	// It must name a database. Two parameters have other defaults than
	// the driver's: parseTime is true unless the DSN says otherwise, so
	// DATETIME columns scan into time.Time, and timeout (to connect) is
	// DefaultDialTimeout, 5 s. A DSN that does not parse is refused by
	// Open, with the driver's reason.
	DSN string `config:"dsn"`

	// Password, if set, is the password of every DSN, the DSN's own
	// password or not: the DSNs can then sit in plain configuration and
	// the password in a secret store.
	Password string `config:"password"`

	// Replicas are the DSNs of read replicas. With replicas, gorm's
	// dbresolver sends the queries (SELECT, Find, First, Row) to one of
	// them at random, and writes, transactions and SELECT ... FOR UPDATE
	// to the primary; db.Clauses(dbresolver.Write) sends a read to the
	// primary. Empty means every query goes to the primary. (dbresolver
	// gives each server a statement cache whose goroutine gorm never
	// stops: a DB with replicas leaves one goroutine per server behind
	// when closed.)
	Replicas []string `config:"replicas"`

	// MaxOpen caps the connections to each server, and MaxIdle those kept
	// open while idle. Zero means DefaultMaxOpen (50) and DefaultMaxIdle
	// (10, or MaxOpen if smaller).
	MaxOpen int `config:"max_open"`
	MaxIdle int `config:"max_idle"`

	// ConnMaxLifetime closes a connection that old once it is idle, and
	// ConnMaxIdleTime one idle that long. Zero means
	// DefaultConnMaxLifetime (30 min) and DefaultConnMaxIdleTime (5 min).
	ConnMaxLifetime time.Duration `config:"conn_max_lifetime"`
	ConnMaxIdleTime time.Duration `config:"conn_max_idle_time"`

	// ConnectTimeout bounds Open's first connection to each server. Zero
	// means DefaultConnectTimeout (10 s).
	ConnectTimeout time.Duration `config:"connect_timeout"`

	// QueryTimeout, if not zero, bounds each statement whose ctx has no
	// deadline (gorm's DefaultContextTimeout). A ctx deadline always
	// bounds a statement, sooner or later than this. Zero means no bound
	// but the ctx's.
	QueryTimeout time.Duration `config:"query_timeout"`

	// SlowThreshold is the duration from which a statement is logged as
	// slow and counted in Stats.Slow. Zero means DefaultSlowThreshold
	// (200 ms).
	SlowThreshold time.Duration `config:"slow_threshold"`

	// Name tells this DB from others of the process in logs and metrics
	// (the "client" label): letters, digits and "._:-", at most 64. Zero
	// means DefaultName, "default". Two open DBs on one Registerer need
	// different Names.
	Name string `config:"name"`

	// Logger receives the DB's log: failed statements and slow ones
	// (WARN; DEBUG for a cancelled ctx), servers lost and back (WARN and
	// INFO), each new connection (DEBUG), and gorm's and the driver's own
	// messages. Statements appear as SQL with placeholders, never with
	// their parameters, cut to 300 bytes. Nil discards the log.
	Logger *slog.Logger `config:"-"`

	// Registerer receives the DB's metrics. Nil means
	// prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer `config:"-"`

	// Configure, if not nil, is called with the gorm configuration Open
	// has made, before gorm opens: there it can set what Options does not
	// have (NamingStrategy, PrepareStmt, TranslateError...). Replacing
	// the Logger there makes gorm log through that logger instead.
	Configure func(*gorm.Config) `config:"-"`
}

// validName is what Options.Name may hold.
var validName = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// server is one server of a DB: the primary or a replica.
type server struct {
	role string // "primary" or "replica 1"...
	cfg  *mysql.Config
}

// String describes the server for logs and errors, without its password.
func (s server) String() string {
	return fmt.Sprintf("%s %s@%s(%s)/%s", s.role, s.cfg.User, s.cfg.Net, s.cfg.Addr, s.cfg.DBName)
}

// withDefaults checks o and returns it with the defaults filled in, and
// its servers, the primary first.
func (o Options) withDefaults() (Options, []server, error) {
	o.Name = cmp.Or(o.Name, DefaultName)
	if !validName.MatchString(o.Name) {
		return o, nil, fmt.Errorf("%w: Name %q: use letters, digits and \"._:-\" (at most 64), such as \"orders\"", ErrOptions, o.Name)
	}
	primary, err := parseDSN("DSN", o.DSN, o.Password)
	if err != nil {
		return o, nil, err
	}
	servers := []server{{"primary", primary}}
	for i, dsn := range o.Replicas {
		cfg, err := parseDSN(fmt.Sprintf("Replicas[%d]", i), dsn, o.Password)
		if err != nil {
			return o, nil, err
		}
		servers = append(servers, server{fmt.Sprintf("replica %d", i+1), cfg})
	}
	switch {
	case o.MaxOpen < 0:
		return o, nil, fmt.Errorf("%w: MaxOpen is %d; give a positive number, or 0 for the default %d", ErrOptions, o.MaxOpen, DefaultMaxOpen)
	case o.MaxIdle < 0:
		return o, nil, fmt.Errorf("%w: MaxIdle is %d; give a positive number, or 0 for the default %d", ErrOptions, o.MaxIdle, DefaultMaxIdle)
	case o.MaxOpen > 0 && o.MaxIdle > o.MaxOpen:
		return o, nil, fmt.Errorf("%w: MaxIdle (%d) is more than MaxOpen (%d); the pool keeps at most MaxOpen", ErrOptions, o.MaxIdle, o.MaxOpen)
	}
	o.MaxOpen = cmp.Or(o.MaxOpen, DefaultMaxOpen)
	o.MaxIdle = cmp.Or(o.MaxIdle, min(DefaultMaxIdle, o.MaxOpen))
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"ConnMaxLifetime", &o.ConnMaxLifetime, DefaultConnMaxLifetime},
		{"ConnMaxIdleTime", &o.ConnMaxIdleTime, DefaultConnMaxIdleTime},
		{"ConnectTimeout", &o.ConnectTimeout, DefaultConnectTimeout},
		{"QueryTimeout", &o.QueryTimeout, 0},
		{"SlowThreshold", &o.SlowThreshold, DefaultSlowThreshold},
	} {
		if *d.v < 0 {
			return o, nil, fmt.Errorf("%w: %s is %v; give a positive duration, or 0 for the default", ErrOptions, d.name, *d.v)
		}
		*d.v = cmp.Or(*d.v, d.def)
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.DefaultRegisterer
	}
	return o, servers, nil
}

// parseDSN parses the DSN of the field field, sets its password if
// password is not empty, and its defaults. Its errors never hold the
// DSN, which may hold a password.
func parseDSN(field, dsn, password string) (*mysql.Config, error) {
	if dsn == "" {
		return nil, fmt.Errorf("%w: %s is empty; give a DSN such as %s", ErrOptions, field, exampleDSN)
	}
	if scheme, _, ok := strings.Cut(dsn, "://"); ok && !strings.ContainsAny(scheme, "@/(") {
		return nil, fmt.Errorf("%w: %s is a %s:// URL; the driver takes a DSN such as %s", ErrOptions, field, scheme, exampleDSN)
	}
	if slash := strings.LastIndexByte(dsn, '/'); slash > 0 {
		if at := strings.LastIndexByte(dsn[:slash], '@'); at >= 0 {
			if addr := dsn[at+1 : slash]; strings.Contains(addr, ":") && !strings.Contains(addr, "(") {
				return nil, fmt.Errorf("%w: %s gives the address %s without its network; write tcp(%s)", ErrOptions, field, addr, addr)
			}
		}
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: %s does not parse (%s); write it as user:password@tcp(host:port)/dbname?param=value, such as %s", ErrOptions, field, whyNot(dsn, err), exampleDSN)
	}
	if strings.HasPrefix(cfg.Net, "tcp") {
		host, port, err := net.SplitHostPort(cfg.Addr)
		if err != nil || host == "" {
			return nil, fmt.Errorf("%w: %s: the address in %s(...) is not host:port; write it such as tcp(10.0.0.1:3306)", ErrOptions, field, cfg.Net)
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return nil, fmt.Errorf("%w: %s: port %q is not a number from 1 to 65535; write the address such as tcp(10.0.0.1:3306)", ErrOptions, field, port)
		}
	}
	if cfg.DBName == "" {
		return nil, fmt.Errorf("%w: %s names no database; add its name after the slash, such as %s", ErrOptions, field, exampleDSN)
	}
	if password != "" {
		cfg.Passwd = password
	}
	if !dsnParams(dsn).Has("parseTime") {
		cfg.ParseTime = true
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultDialTimeout
	}
	return cfg, nil
}

// whyNot returns why dsn does not parse: err, the driver's reason, if
// dsn has no password, and otherwise the reason for a copy of dsn whose
// password is hidden, as the driver's errors quote the parts of a DSN
// they blame. The password is after the first ':' and before the last
// '@', as the driver reads it.
func whyNot(dsn string, err error) string {
	i, j := strings.IndexByte(dsn, ':'), strings.LastIndexByte(dsn, '@')
	if i < 0 || j < i {
		return err.Error()
	}
	if _, err := mysql.ParseDSN(dsn[:i+1] + "***" + dsn[j:]); err != nil {
		return err.Error()
	}
	return "the driver reads a part of the password as something else"
}

// dsnParams returns the parameters of a DSN that parses.
func dsnParams(dsn string) url.Values {
	_, query, ok := strings.Cut(dsn[strings.LastIndexByte(dsn, '/')+1:], "?")
	if !ok {
		return nil
	}
	v, _ := url.ParseQuery(query)
	return v
}

// String describes the options as %+v would, with the passwords
// replaced by "***", in Password and in the DSNs, so that options can be
// logged.
func (o Options) String() string {
	type plain Options // without the String method
	p := plain(o)
	if p.Password != "" {
		p.Password = "***"
	}
	p.DSN = redactDSN(p.DSN)
	p.Replicas = make([]string, len(o.Replicas))
	for i, dsn := range o.Replicas {
		p.Replicas[i] = redactDSN(dsn)
	}
	return fmt.Sprintf("%+v", p)
}

// redactDSN returns dsn with its password replaced by "***", or "***" if
// it does not parse.
func redactDSN(dsn string) string {
	if dsn == "" {
		return ""
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "***"
	}
	if cfg.Passwd != "" {
		cfg.Passwd = "***"
	}
	return cfg.FormatDSN()
}

// Package mysql is kiev's MySQL client: gorm (gorm.io/gorm) with its MySQL
// driver (gorm.io/driver/mysql, over github.com/go-sql-driver/mysql), not
// hidden, with what every service otherwise writes around it: options
// checked at start and loadable from the config center, logs through
// slog, Prometheus metrics, read replicas, a health check, and a Close
// for shutdown. It works with MariaDB as with MySQL.
//
// A DB embeds *gorm.DB, so its queries, transactions and migrations are
// gorm's, with gorm's types and errors (gorm.ErrRecordNotFound). Both
// packages named mysql (this one and the drivers) are best imported under
// other names, such as kmysql, where they meet.
//
// # Using it
//
// A service opens a DB at start, from its configuration, and hands it to
// its kiev server's lifecycle:
//
//	var cfg struct {
//		MySQL mysql.Options `config:"mysql"` // keys mysql.dsn, mysql.replicas...
//	}
//	if err := conf.Decode(&cfg); err != nil { ... } // conf: a *config.Client
//	cfg.MySQL.Password = os.Getenv("MYSQL_PASSWORD") // or in the DSN
//	cfg.MySQL.Name = "orders"
//	cfg.MySQL.Logger = logger
//	db, err := mysql.Open(cfg.MySQL)
//	if err != nil { ... } // bad options, or a server that does not answer
//	srv.RegisterHealth("mysql-orders", db.Health)
//	srv.OnShutdown(func(context.Context) error { return db.Close() })
//
// and its handlers pass their ctx with gorm's WithContext, so that no
// statement outlives the call that made it:
//
//	func (s *Orders) Get(ctx context.Context, id int64, reply *Order) error {
//		err := s.db.WithContext(ctx).First(reply, id).Error
//		if errors.Is(err, gorm.ErrRecordNotFound) { ... }
//		return err
//	}
//
// # Deadlines
//
// A statement's ctx bounds it: when the ctx ends, the driver closes the
// statement's connection, the statement fails with the ctx's error
// (errors.Is(err, context.DeadlineExceeded)), and the pool opens another
// connection for the next one. A statement whose ctx has already ended is
// not sent. gorm uses context.Background() for a DB without
// WithContext; Options.QueryTimeout bounds such statements too.
//
// # Replicas
//
// With Options.Replicas, gorm's dbresolver plugin sends reads (Find,
// First, Row, raw SELECTs) to one of the replicas, at random, and writes,
// transactions and SELECT ... FOR UPDATE to the primary. Force the
// primary for a read that must see a write just made:
//
//	db.WithContext(ctx).Clauses(dbresolver.Write).First(&order, id)
//
// # Failures
//
// When a server goes away, statements fail with the driver's errors,
// and the DB logs "mysql: cannot connect" once. database/sql throws the
// broken connections away and opens new ones: once the server is back,
// statements succeed again, with no new DB, and the log says "mysql:
// connected again" and for how long it was down.
//
// # Logs and metrics
//
// The DB logs to Options.Logger: failed statements and slow ones (those
// that took Options.SlowThreshold, 200 ms, or longer) at WARN, servers
// lost and back, every new connection at DEBUG, and gorm's and the
// driver's own messages. It logs with the statement's ctx, so that a
// logger built on kiev.NewContextHandler adds the kiev call's attributes
// to a statement's lines. A statement is logged as gorm built it, with
// placeholders where its parameters go, cut to 300 bytes:
//
//	msg="mysql: slow statement" client=orders sql="SELECT * FROM `orders` WHERE `orders`.`id` = ? ORDER BY `orders`.`id` LIMIT ?" table=orders op=query rows=1 took=312ms
//
// Parameters are never logged, nor are passwords: errors and logs
// describe a server as user@tcp(host:port)/dbname, and Options.String
// hides the passwords. An error from the server may quote a value,
// though, such as the key of a duplicate entry.
//
// Metrics go to Options.Registerer, labelled with Options.Name as
// "client":
//
//	kiev_mysql_queries_total{client,table,operation,outcome}   statements, outcome "ok" or "error"
//	kiev_mysql_query_duration_seconds{client,table,operation}  latency histogram
//	kiev_mysql_pool_connections{client,state}                  "idle" and "in_use"
//	kiev_mysql_pool_waits_total{client}                        waits for a free connection
//	kiev_mysql_pool_wait_seconds_total{client}                 time spent waiting
//
// operation is gorm's processor: create, query (First, Find, Count...),
// update, delete, row (Row, Rows, and Raw with Scan; timed until the rows
// are ready, not read) or raw (Exec); table is empty for raw SQL.
// gorm.ErrRecordNotFound is "ok".
// DB.Stats has the same counts, and database/sql's statistics of each
// pool, without Prometheus.
package mysql

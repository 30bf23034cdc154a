// Package mongo is kiev's MongoDB client: the official Go driver
// (go.mongodb.org/mongo-driver/v2), whose own *mongo.Client it hands
// back, with what a service needs around it: options checked at start and
// loadable from the config center, logs of failed and slow commands and
// of servers coming and going, Prometheus metrics of commands and pools,
// a health check and a Close for the server's shutdown.
//
// # Using it
//
// A service makes one Client per deployment at start, and shares it:
//
//	c, err := mongo.New(ctx, mongo.Options{
//		URI:      "mongodb://shop:" + password + "@db1:27017,db2:27017,db3:27017/shop?replicaSet=rs0",
//		Database: "shop",
//		Name:     "shop", // the metrics' and log lines' client label
//		Logger:   logger,
//	})
//	if err != nil { ... } // bad options, or no server answered
//	srv.OnShutdown(c.Close)               // disconnect once the calls have drained
//	srv.RegisterHealth("mongo", c.Health) // a ping, on the status page
//
// [Client] embeds the driver's *mongo.Client, so everything the driver
// documents works unchanged; [Client.DB] returns the database of
// [Options.Database].
// A handler passes its ctx to each operation:
//
//	func (s *Shop) Order(ctx context.Context, id string, reply *Order) error {
//		return s.db.DB().Collection("orders").FindOne(ctx, bson.D{{"_id", id}}).Decode(reply)
//	}
//
// Options can come from the config center, under keys named by their
// `config` tags:
//
//	var cfg struct {
//		Mongo mongo.Options `config:"mongo"` // keys mongo.uri, mongo.database, mongo.slow_threshold, ...
//	}
//	if err := configClient.Decode(&cfg); err != nil { ... }
//	cfg.Mongo.Logger = logger
//	c, err := mongo.New(ctx, cfg.Mongo)
//
// # Starting and outages
//
// [New] refuses options it cannot use at once, with an error wrapping
// [ErrOptions] that names the field or the URI's option and shows a good
// URI; it never repeats the password. Then it pings the deployment,
// within its ctx (or [Options.ConnectTimeout]), and fails with
// [ErrUnavailable] if no server answers: wrong hosts, network or
// credentials show as the service starts. After that the Client lives
// through outages and elections: while no server answers, operations fail
// with the driver's errors and [Client.Health] with ErrUnavailable; the
// driver watches the servers, and as soon as one answers, operations
// succeed again, with the same Client.
//
// # Deadlines
//
// Every operation takes the caller's ctx, so the deadline of a kiev call
// bounds the queries its handler makes. An operation whose deadline has
// passed is not sent. The driver tells the server the time left as
// maxTimeMS, so a query that takes too long is stopped on the server too,
// and fails with an error for which errors.Is(err,
// context.DeadlineExceeded) and the driver's mongo.IsTimeout hold. The
// exceptions are Find and Aggregate, which open cursors: the driver sends
// them without maxTimeMS (DRIVERS-2722), so the call returns at the
// deadline but the server may finish the query. Operations whose ctx has
// no deadline wait up to the URI's timeoutMS, if set, else the driver's
// server selection and socket timeouts.
//
// # Logs
//
// The Client logs to [Options.Logger], with the operation's ctx, so that a
// handler built with kiev.NewContextHandler adds the kiev call's
// attributes (method, request id, trace id) to a query's lines:
//
//   - Warn: a command that failed (the server's error, a broken
//     connection, a deadline), a command that succeeded in
//     [Options.SlowThreshold] or more, a server becoming unreachable, a pool
//     cleared after a server failed, a connection that could not be made;
//   - Info: a server becoming available, New connected, Close;
//   - Debug: connections opened and closed, writes that failed for some
//     documents (a duplicate key; the caller gets a mongo.WriteException),
//     the endSessions that servers without sessions refuse at Close.
//
// A command's line shows its name, database, collection, duration, server
// connection, request id and the command itself as relaxed Extended JSON,
// cut to [MaxLoggedCommand] bytes, without the driver's session fields; its
// filter and documents are the application's data, so their first bytes
// show. The
// bodies of commands that carry credentials (authenticate, saslStart,
// saslContinue, getnonce, createUser, updateUser, copydb and a hello with
// speculative authentication) are never logged: they show as
// "[redacted]", and their errors by code only.
//
// # Metrics
//
// The Client registers these on [Options.Registerer], each with the label
// client set to [Options.Name]:
//
//	kiev_mongo_commands_total{command,collection,outcome}  counter
//	kiev_mongo_command_duration_seconds{command}           histogram, 0.5 ms to 10 s
//	kiev_mongo_pool_connections{state}                     gauge: open, in_use
//	kiev_mongo_pool_checkout_failures_total{reason}        counter: connectionError, timeout, poolClosed
//	kiev_mongo_pool_cleared_total                          counter
//
// outcome is ok, error (the server's error, a broken connection, or a
// write with write errors), timeout or canceled. collection is the
// collection a command acts on, for the commands that name one (find,
// insert, update, delete, findAndModify, aggregate, count, distinct,
// getMore, index and collection commands), and empty for the others.
// Command names are the driver's, and collections the schema's, so the
// series are bounded; a service that names collections after users or
// days would still flood the monitor, so past [MaxCollectionLabels]
// collections (and [MaxCommandLabels] commands) new ones count under
// [OtherLabel]. The counts cover the commands sent: an operation that fails
// before, because no server can be selected or its deadline has passed,
// is the caller's error, and shows in the pool metrics and the logs of the
// server going down.
//
// The hooks are the driver's event.CommandMonitor, event.PoolMonitor and
// event.ServerMonitor; counting a command allocates nothing, and the
// Client's overhead over the bare driver is the driver's events (see
// BenchmarkFindOne and BenchmarkHooks). Clients of different names
// register side by side; two Clients of one name share their series, and
// the Close of the one that registered them unregisters them.
// [Client.Stats] returns the same counts for a status page.
//
// # Deployments
//
// Everything about the deployment is in the URI: a replica set's members
// and name (replicaSet=), read preference and concern, write concern,
// TLS (tls=true, tlsCAFile=), the authentication source and mechanism,
// "mongodb+srv://" names, compression, timeoutMS. Options this driver
// version does not know are refused, so that a misspelt one ("replSet")
// does not silently connect to one server only.
//
// # FerretDB
//
// The tests run against FerretDB v1.24 on SQLite, a MongoDB-wire server
// that scripts/services.sh builds and starts. It supports what the tests
// use: CRUD, upserts, findOneAndUpdate, unique indexes, counts, distinct,
// simple aggregations, bulk writes and maxTimeMS. It does not support
// transactions, change streams, TTL indexes, user management or
// endSessions; this package works the same with MongoDB, where they work.
package mongo

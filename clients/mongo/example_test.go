package mongo_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/kievrpc/kiev/clients/config"
	"github.com/kievrpc/kiev/clients/mongo"
)

// A service makes one Client at start, closes it on shutdown, and passes
// each call's ctx to its queries. (It needs a server on 127.0.0.1:27017,
// so it is not run.)
func Example() {
	ctx := context.Background()
	c, err := mongo.New(ctx, mongo.Options{
		URI:      "mongodb://127.0.0.1:27017/?appName=shop",
		Database: "shop",
		Name:     "shop",
		Logger:   slog.Default(),
	})
	if err != nil {
		log.Fatal(err) // bad options, or no server answered
	}
	// With a kiev.Server srv:
	//	srv.OnShutdown(c.Close)
	//	srv.RegisterHealth("mongo", c.Health)
	defer c.Close(ctx)

	// In a handler, ctx is the call's: its deadline bounds the query.
	callCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	var order struct {
		ID    string `bson:"_id"`
		Total int    `bson:"total"`
	}
	err = c.DB().Collection("orders").FindOne(callCtx, bson.D{{Key: "_id", Value: "o-1"}}).Decode(&order)
	fmt.Println(order, err)
}

// Options load from the config center like any configuration.
func ExampleOptions() {
	src := config.NewMemory(map[string]string{
		"mongo.uri":            "mongodb://db1:27017,db2:27017/shop?replicaSet=rs0",
		"mongo.max_pool_size":  "50",
		"mongo.slow_threshold": "250ms",
		"mongo.name":           "shop",
	})
	cc, err := config.New(context.Background(), src, config.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	var cfg struct {
		Mongo mongo.Options `config:"mongo"`
	}
	if err := cc.Decode(&cfg); err != nil {
		log.Fatal(err)
	}
	fmt.Println(cfg.Mongo.URI)
	fmt.Println(cfg.Mongo.MaxPoolSize, cfg.Mongo.SlowThreshold, cfg.Mongo.Name)
	// Output:
	// mongodb://db1:27017,db2:27017/shop?replicaSet=rs0
	// 50 250ms shop
}

// New refuses a URI it cannot use at once, without trying the network,
// and says what a good one looks like.
func ExampleNew_badURI() {
	_, err := mongo.New(context.Background(), mongo.Options{URI: "db1:27017/shop"})
	fmt.Println(errors.Is(err, mongo.ErrOptions))
	fmt.Println(err)
	_, err = mongo.New(context.Background(), mongo.Options{URI: "mongodb://db1:27017/?replSet=rs0"})
	fmt.Println(err)
	// Output:
	// true
	// kiev/clients/mongo: invalid options: URI: error parsing uri: scheme must be "mongodb" or "mongodb+srv"; want one like mongodb://user:password@db1:27017,db2:27017/shop?replicaSet=rs0
	// kiev/clients/mongo: invalid options: URI: unknown option "replset" (option names are case-insensitive); want one like mongodb://user:password@db1:27017,db2:27017/shop?replicaSet=rs0
}

package mongo_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"
	driver "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/kievrpc/kiev/clients/mongo"
)

// BenchmarkFindOne measures a FindOne by _id against the shared server,
// through the bare driver and through a Client: the difference is the
// Client's overhead, its hooks counting, timing and watching for slow
// commands.
func BenchmarkFindOne(b *testing.B) {
	uri := sharedURI(b)
	db := uniqueDB(b)
	ctx := context.Background()

	bare, err := driver.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		b.Fatal(err)
	}
	defer bare.Disconnect(ctx)
	c, err := mongo.New(ctx, mongo.Options{URI: uri, Database: db, Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	defer c.DB().Drop(ctx)
	if _, err := c.DB().Collection("bench").InsertOne(ctx, d("_id", 1, "name", "apple", "qty", 5)); err != nil {
		b.Fatal(err)
	}

	for _, bc := range []struct {
		name string
		coll *driver.Collection
	}{
		{"bare", bare.Database(db).Collection("bench")},
		{"kiev", c.DB().Collection("bench")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var doc bson.Raw
			for b.Loop() {
				if err := bc.coll.FindOne(ctx, d("_id", 1)).Decode(&doc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package mongo_test

import (
	"errors"
	"slices"
	"testing"

	driver "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/kievrpc/kiev/clients/mongo"
)

type item struct {
	ID   string `bson:"_id"`
	Name string `bson:"name"`
	Qty  int    `bson:"qty"`
	Tag  string `bson:"tag,omitempty"`
}

// TestCRUD runs, through the Client, the commands FerretDB supports:
// inserts, finds, updates and upserts, findOneAndUpdate, deletes, a unique
// index and its duplicate key error, counts, distinct, an aggregation and
// a bulk write.
func TestCRUD(t *testing.T) {
	c, _, _ := newClient(t, mongo.Options{})
	ctx := t.Context()
	coll := c.DB().Collection("items")

	if _, err := coll.InsertOne(ctx, item{ID: "a", Name: "apple", Qty: 5, Tag: "fruit"}); err != nil {
		t.Fatalf("InsertOne: %v", err)
	}
	if _, err := coll.InsertMany(ctx, []item{
		{ID: "b", Name: "banana", Qty: 7, Tag: "fruit"},
		{ID: "c", Name: "carrot", Qty: 2, Tag: "vegetable"},
	}); err != nil {
		t.Fatalf("InsertMany: %v", err)
	}

	var got item
	if err := coll.FindOne(ctx, d("_id", "b")).Decode(&got); err != nil {
		t.Fatalf("FindOne: %v", err)
	}
	if got != (item{ID: "b", Name: "banana", Qty: 7, Tag: "fruit"}) {
		t.Errorf("FindOne = %+v", got)
	}
	if err := coll.FindOne(ctx, d("_id", "zz")).Err(); !errors.Is(err, driver.ErrNoDocuments) {
		t.Errorf("FindOne of a missing document: %v, want ErrNoDocuments", err)
	}

	cur, err := coll.Find(ctx, d("qty", d("$gte", 5)), options.Find().SetSort(d("_id", 1)))
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	var all []item
	if err := cur.All(ctx, &all); err != nil {
		t.Fatalf("cursor.All: %v", err)
	}
	if ids := idsOf(all); !slices.Equal(ids, []string{"a", "b"}) {
		t.Errorf("Find qty >= 5 = %v, want [a b]", ids)
	}

	res, err := coll.UpdateOne(ctx, d("_id", "a"), d("$inc", d("qty", 10)))
	if err != nil || res.ModifiedCount != 1 {
		t.Fatalf("UpdateOne: %+v, %v", res, err)
	}
	res, err = coll.UpdateOne(ctx, d("_id", "d"), d("$set", d("name", "date", "qty", 1)),
		options.UpdateOne().SetUpsert(true))
	if err != nil || res.UpsertedCount != 1 {
		t.Fatalf("upsert: %+v, %v", res, err)
	}

	var before item
	err = coll.FindOneAndUpdate(ctx, d("_id", "c"), d("$set", d("qty", 20))).Decode(&before)
	if err != nil || before.Qty != 2 {
		t.Fatalf("FindOneAndUpdate: %+v, %v; want the document before, qty 2", before, err)
	}
	var after item
	err = coll.FindOneAndUpdate(ctx, d("_id", "c"), d("$inc", d("qty", 1)),
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&after)
	if err != nil || after.Qty != 21 {
		t.Fatalf("FindOneAndUpdate returning after: %+v, %v; want qty 21", after, err)
	}

	if _, err := coll.Indexes().CreateOne(ctx, driver.IndexModel{
		Keys: d("name", 1), Options: options.Index().SetUnique(true),
	}); err != nil {
		t.Fatalf("creating a unique index: %v", err)
	}
	_, err = coll.InsertOne(ctx, item{ID: "e", Name: "apple"})
	if !driver.IsDuplicateKeyError(err) {
		t.Errorf("inserting a duplicate name: %v, want a duplicate key error (E11000)", err)
	}

	n, err := coll.CountDocuments(ctx, d("tag", "fruit"))
	if err != nil || n != 2 {
		t.Errorf("CountDocuments = %d, %v; want 2", n, err)
	}
	if n, err := coll.EstimatedDocumentCount(ctx); err != nil || n != 4 {
		t.Errorf("EstimatedDocumentCount = %d, %v; want 4", n, err)
	}
	var tags []string
	if err := coll.Distinct(ctx, "tag", d()).Decode(&tags); err != nil {
		t.Fatalf("Distinct: %v", err)
	}
	slices.Sort(tags)
	if !slices.Equal(tags, []string{"fruit", "vegetable"}) {
		t.Errorf("Distinct tag = %v", tags)
	}

	cur, err = coll.Aggregate(ctx, driver.Pipeline{
		d("$match", d("tag", "fruit")),
		d("$group", d("_id", "$tag", "total", d("$sum", "$qty"))),
	})
	if err != nil {
		t.Fatalf("Aggregate: %v", err)
	}
	var groups []struct {
		ID    string `bson:"_id"`
		Total int    `bson:"total"`
	}
	if err := cur.All(ctx, &groups); err != nil {
		t.Fatalf("Aggregate cursor: %v", err)
	}
	if len(groups) != 1 || groups[0].ID != "fruit" || groups[0].Total != 22 {
		t.Errorf("Aggregate = %+v, want fruit 22 (15 + 7)", groups)
	}

	br, err := coll.BulkWrite(ctx, []driver.WriteModel{
		driver.NewInsertOneModel().SetDocument(item{ID: "f", Name: "fig", Qty: 3}),
		driver.NewUpdateOneModel().SetFilter(d("_id", "f")).SetUpdate(d("$inc", d("qty", 1))),
		driver.NewDeleteOneModel().SetFilter(d("_id", "d")),
	})
	if err != nil || br.InsertedCount != 1 || br.ModifiedCount != 1 || br.DeletedCount != 1 {
		t.Fatalf("BulkWrite: %+v, %v", br, err)
	}

	dr, err := coll.DeleteMany(ctx, d("tag", "fruit"))
	if err != nil || dr.DeletedCount != 2 {
		t.Fatalf("DeleteMany: %+v, %v", dr, err)
	}
	cur, err = coll.Find(ctx, d(), options.Find().SetSort(d("_id", 1)))
	if err != nil {
		t.Fatal(err)
	}
	all = nil
	if err := cur.All(ctx, &all); err != nil {
		t.Fatal(err)
	}
	if ids := idsOf(all); !slices.Equal(ids, []string{"c", "f"}) {
		t.Errorf("left after the deletes: %v, want [c f]", ids)
	}

	if st := c.Stats(); st.Commands == 0 || st.OpenConns < 1 || st.Servers != 1 {
		t.Errorf("Stats = %+v; want commands counted, a connection open, one server", st)
	}
	if err := c.Health(ctx); err != nil {
		t.Errorf("Health: %v", err)
	}
}

func idsOf(items []item) []string {
	var ids []string
	for _, it := range items {
		ids = append(ids, it.ID)
	}
	return ids
}

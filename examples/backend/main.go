// Command backend is a kiev service whose handler reads Redis, MySQL and
// MongoDB under one RPC deadline, with the clients kiev ships: each
// operation stops when the caller's deadline does, every client's health
// is on the status page, and the server closes them after its calls have
// drained.
//
// It needs the servers `scripts/services.sh up` starts; run it with
//
//	eval "$(scripts/services.sh env)"; go run ./examples/backend
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	driver "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/clients/mongo"
	"github.com/kievrpc/kiev/clients/mysql"
	"github.com/kievrpc/kiev/clients/redis"
)

// Profiles answers with what three stores know of a user.
type Profiles struct {
	cache *redis.Client
	db    *mysql.DB
	docs  *mongo.Client
}

// Profile is a user as the three stores describe it.
type Profile struct {
	Name     string
	Visits   int64  // Redis
	Plan     string // MySQL
	LastPush string // MongoDB
}

// Account is the MySQL table.
type Account struct {
	ID   int64 `gorm:"primaryKey"`
	Name string
	Plan string
}

// Get reads the three stores with the handler's ctx: whatever the caller's
// deadline leaves is what the three operations share, and none outlives
// the call.
func (p *Profiles) Get(ctx context.Context, id int64, reply *Profile) error {
	var acct Account
	if err := p.db.WithContext(ctx).First(&acct, id).Error; err != nil {
		return fmt.Errorf("account %d: %w", id, err)
	}
	visits, err := p.cache.Incr(ctx, fmt.Sprintf("visits:%d", id)).Result()
	if err != nil {
		return fmt.Errorf("visits of %d: %w", id, err)
	}
	var push struct{ Text string }
	err = p.docs.DB().Collection("pushes").FindOne(ctx, bson.M{"user": id}).Decode(&push)
	if err != nil && !errors.Is(err, driver.ErrNoDocuments) {
		return fmt.Errorf("pushes of %d: %w", id, err)
	}
	*reply = Profile{Name: acct.Name, Visits: visits, Plan: acct.Plan, LastPush: push.Text}
	return nil
}

func main() {
	if err := run(os.Getenv("KIEV_REDIS"), os.Getenv("KIEV_MYSQL"), os.Getenv("KIEV_MONGO")); err != nil {
		log.Fatal(err)
	}
}

// run starts the service against the stores at the given addresses,
// calls it once and shuts it down.
func run(redisAddr, mysqlDSN, mongoURI string) error {
	if redisAddr == "" || mysqlDSN == "" || mongoURI == "" {
		return errors.New(`KIEV_REDIS, KIEV_MYSQL and KIEV_MONGO must be set: eval "$(scripts/services.sh env)"`)
	}
	ctx := context.Background()
	cache, err := redis.New(redis.Options{Addrs: []string{redisAddr}, Name: "backend"})
	if err != nil {
		return err
	}
	db, err := mysql.Open(mysql.Options{DSN: mysqlDSN, Name: "backend"})
	if err != nil {
		cache.Close()
		return err
	}
	docs, err := mongo.New(ctx, mongo.Options{URI: mongoURI, Database: "kiev_backend_example", Name: "backend"})
	if err != nil {
		cache.Close()
		db.Close()
		return err
	}

	srv := kiev.NewServer(kiev.WithAdmin("127.0.0.1:0"))
	srv.RegisterHealth("redis", cache.Health)
	srv.RegisterHealth("mysql", db.Health)
	srv.RegisterHealth("mongo", docs.Health)
	srv.OnShutdown(func(ctx context.Context) error {
		return errors.Join(cache.Close(), db.Close(), docs.Close(ctx))
	})
	if err := srv.Register(&Profiles{cache, db, docs}); err != nil {
		return err
	}
	if err := seed(ctx, db, docs); err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go srv.Serve(l)

	c, err := kiev.Dial(l.Addr().String())
	if err != nil {
		return err
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond) // one deadline for all three stores
	defer cancel()
	var p Profile
	if err := c.Call(cctx, "Profiles.Get", int64(1), &p); err != nil {
		return err
	}
	fmt.Printf("profile: %s on the %s plan, %d visits, last push %q\n", p.Name, p.Plan, p.Visits, p.LastPush)
	for _, h := range srv.Health(ctx) {
		fmt.Printf("health: %s ok=%v\n", h.Name, h.Err == nil)
	}
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	return srv.Shutdown(sctx) // drains, then closes the three clients
}

// seed writes the example's account and push.
func seed(ctx context.Context, db *mysql.DB, docs *mongo.Client) error {
	if err := db.WithContext(ctx).AutoMigrate(&Account{}); err != nil {
		return err
	}
	if err := db.WithContext(ctx).Save(&Account{ID: 1, Name: "ann", Plan: "pro"}).Error; err != nil {
		return err
	}
	_, err := docs.DB().Collection("pushes").ReplaceOne(ctx, bson.M{"user": 1},
		bson.M{"user": 1, "text": "your order has shipped"}, options.Replace().SetUpsert(true))
	return err
}

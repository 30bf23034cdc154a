package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"

	"github.com/kievrpc/kiev/clients/config"
	"github.com/kievrpc/kiev/clients/mysql"
)

// A service loads its MySQL options from the config center, with the
// rest of its configuration, and its password from elsewhere. Open
// refuses options that cannot work before it connects, and never shows
// the password.
func Example() {
	src := config.NewMemory(map[string]string{
		"mysql.dsn":            "orders@tcp(10.0.0.1:3306)/orders?loc=UTC",
		"mysql.replicas":       `["orders@tcp(10.0.0.2:3306)/orders?loc=UTC"]`,
		"mysql.max_open":       "20",
		"mysql.slow_threshold": "100ms",
		"mysql.name":           "orders",
	})
	conf, err := config.New(context.Background(), src, config.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer conf.Close()
	var cfg struct {
		MySQL mysql.Options `config:"mysql"`
	}
	if err := conf.Decode(&cfg); err != nil {
		log.Fatal(err)
	}
	cfg.MySQL.Password = "s3cret" // from a secret store
	fmt.Println(cfg.MySQL.DSN, cfg.MySQL.Replicas, cfg.MySQL.MaxOpen, cfg.MySQL.SlowThreshold)

	for _, dsn := range []string{
		"orders:s3cret@10.0.0.1:3306/orders",
		"orders:s3cret@tcp(10.0.0.1:3306)/",
	} {
		_, err = mysql.Open(mysql.Options{DSN: dsn})
		fmt.Println(errors.Is(err, mysql.ErrOptions), err)
	}
	// Output:
	// orders@tcp(10.0.0.1:3306)/orders?loc=UTC [orders@tcp(10.0.0.2:3306)/orders?loc=UTC] 20 100ms
	// true kiev/clients/mysql: invalid options: DSN gives the address 10.0.0.1:3306 without its network; write tcp(10.0.0.1:3306)
	// true kiev/clients/mysql: invalid options: DSN names no database; add its name after the slash, such as user:password@tcp(10.0.0.1:3306)/shop?parseTime=true
}

// A handler passes its ctx to every statement, so that none outlives the
// call. (It needs a MySQL server, so it is not run.)
func ExampleOpen() {
	db, err := mysql.Open(mysql.Options{
		DSN:      "shop@tcp(10.0.0.1:3306)/shop",
		Replicas: []string{"shop@tcp(10.0.0.2:3306)/shop"},
		Name:     "shop",
		Logger:   slog.Default(),
	})
	if err != nil {
		log.Fatal(err) // bad options, or a server that does not answer
	}
	defer db.Close()

	type Order struct {
		ID    int64
		Total int
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var o Order
	err = db.WithContext(ctx).First(&o, 42).Error // from the replica
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		fmt.Println("no order 42")
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Println("MySQL is too slow for this call")
	case err != nil:
		fmt.Println("MySQL failed:", err)
	}
	// A read that must see the write just made goes to the primary.
	db.WithContext(ctx).Create(&Order{ID: 43, Total: 5})
	db.WithContext(ctx).Clauses(dbresolver.Write).First(&o, 43)
	fmt.Printf("%+v\n", db.Stats())
}

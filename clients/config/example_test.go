package config_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/kievrpc/kiev/clients/config"
)

// A service decodes its configuration into a struct and reloads it when it
// changes. Here the source is a directory, one file per key, which needs
// no server.
func Example() {
	dir, err := os.MkdirTemp("", "config-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "addr"), []byte(":8080\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "timeout"), []byte("2s\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "db.port"), []byte("5432\n"), 0o644)

	src, err := config.NewDir(config.DirOptions{Path: dir, Interval: 10 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	c, err := config.New(context.Background(), src, config.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	type Config struct {
		Addr    string        `config:"addr"`
		Timeout time.Duration `config:"timeout"`
		DB      struct {
			Port int `config:"port"`
		} `config:"db"`
		Retries int `config:"retries"`
	}
	cfg := Config{Retries: 3} // no key: the default stays
	if err := c.Decode(&cfg); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%+v\n", cfg)

	reloaded := make(chan Config)
	c.OnChange(func(old, new config.Snapshot) {
		next := cfg
		if err := new.Decode(&next); err != nil {
			log.Printf("keeping the configuration: %v", err)
			return
		}
		reloaded <- next
	})
	os.WriteFile(filepath.Join(dir, "timeout"), []byte("5s\n"), 0o644)
	fmt.Printf("%+v\n", <-reloaded)
	// Output:
	// {Addr::8080 Timeout:2s DB:{Port:5432} Retries:3}
	// {Addr::8080 Timeout:5s DB:{Port:5432} Retries:3}
}

// A service reads Apollo, signing its requests, and starts from its last
// snapshot should Apollo be down. (It needs Apollo, so it is not run.)
func ExampleNewApollo() {
	src, err := config.NewApollo(config.ApolloOptions{
		Server:    "http://apollo-config:8080",
		AppID:     "shop",
		Namespace: "application",
		Secret:    os.Getenv("APOLLO_ACCESS_KEY_SECRET"),
	})
	if err != nil {
		log.Fatal(err) // the options are wrong
	}
	c, err := config.New(context.Background(), src, config.Options{
		Snapshot: "/var/lib/shop/config.json",
		Logger:   slog.Default(),
	})
	if err != nil {
		log.Fatal(err) // neither Apollo nor the snapshot file answered
	}
	defer c.Close()
	addr, _ := c.Get("addr")
	fmt.Println("listening on", addr)
}

// A status page shows each client's health, and a monitor reads its
// counters.
func ExampleClient_Health() {
	c, err := config.New(context.Background(), config.NewMemory(map[string]string{"addr": ":8080"}), config.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Println("config:", c.Health(context.Background()))
	s := c.Stats()
	fmt.Println(s.Source, s.Up, s.Loads, s.Changes, s.Errors)
	// Output:
	// config: <nil>
	// memory true 1 0 0
}

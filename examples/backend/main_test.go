package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestBackend(t *testing.T) {
	redisAddr, mysqlDSN, mongoURI := os.Getenv("KIEV_REDIS"), os.Getenv("KIEV_MYSQL"), os.Getenv("KIEV_MONGO")
	if redisAddr == "" || mysqlDSN == "" || mongoURI == "" {
		t.Skip(`KIEV_REDIS, KIEV_MYSQL or KIEV_MONGO is not set; run scripts/services.sh up and eval "$(scripts/services.sh env)"`)
	}
	if err := run(redisAddr, mysqlDSN, mongoURI); err != nil {
		t.Fatal(err)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

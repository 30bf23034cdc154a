package mysql_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/kievrpc/kiev/clients/mysql"
)

// gormOpen opens gorm on dsn as a program without kiev would: the MySQL
// driver, parseTime, no log.
func gormOpen(dsn string) (*gorm.DB, error) {
	sep := "?"
	if strings.Contains(dsn[strings.LastIndexByte(dsn, '/'):], "?") {
		sep = "&"
	}
	return gorm.Open(gormmysql.Open(dsn+sep+"parseTime=true"), &gorm.Config{Logger: logger.Discard})
}

// BenchmarkQuery measures a lookup by primary key against the shared
// server: gorm alone, then kiev's DB, whose plugin adds the timing, the
// metrics and the log's level check.
func BenchmarkQuery(b *testing.B) {
	dsn := sharedDSN(b)
	bare, err := gormOpen(dsn)
	if err != nil {
		b.Fatal(err)
	}
	if sqlDB, err := bare.DB(); err == nil {
		defer sqlDB.Close()
	}
	kiev, err := mysql.Open(mysql.Options{DSN: dsn, Name: "bench", Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	defer kiev.Close()
	tbl := newTable(b, bare)
	if err := bare.Table(tbl).Create(&item{ID: 1, Name: "apple", Price: 3}).Error; err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()

	for _, bc := range []struct {
		name string
		db   *gorm.DB
	}{
		{"bare", bare},
		{"kiev", kiev.DB},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var it item
			for b.Loop() {
				if err := bc.db.WithContext(ctx).Table(tbl).First(&it, 1).Error; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

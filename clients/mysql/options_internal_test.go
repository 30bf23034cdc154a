package mysql

import (
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

func TestParseDSNDefaults(t *testing.T) {
	for _, tc := range []struct {
		dsn, password string
		parseTime     bool
		timeout       string
		passwd        string
	}{
		{"u:p@tcp(h:3306)/db", "", true, "5s", "p"},
		{"u:p@tcp(h:3306)/db?parseTime=false&timeout=1s", "", false, "1s", "p"},
		{"u@tcp(h:3306)/db?loc=UTC", "secret", true, "5s", "secret"},
		{"u:p@unix(/run/mysqld.sock)/db", "q", true, "5s", "q"},
	} {
		cfg, err := parseDSN("DSN", tc.dsn, tc.password)
		if err != nil {
			t.Fatalf("parseDSN(%q): %v", tc.dsn, err)
		}
		if cfg.ParseTime != tc.parseTime || cfg.Timeout.String() != tc.timeout || cfg.Passwd != tc.passwd {
			t.Errorf("parseDSN(%q) = parseTime %v, timeout %v, password %q; want %v, %v, %q",
				tc.dsn, cfg.ParseTime, cfg.Timeout, cfg.Passwd, tc.parseTime, tc.timeout, tc.passwd)
		}
	}
}

func TestTrimSQL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"SELECT 1", "SELECT 1"},
		{"  SELECT *\n\tFROM `t`\n WHERE id = ?  ", "SELECT * FROM `t` WHERE id = ?"},
		{"SELECT '" + strings.Repeat("é", 200) + "'", "SELECT '" + strings.Repeat("é", 146) + "…"},
		{strings.Repeat("x ", 2000), strings.TrimSpace(strings.Repeat("x ", 150)) + " …"},
	} {
		if got := trimSQL(tc.in); got != tc.want {
			t.Errorf("trimSQL(%.40q…) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzOptions checks that Options never show a DSN's password: neither
// the errors of a DSN that does not work, nor Options.String.
func FuzzOptions(f *testing.F) {
	f.Add("root", "@tcp(127.0.0.1:3306)/test")
	f.Add("u", "@tcp(h:3306)/db?parseTime=maybe")
	f.Add("u", "@tcp(h:3306")
	f.Add("", "@/")
	f.Add("u", "@tcp(h:port)/d?timeout=x&loc=Nowhere")
	f.Fuzz(func(t *testing.T, user, rest string) {
		const password = "Zq9-SECRET-k7W"
		dsn := user + ":" + password + "@" + rest
		if strings.Count(dsn, "SECRET") != 1 {
			return
		}
		if cfg, err := mysql.ParseDSN(dsn); err == nil && cfg.Passwd != password {
			return // the password is not where the test put it
		}
		o := Options{DSN: dsn, Replicas: []string{dsn}}
		if _, _, err := o.withDefaults(); err != nil && strings.Contains(err.Error(), "SECRET") {
			t.Fatalf("the error of DSN %q holds its password: %v", dsn, err)
		}
		if s := o.String(); strings.Contains(s, "SECRET") {
			t.Fatalf("Options with DSN %q print its password: %s", dsn, s)
		}
	})
}

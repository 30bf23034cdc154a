package config_test

import (
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kievrpc/kiev/clients/config"
)

type Limits struct {
	RPS   int
	Burst int
}

type Common struct {
	Name string `config:"name"`
}

type appConfig struct {
	Common                 // promoted: "name"
	Addr    string         `config:"addr"`
	Port    uint16         `config:"port"`
	Debug   bool           `config:"debug"`
	Ratio   float64        `config:"ratio"`
	Timeout time.Duration  `config:"timeout"`
	Started time.Time      `config:"started"`
	IP      netip.Addr     `config:"ip"`
	Level   slog.Level     `config:"level"`
	Hosts   []string       `config:"hosts"`
	Weights map[string]int `config:"weights"`
	Key     []byte         `config:"key"`
	Any     any            `config:"any"`
	Limits  Limits         `config:"limits"` // JSON, or limits.rps...
	DB      struct {
		Host string
		Port int
	} // nested: DB.Host, db.port
	Cache       *struct{ Size int } // pointer, nested
	MaxConns    *int                `config:"max_conns"`
	Ignored     string              `config:"-"`
	KeepDefault string              `config:"keep"`
	unexported  string
}

func TestDecode(t *testing.T) {
	values := map[string]string{
		"name":       "shop",
		"addr":       ":8080",
		"port":       " 8443 ",
		"debug":      "true",
		"ratio":      "0.25",
		"timeout":    "1.5s",
		"started":    "2024-06-01T10:00:00Z",
		"ip":         "10.0.0.7",
		"level":      "WARN",
		"hosts":      `["a","b"]`,
		"weights":    `{"a":2}`,
		"key":        "raw bytes",
		"any":        "anything",
		"limits":     `{"RPS":100}`,
		"DB.Host":    "db1",
		"db.port":    "5432", // case ignored
		"cache.size": "64",
		"max_conns":  "10",
		"Ignored":    "x",
		"-":          "x",
		"unexported": "x",
		"unknown":    "ignored",
	}
	cfg := appConfig{KeepDefault: "default", Limits: Limits{Burst: 7}, unexported: "mine"}
	if err := config.NewSnapshot(values, "v1").Decode(&cfg); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	ten := 10
	want := appConfig{
		Common:      Common{Name: "shop"},
		Addr:        ":8080",
		Port:        8443,
		Debug:       true,
		Ratio:       0.25,
		Timeout:     1500 * time.Millisecond,
		Started:     time.Date(2024, 6, 1, 10, 0, 0, 0, time.UTC),
		IP:          netip.MustParseAddr("10.0.0.7"),
		Level:       slog.LevelWarn,
		Hosts:       []string{"a", "b"},
		Weights:     map[string]int{"a": 2},
		Key:         []byte("raw bytes"),
		Any:         "anything",
		Limits:      Limits{RPS: 100, Burst: 7}, // Burst kept: absent from the JSON
		Cache:       &struct{ Size int }{64},
		MaxConns:    &ten,
		KeepDefault: "default",
		unexported:  "mine",
	}
	want.DB.Host, want.DB.Port = "db1", 5432
	if diff := cmp.Diff(want, cfg, cmp.AllowUnexported(appConfig{}), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Fatalf("Decode (-want +got):\n%s", diff)
	}
}

// TestDecodeErrors checks that Decode reports every bad field, says how
// to fix each, and leaves the struct unchanged.
func TestDecodeErrors(t *testing.T) {
	type target struct {
		Port    int           `config:"port"`
		Debug   bool          `config:"debug"`
		Timeout time.Duration `config:"timeout"`
		Hosts   []string      `config:"hosts"`
		Small   int8          `config:"small"`
		Must    string        `config:"must,required"`
		Name    string        `config:"name"`
		Ch      chan int      `config:"ch"`
	}
	values := map[string]string{
		"port": "eighty", "debug": "yes please", "timeout": "5", "hosts": "a,b",
		"small": "300", "name": "new", "ch": "x",
	}
	cfg := target{Name: "old", Hosts: []string{"keep"}}
	err := config.NewSnapshot(values, "").Decode(&cfg)
	if !errors.Is(err, config.ErrDecode) {
		t.Fatalf("Decode: %v, want ErrDecode", err)
	}
	for _, want := range []string{
		`key "port" into config_test.target.Port (int)`,
		`"yes please" is not a boolean; write true or false`,
		`write a duration such as 1.5s`,
		`write the value as JSON, such as ["a","b"]`,
		`key "small"`, "value out of range",
		`needs key "must"`,
		`cannot decode into a chan`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	if cfg.Name != "old" || len(cfg.Hosts) != 1 {
		t.Errorf("Decode changed the struct despite errors: %+v", cfg)
	}

	for _, v := range []any{nil, cfg, new(int), (*target)(nil)} {
		if err := config.NewSnapshot(nil, "").Decode(v); !errors.Is(err, config.ErrDecode) || !strings.Contains(err.Error(), "pointer to a struct") {
			t.Errorf("Decode(%T): %v, want ErrDecode asking for a pointer to a struct", v, err)
		}
	}
}

// TestDecodeShares checks that Decode never writes through what the
// struct shares: a map or a pointer target stays as it was.
func TestDecodeShares(t *testing.T) {
	type target struct {
		M map[string]int `config:"m"`
		P *int           `config:"p"`
	}
	shared := map[string]int{"a": 1}
	n := 1
	cfg := target{M: shared, P: &n}
	if err := config.NewSnapshot(map[string]string{"m": `{"b":2}`, "p": "2"}, "").Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	if len(shared) != 1 || n != 1 {
		t.Errorf("Decode wrote through shared values: map %v, int %d", shared, n)
	}
	if cfg.M["b"] != 2 || cfg.M["a"] != 0 || *cfg.P != 2 {
		t.Errorf("Decode = %v %d, want the map replaced and p 2", cfg.M, *cfg.P)
	}
}

func BenchmarkGet(b *testing.B) {
	c := newBenchClient(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok := c.Get("addr"); !ok {
				b.Fatal("no addr")
			}
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	c := newBenchClient(b)
	b.ReportAllocs()
	for b.Loop() {
		var cfg appConfig
		if err := c.Decode(&cfg); err != nil {
			b.Fatal(err)
		}
	}
}

func newBenchClient(b *testing.B) *config.Client {
	values := map[string]string{"addr": ":8080", "port": "8443", "timeout": "2s", "hosts": `["a","b"]`, "DB.Host": "db1", "db.port": "5432"}
	for i := range 50 {
		values["other."+strings.Repeat("k", i%7)+string(rune('a'+i%26))] = "v"
	}
	c, err := config.New(b.Context(), config.NewMemory(values), config.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

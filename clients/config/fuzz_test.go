package config

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"testing"
	"time"
)

// The fuzz targets cover every decoder of untrusted bytes: Apollo's two
// responses, a ZooKeeper node's data, the snapshot file, and the values
// Decode parses. Seeds are in testdata/fuzz.

func FuzzApolloConfig(f *testing.F) {
	f.Add([]byte(`{"appId":"shop","cluster":"default","namespaceName":"application","configurations":{"a":"1"},"releaseKey":"r1"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := decodeApolloConfig(body)
		if err != nil {
			return
		}
		if c.Configurations == nil {
			t.Fatal("accepted a response without configurations")
		}
		s := NewSnapshot(c.Configurations, c.ReleaseKey)
		if !maps.Equal(s.Map(), c.Configurations) {
			t.Fatal("snapshot differs from the configurations")
		}
	})
}

func FuzzApolloNotifications(f *testing.F) {
	f.Add([]byte(`[{"namespaceName":"application","notificationId":101,"messages":{"details":{"shop+default+application":101}}}]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ns, err := decodeApolloNotifications(body)
		if err != nil {
			return
		}
		for _, n := range ns {
			sameNamespace(n.NamespaceName, "application")
		}
	})
}

// FuzzZKNode checks that any data decodes or fails cleanly, and that
// values written as a JSON object of strings read back unchanged.
func FuzzZKNode(f *testing.F) {
	f.Add([]byte(`{"addr":":8080","port":8080,"hosts":["a"],"gone":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		values, err := decodeZKNode(data)
		if err != nil {
			return
		}
		again, err := json.Marshal(values)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeZKNode(again)
		if err != nil {
			t.Fatalf("re-encoded values do not decode: %v\n%s", err, again)
		}
		if !maps.Equal(values, back) {
			t.Fatalf("round trip: %v != %v", values, back)
		}
	})
}

// FuzzSnapshotFile checks that any file content decodes or fails
// cleanly, and that what writeSnapshotFile writes reads back.
func FuzzSnapshotFile(f *testing.F) {
	f.Add([]byte(`{"v":1,"source":"memory","version":"1","saved":"2024-06-01T10:00:00Z","values":{"a":"1"}}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := decodeSnapshotFile(data)
		if err != nil {
			return
		}
		path := filepath.Join(dir, "config.json")
		s := NewSnapshot(file.Values, file.Version)
		if err := writeSnapshotFile(path, file.Source, s, time.Unix(0, 0)); err != nil {
			t.Fatal(err)
		}
		back, err := readSnapshotFile(path)
		if err != nil {
			t.Fatalf("a written file does not read back: %v", err)
		}
		if !maps.Equal(back.Values, file.Values) || back.Version != file.Version {
			t.Fatalf("round trip: %+v != %+v", back, file)
		}
	})
}

// FuzzDecode decodes arbitrary values into a struct of every kind of
// field: it may fail, never panic.
func FuzzDecode(f *testing.F) {
	f.Add("8080", "1.5s", `["a"]`, `{"Size":1}`, "true")
	f.Fuzz(func(t *testing.T, port, timeout, hosts, cache, debug string) {
		var cfg struct {
			Port    int
			Timeout time.Duration
			Hosts   []string
			Cache   *struct{ Size int }
			Debug   bool
			Ratio   float32
			At      time.Time
			Any     any
			Arr     [2]int
			M       map[string]float64
			Nested  struct{ Port uint8 }
		}
		s := NewSnapshot(map[string]string{
			"port": port, "timeout": timeout, "hosts": hosts, "cache": cache, "debug": debug,
			"ratio": port, "at": timeout, "any": debug, "arr": hosts, "m": cache, "nested.port": port,
		}, "")
		s.Decode(&cfg)
	})
}

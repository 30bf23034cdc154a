package zookeeper

import (
	"errors"
	"strings"
	"testing"

	"github.com/kievrpc/kiev/registry"
)

func TestNodeName(t *testing.T) {
	for _, tt := range []struct {
		in   registry.Instance
		want string
	}{
		{registry.Instance{Network: "tcp", Address: "127.0.0.1:7000"}, "tcp-127.0.0.1:7000"},
		{registry.Instance{Network: "tcp6", Address: "[::1]:7443"}, "tcp6-%5B::1%5D:7443"},
		{registry.Instance{Network: "unix", Address: "/tmp/kiev test/x.sock"}, "unix-%2Ftmp%2Fkiev%20test%2Fx.sock"},
		{registry.Instance{Network: "unix", Address: "@abstract\x01é"}, "unix-@abstract%01%C3%A9"},
	} {
		if got := nodeName(tt.in); got != tt.want {
			t.Errorf("nodeName(%s) = %q; want %q", tt.in.ID(), got, tt.want)
		}
	}
}

func TestProvidersPath(t *testing.T) {
	r := &Registry{root: "/kiev"}
	for service, want := range map[string]string{
		"Arith":   "/kiev/Arith/providers",
		"a b%c":   "/kiev/a%20b%25c/providers",
		".":       "/kiev/%2E/providers",
		"..":      "/kiev/%2E%2E/providers",
		"x\x01y":  "/kiev/x%01y/providers",
		"Arith.1": "/kiev/Arith.1/providers",
	} {
		if got := r.providersPath(service); got != want {
			t.Errorf("providersPath(%q) = %q; want %q", service, got, want)
		}
	}
	r.root = "" // Root "/"
	if got, want := r.providersPath("Arith"), "/Arith/providers"; got != want {
		t.Errorf("providersPath under Root / = %q; want %q", got, want)
	}
}

func TestEncodeNode(t *testing.T) {
	in := registry.Instance{Service: "Arith", Network: "tcp", Address: "10.0.0.7:7000", Codecs: []string{"msgpack"}, Weight: 2}
	b, err := encodeNode(in)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"service":"Arith","network":"tcp","address":"10.0.0.7:7000","codecs":["msgpack"],"weight":2}`
	if string(b) != want {
		t.Errorf("encodeNode = %s\nwant %s", b, want)
	}
}

func TestDecodeNode(t *testing.T) {
	const svc = "Arith"
	ok := registry.Instance{Service: svc, Network: "tcp", Address: "10.0.0.7:7000", Weight: 2}
	for _, tt := range []struct {
		name, node, data string
		want             registry.Instance
		err              string // a part of the error; "" for success
	}{
		{"v1", "tcp-10.0.0.7:7000", `{"v":1,"service":"Arith","network":"tcp","address":"10.0.0.7:7000","weight":2}`, ok, ""},
		{"newer version, unknown fields", "tcp-10.0.0.7:7000",
			`{"v":7,"service":"Arith","network":"tcp","address":"10.0.0.7:7000","weight":2,"zone":{"x":1},"tags":[1,2]}`, ok, ""},
		{"no service field", "tcp-10.0.0.7:7000", `{"v":1,"network":"tcp","address":"10.0.0.7:7000","weight":2}`, ok, ""},
		{"no v", "tcp-10.0.0.7:7000", `{"service":"Arith","network":"tcp","address":"10.0.0.7:7000"}`, registry.Instance{}, "format version"},
		{"v 0", "tcp-10.0.0.7:7000", `{"v":0,"service":"Arith","network":"tcp","address":"10.0.0.7:7000"}`, registry.Instance{}, "format version"},
		{"v string", "tcp-10.0.0.7:7000", `{"v":"1","service":"Arith","network":"tcp","address":"10.0.0.7:7000"}`, registry.Instance{}, "JSON"},
		{"not JSON", "tcp-10.0.0.7:7000", `10.0.0.7:7000`, registry.Instance{}, "JSON"},
		{"empty", "tcp-10.0.0.7:7000", ``, registry.Instance{}, "JSON"},
		{"other service", "tcp-10.0.0.7:7000", `{"v":1,"service":"Other","network":"tcp","address":"10.0.0.7:7000"}`, registry.Instance{}, `"Other"`},
		{"invalid", "tcp-10.0.0.7", `{"v":1,"service":"Arith","network":"tcp","address":"10.0.0.7"}`, registry.Instance{}, "host:port"},
		{"wrong node", "tcp-10.0.0.8:7000", `{"v":1,"service":"Arith","network":"tcp","address":"10.0.0.7:7000"}`, registry.Instance{}, "belongs in node"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeNode([]byte(tt.data), svc, tt.node)
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("decodeNode: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("decodeNode error = %v; want one mentioning %q", err, tt.err)
			case tt.err == "" && !got.Equal(tt.want):
				t.Fatalf("decodeNode = %+v; want %+v", got, tt.want)
			}
		})
	}
}

// FuzzDecodeNode checks that decodeNode never panics and that what it
// accepts is a valid instance that belongs in its node and survives a
// round trip.
func FuzzDecodeNode(f *testing.F) {
	f.Add([]byte(`{"v":1,"service":"Arith","network":"tcp","address":"10.0.0.7:7000","codecs":["msgpack"],"weight":2,"metadata":{"zone":"a"}}`), "tcp-10.0.0.7:7000")
	f.Add([]byte(`{"v":2,"network":"unix","address":"/x"}`), "unix-%2Fx")
	f.Add([]byte(`{"v":1}`), "tcp-")
	f.Add([]byte(`null`), "x")
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		in, err := decodeNode(data, "Arith", name)
		if err != nil {
			return
		}
		if err := in.Validate(); err != nil {
			t.Fatalf("decodeNode accepted an invalid instance: %v", err)
		}
		if nodeName(in) != name || in.Service != "Arith" {
			t.Fatalf("decodeNode accepted %+v for node %q", in, name)
		}
		b, err := encodeNode(in)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeNode(b, "Arith", name)
		if err != nil || !again.Equal(in) {
			t.Fatalf("round trip of %+v: %+v, %v", in, again, err)
		}
	})
}

func TestNewConfig(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"no servers", Config{}, "no Servers"},
		{"empty server", Config{Servers: []string{"127.0.0.1:2181", " "}}, "empty address"},
		{"chroot in address", Config{Servers: []string{"127.0.0.1:2181/app"}}, "Config.Root"},
		{"relative root", Config{Servers: []string{"127.0.0.1:2181"}, Root: "kiev"}, "does not start with '/'"},
		{"trailing slash", Config{Servers: []string{"127.0.0.1:2181"}, Root: "/kiev/"}, "ends with '/'"},
		{"empty component", Config{Servers: []string{"127.0.0.1:2181"}, Root: "/a//b"}, "empty component"},
		{"dot component", Config{Servers: []string{"127.0.0.1:2181"}, Root: "/a/../b"}, `".."`},
		{"negative timeout", Config{Servers: []string{"127.0.0.1:2181"}, SessionTimeout: -1}, "negative SessionTimeout"},
		{"digest without colon", Config{Servers: []string{"127.0.0.1:2181"}, Digest: "kiev"}, "user:password"},
		{"digest without user", Config{Servers: []string{"127.0.0.1:2181"}, Digest: ":secret"}, "user:password"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(tt.cfg)
			if err == nil {
				r.Close()
				t.Fatalf("New(%+v) succeeded; want an error mentioning %q", tt.cfg, tt.err)
			}
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("New(%+v) = %v; want ErrConfig mentioning %q", tt.cfg, err, tt.err)
			}
		})
	}
}

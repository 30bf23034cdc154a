package registry

import (
	"strings"
	"testing"
)

func TestNodeName(t *testing.T) {
	for _, tt := range []struct {
		in   Instance
		want string
	}{
		{Instance{Network: "tcp", Address: "127.0.0.1:7000"}, "tcp-127.0.0.1:7000"},
		{Instance{Network: "tcp6", Address: "[::1]:7443"}, "tcp6-%5B::1%5D:7443"},
		{Instance{Network: "unix", Address: "/tmp/kiev test/x.sock"}, "unix-%2Ftmp%2Fkiev%20test%2Fx.sock"},
		{Instance{Network: "unix", Address: "@abstract\x01é"}, "unix-@abstract%01%C3%A9"},
	} {
		if got := NodeName(tt.in); got != tt.want {
			t.Errorf("NodeName(%s) = %q; want %q", tt.in.ID(), got, tt.want)
		}
	}
}

func TestEncodeNode(t *testing.T) {
	in := Instance{Service: "Arith", Network: "tcp", Address: "10.0.0.7:7000", Codecs: []string{"msgpack"}, Weight: 2}
	b, err := EncodeNode(in)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"service":"Arith","network":"tcp","address":"10.0.0.7:7000","codecs":["msgpack"],"weight":2}`
	if string(b) != want {
		t.Errorf("EncodeNode = %s\nwant %s", b, want)
	}
}

func TestDecodeNode(t *testing.T) {
	const svc = "Arith"
	ok := Instance{Service: svc, Network: "tcp", Address: "10.0.0.7:7000", Weight: 2}
	for _, tt := range []struct {
		name, node, data string
		want             Instance
		err              string // a part of the error; "" for success
	}{
		{"v1", "tcp-10.0.0.7:7000", `{"v":1,"service":"Arith","network":"tcp","address":"10.0.0.7:7000","weight":2}`, ok, ""},
		{"newer version, unknown fields", "tcp-10.0.0.7:7000",
			`{"v":7,"service":"Arith","network":"tcp","address":"10.0.0.7:7000","weight":2,"zone":{"x":1},"tags":[1,2]}`, ok, ""},
		{"no service field", "tcp-10.0.0.7:7000", `{"v":1,"network":"tcp","address":"10.0.0.7:7000","weight":2}`, ok, ""},
		{"no v", "tcp-10.0.0.7:7000", `{"service":"Arith","network":"tcp","address":"10.0.0.7:7000"}`, Instance{}, "format version"},
		{"v 0", "tcp-10.0.0.7:7000", `{"v":0,"service":"Arith","network":"tcp","address":"10.0.0.7:7000"}`, Instance{}, "format version"},
		{"v string", "tcp-10.0.0.7:7000", `{"v":"1","service":"Arith","network":"tcp","address":"10.0.0.7:7000"}`, Instance{}, "JSON"},
		{"not JSON", "tcp-10.0.0.7:7000", `10.0.0.7:7000`, Instance{}, "JSON"},
		{"empty", "tcp-10.0.0.7:7000", ``, Instance{}, "JSON"},
		{"other service", "tcp-10.0.0.7:7000", `{"v":1,"service":"Other","network":"tcp","address":"10.0.0.7:7000"}`, Instance{}, `"Other"`},
		{"invalid", "tcp-10.0.0.7", `{"v":1,"service":"Arith","network":"tcp","address":"10.0.0.7"}`, Instance{}, "host:port"},
		{"wrong node", "tcp-10.0.0.8:7000", `{"v":1,"service":"Arith","network":"tcp","address":"10.0.0.7:7000"}`, Instance{}, "belongs in node"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeNode([]byte(tt.data), svc, tt.node)
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("DecodeNode: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("DecodeNode error = %v; want one mentioning %q", err, tt.err)
			case tt.err == "" && !got.Equal(tt.want):
				t.Fatalf("DecodeNode = %+v; want %+v", got, tt.want)
			}
		})
	}
}

// FuzzDecodeNode checks that DecodeNode never panics and that what it
// accepts is a valid instance that belongs in its node and survives a
// round trip.
func FuzzDecodeNode(f *testing.F) {
	f.Add([]byte(`{"v":1,"service":"Arith","network":"tcp","address":"10.0.0.7:7000","codecs":["msgpack"],"weight":2,"metadata":{"zone":"a"}}`), "tcp-10.0.0.7:7000")
	f.Add([]byte(`{"v":2,"network":"unix","address":"/x"}`), "unix-%2Fx")
	f.Add([]byte(`{"v":1}`), "tcp-")
	f.Add([]byte(`null`), "x")
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		in, err := DecodeNode(data, "Arith", name)
		if err != nil {
			return
		}
		if err := in.Validate(); err != nil {
			t.Fatalf("DecodeNode accepted an invalid instance: %v", err)
		}
		if NodeName(in) != name || in.Service != "Arith" {
			t.Fatalf("DecodeNode accepted %+v for node %q", in, name)
		}
		b, err := EncodeNode(in)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeNode(b, "Arith", name)
		if err != nil || !again.Equal(in) {
			t.Fatalf("round trip of %+v: %+v, %v", in, again, err)
		}
	})
}

func TestProvidersPath(t *testing.T) {
	for _, tt := range []struct{ root, service, want string }{
		{"/kiev", "Arith", "/kiev/Arith/providers"},
		{"/kiev", "a b%c", "/kiev/a%20b%25c/providers"},
		{"/kiev", ".", "/kiev/%2E/providers"},
		{"/kiev", "..", "/kiev/%2E%2E/providers"},
		{"/kiev", "x\x01y", "/kiev/x%01y/providers"},
		{"/team-a/kiev", "Arith.1", "/team-a/kiev/Arith.1/providers"},
		{"/", "Arith", "/Arith/providers"},
	} {
		if got := ProvidersPath(tt.root, tt.service); got != tt.want {
			t.Errorf("ProvidersPath(%q, %q) = %q; want %q", tt.root, tt.service, got, tt.want)
		}
	}
}

func TestCheckRoot(t *testing.T) {
	for root, want := range map[string]string{
		"/":        "",
		"/kiev":    "",
		"/a/b-c/d": "",
		"kiev":     "does not start with '/'",
		"/kiev/":   "ends with '/'",
		"/a//b":    "empty component",
		"/a/../b":  `".."`,
		"/a/./b":   `"."`,
		"/a/b\x01": "control character",
		"":         "does not start with '/'",
	} {
		err := CheckRoot(root)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("CheckRoot(%q) = %v; want %q", root, err, want)
		}
	}
}

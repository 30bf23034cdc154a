package zookeeper

import (
	"errors"
	"strings"
	"testing"
)

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

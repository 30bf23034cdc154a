package config_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kievrpc/kiev/clients/config"
)

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func newDir(t testing.TB, path string) *config.Dir {
	t.Helper()
	src, err := config.NewDir(config.DirOptions{Path: path, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("NewDir: %v", err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// TestDirLayout checks what a directory's files make: one key per regular
// file, one trailing newline dropped, hidden files and subdirectories
// skipped, links followed.
func TestDirLayout(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "addr"), ":8080\n")
	write(t, filepath.Join(dir, "crlf"), "x\r\n")
	write(t, filepath.Join(dir, "two-newlines"), "x\n\n")
	write(t, filepath.Join(dir, "none"), "x")
	write(t, filepath.Join(dir, "empty"), "")
	write(t, filepath.Join(dir, ".hidden"), "no")
	write(t, filepath.Join(dir, "sub", "inner"), "no")
	if err := os.Symlink(filepath.Join(t.TempDir(), "nothing"), filepath.Join(dir, "dangling")); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "target")
	write(t, target, "linked\n")
	if err := os.Symlink(target, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}

	s, err := newDir(t, dir).Load(context.Background())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := map[string]string{"addr": ":8080", "crlf": "x", "two-newlines": "x\n", "none": "x", "empty": "", "link": "linked"}
	if diff := cmp.Diff(want, s.Map()); diff != "" {
		t.Fatalf("Load (-want +got):\n%s", diff)
	}
}

// TestDirKubernetes reads a directory laid out as Kubernetes mounts a
// ConfigMap: files are links through "..data", a link to a timestamped
// directory that an update replaces whole.
func TestDirKubernetes(t *testing.T) {
	dir := t.TempDir()
	swap := func(name string, values map[string]string) {
		for k, v := range values {
			write(t, filepath.Join(dir, name, k), v)
		}
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		for k := range values {
			if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil && !os.IsExist(err) {
				t.Fatal(err)
			}
		}
	}
	swap("..2024_06_01", map[string]string{"a": "1", "b": "1"})
	src := newDir(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	s, err := src.Load(ctx)
	if err != nil || s.Map()["a"] != "1" || s.Len() != 2 {
		t.Fatalf("Load = %v, %v", s.Map(), err)
	}
	swap("..2024_06_02", map[string]string{"a": "2", "b": "2"})
	s, err = src.Next(ctx)
	if err != nil || s.Map()["a"] != "2" || s.Map()["b"] != "2" {
		t.Fatalf("Next = %v, %v; want both keys changed at once", s.Map(), err)
	}
}

// TestDirMissing starts with no directory: Load fails with ErrNotFound,
// and Next delivers the directory once it exists.
func TestDirMissing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "config")
	src := newDir(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := src.Load(ctx); !errors.Is(err, config.ErrNotFound) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Load: %v, want ErrNotFound naming %s", err, dir)
	}
	write(t, filepath.Join(dir, "a"), "1")
	s, err := src.Next(ctx)
	if err != nil || s.Map()["a"] != "1" {
		t.Fatalf("Next once the directory exists = %v, %v", s.Map(), err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Next(ctx); !errors.Is(err, config.ErrNotFound) {
		t.Fatalf("Next once the directory is gone: %v, want ErrNotFound", err)
	}
}

func TestDirOptions(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	write(t, file, "x")
	for _, tt := range []struct {
		name string
		opts config.DirOptions
		want string
	}{
		{"no path", config.DirOptions{}, "Path is empty"},
		{"a file", config.DirOptions{Path: file}, "is a file"},
		{"negative interval", config.DirOptions{Path: "x", Interval: -1}, "negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.NewDir(tt.opts)
			if !errors.Is(err, config.ErrOptions) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewDir: %v, want ErrOptions saying %q", err, tt.want)
			}
		})
	}
	// A relative path is made absolute at once.
	src, err := config.NewDir(config.DirOptions{Path: "testdata"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	wd, _ := os.Getwd()
	if want := "dir " + filepath.Join(wd, "testdata"); src.String() != want {
		t.Errorf("String() = %q, want %q", src.String(), want)
	}
}

// TestDirBinary refuses a file that is not UTF-8 text: the snapshot file,
// JSON, could not hold it as it is.
func TestDirBinary(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "key.der"), "\x30\x82\xff\xfe")
	_, err := newDir(t, dir).Load(context.Background())
	if !errors.Is(err, config.ErrMalformed) || !strings.Contains(err.Error(), "key.der") {
		t.Fatalf("Load: %v, want ErrMalformed naming key.der", err)
	}
}

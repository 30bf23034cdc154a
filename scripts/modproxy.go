//go:build ignore

// modproxy writes a module proxy directory that serves this checkout's
// modules as they would be published: every module that go.work uses, at
// the version the other modules require it at, in the layout of the
// GOPROXY protocol (path/@v/list, VERSION.info, .mod, .zip), so that
// GOPROXY=file://DIR fetches them. It also checks what publishing needs:
// no go.mod has a replace directive (Go ignores them in dependencies),
// and every module that requires a sibling requires it at one version.
//
// scripts/modules.sh runs it:
//
//	GOWORK=off go run scripts/modproxy.go DIR
//
// It prints the version, then the modules' paths, one a line.
package main

import (
	"archive/zip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

const prefix = "github.com/kievrpc/kiev"

type goMod struct {
	Module  struct{ Path string }
	Require []struct{ Path, Version string }
	Replace []struct {
		Old, New struct{ Path, Version string }
	}
}

type goWork struct {
	Use     []struct{ DiskPath string }
	Replace []struct {
		Old, New struct{ Path, Version string }
	}
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run scripts/modproxy.go DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	var work goWork
	if err := goJSON(&work, "work", "edit", "-json", "go.work"); err != nil {
		return err
	}
	dirs := map[string]string{} // module path -> directory
	var problems []string
	version := ""
	for _, u := range work.Use {
		var m goMod
		if err := goJSON(&m, "mod", "edit", "-json", filepath.Join(u.DiskPath, "go.mod")); err != nil {
			return err
		}
		dirs[m.Module.Path] = filepath.Clean(u.DiskPath)
		for _, r := range m.Replace {
			problems = append(problems, fmt.Sprintf("%s/go.mod replaces %s: Go ignores replace directives in a dependency, so a user fetching %s would not get it; drop it (go.work resolves the modules of this repository)", u.DiskPath, r.Old.Path, m.Module.Path))
		}
		for _, r := range m.Require {
			if r.Path != prefix && !strings.HasPrefix(r.Path, prefix+"/") {
				continue
			}
			if version == "" {
				version = r.Version
			} else if r.Version != version {
				problems = append(problems, fmt.Sprintf("%s/go.mod requires %s %s, another module %s: the modules are released together, at one version", u.DiskPath, r.Path, r.Version, version))
			}
		}
	}
	if version == "" {
		problems = append(problems, "no module requires another of this repository; nothing to publish")
	}
	for _, r := range work.Replace {
		if r.Old.Version != version {
			problems = append(problems, fmt.Sprintf("go.work replaces %s %s, but the modules require %s: make go.work's replace lines name %s", r.Old.Path, r.Old.Version, version, version))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "\n"))
	}

	files, err := checkoutFiles()
	if err != nil {
		return err
	}
	paths := make([]string, 0, len(dirs))
	for p := range dirs {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	// A module that go.work does not list (bench/peers, whose dependencies
	// only its own build resolves) is not published, but its files are
	// still not its parent's.
	listed := map[string]bool{}
	for _, d := range dirs {
		listed[d] = true
	}
	for _, f := range files {
		if d := filepath.Dir(f); filepath.Base(f) == "go.mod" && !listed[d] {
			dirs["unlisted module in "+d] = d
		}
	}
	fmt.Println(version)
	for _, p := range paths {
		if err := publish(out, p, version, dirs, files); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		fmt.Println(p)
	}
	return nil
}

// publish writes module p at version v into the proxy directory out: its
// files are those of the checkout under its directory, less those of the
// modules nested in it.
func publish(out, p, v string, dirs map[string]string, files []string) error {
	dir := dirs[p]
	d := filepath.Join(out, filepath.FromSlash(p), "@v")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	info := fmt.Sprintf(`{"Version":%q,"Time":%q}`+"\n", v, time.Now().UTC().Format(time.RFC3339))
	for name, b := range map[string][]byte{"list": []byte(v + "\n"), v + ".info": []byte(info), v + ".mod": mod} {
		if err := os.WriteFile(filepath.Join(d, name), b, 0o644); err != nil {
			return err
		}
	}
	zf, err := os.Create(filepath.Join(d, v+".zip"))
	if err != nil {
		return err
	}
	zw := zip.NewWriter(zf)
	for _, f := range files {
		rel, ok := within(dir, f)
		if !ok || nested(f, dir, dirs) {
			continue
		}
		if err := add(zw, p+"@"+v+"/"+rel, f); err != nil {
			zf.Close()
			return err
		}
	}
	if err := zw.Close(); err != nil {
		zf.Close()
		return err
	}
	return zf.Close()
}

// within reports whether file f lies under dir, and its path there.
func within(dir, f string) (string, bool) {
	if dir == "." {
		return f, true
	}
	if !strings.HasPrefix(f, dir+"/") {
		return "", false
	}
	return strings.TrimPrefix(f, dir+"/"), true
}

// nested reports whether f belongs to a module nested in dir.
func nested(f, dir string, dirs map[string]string) bool {
	for _, other := range dirs {
		if other == dir {
			continue
		}
		if _, in := within(dir, other); !in && dir != "." {
			continue
		}
		if _, ok := within(other, f); ok {
			return true
		}
	}
	return false
}

func add(zw *zip.Writer, name, file string) error {
	src, err := os.Open(file)
	if err != nil {
		return err
	}
	defer src.Close()
	w, err := zw.Create(name)
	if err != nil {
		return err
	}
	_, err = io.Copy(w, src)
	return err
}

// checkoutFiles lists the checkout's files, tracked or not, but not those
// .gitignore names (built binaries, benchmark output).
func checkoutFiles() ([]string, error) {
	b, err := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %v (the check needs a git checkout)", err)
	}
	var files []string
	for _, f := range strings.Split(string(b), "\x00") {
		if fi, err := os.Lstat(f); f != "" && err == nil && fi.Mode().IsRegular() {
			files = append(files, f)
		}
	}
	return files, nil
}

func goJSON(v any, args ...string) error {
	b, err := exec.Command("go", args...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			err = fmt.Errorf("%v: %s", err, ee.Stderr)
		}
		return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return json.Unmarshal(b, v)
}

package xversion

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// pinned are the earlier commits of this repository that the current
// tree is checked against, newest first: the one place to add a version.
// lacks names the wire features a commit's kiev does not have, which
// decide the documented errors expected between it and the current tree
// (see expect).
var pinned = []pin{
	{
		commit: "f83985ffc2a2f14eec343b5e006102c5818548be",
		about:  "the last commit before the cross-version test (issue 24)",
		lacks:  features{stream: true},
	},
	{
		commit: "ce822a9d2acf488937534efdd810798d706e3741",
		about:  "before the drain's last GoAway (LastID, key 11), UDP tickets (key 12) and signed datagrams (keys 13-15)",
		lacks:  features{lastID: true, ticket: true, sign: true, stream: true},
	},
}

// pin is a commit the current tree is checked against.
type pin struct {
	commit string // full hash
	about  string
	lacks  features
}

// features are wire features that some pinned commits lack; true means
// lacking.
type features struct {
	lastID bool // the last GoAway of a drain, with LastID (key 11): calls past it never ran
	ticket bool // UDP proof of address (key 12): a reply over 3 times its request waits for a ticket
	sign   bool // signed datagrams (keys 13-15; WithPacketKey, WithPacketKeys): the peer is built with the tag kiev_nosign
	stream bool // streams (frame types 8-10, keys 19-23; kiev.In, kiev.Out, Client.Stream): the peer is built with the tag kiev_nostream
}

// tags are the build tags of the peer for a commit that lacks f.
func (f features) tags() string {
	var tags []string
	if f.sign {
		tags = append(tags, "kiev_nosign")
	}
	if f.stream {
		tags = append(tags, "kiev_nostream")
	}
	return strings.Join(tags, ",")
}

// build is one compiled peer program (./peer).
type build struct {
	name  string // "new" for the current tree, else the commit's short hash
	lacks features
	bin   string
}

// binDir holds the current tree's peer for the test binary's run;
// TestMain removes it.
var binDir string

// builds compiles the peer of the current tree and of every pinned
// commit, once per test binary.
var builds = sync.OnceValues(func() ([]build, error) {
	var out []build
	t0 := time.Now()
	bin := filepath.Join(binDir, "peer-new"+exeSuffix())
	if err := goBuild(".", "./peer", bin, ""); err != nil {
		return nil, fmt.Errorf("building the current tree's peer: %w", err)
	}
	buildLog = append(buildLog, fmt.Sprintf("new: built in %v", time.Since(t0).Round(time.Millisecond)))
	out = append(out, build{name: "new", bin: bin})
	for _, p := range pinned {
		t0 := time.Now()
		bin, cached, err := oldBuild(p.commit, p.lacks.tags())
		if err != nil {
			return nil, err
		}
		how := "built"
		if cached {
			how = "cached"
		}
		buildLog = append(buildLog, fmt.Sprintf("%s: %s in %v (%s)", p.commit[:7], how, time.Since(t0).Round(time.Millisecond), bin))
		out = append(out, build{name: p.commit[:7], lacks: p.lacks, bin: bin})
	}
	return out, nil
})

// buildLog says how each build was had; written only inside builds, and
// logged by the first test that asks for them.
var (
	buildLog  []string
	logBuilds sync.Once
)

// allBuilds returns the builds, failing the test if they cannot be made.
func allBuilds(t *testing.T) []build {
	t.Helper()
	bs, err := builds()
	if err != nil {
		t.Fatal(err)
	}
	logBuilds.Do(func() {
		for _, l := range buildLog {
			t.Logf("peer %s", l)
		}
	})
	return bs
}

// oldBuild returns the peer compiled against kiev at commit, from the
// user's cache if it was built before, else building it in a git worktree
// of the commit into which the current peer's source is copied (so that
// it compiles against that commit's kiev: the module path is the same).
// The cache key covers the commit, the peer's source and build tags, and
// the Go version and platform.
func oldBuild(commit, tags string) (bin string, cached bool, err error) {
	top, err := repoRoot()
	if err != nil {
		return "", false, err
	}
	if out, err := git(top, "rev-parse", "--verify", "--quiet", commit+"^{commit}"); err != nil {
		return "", false, fmt.Errorf("pinned commit %s is not in this clone's history (%v %s); "+
			"the cross-version test needs the repository's history: in a shallow clone, run `git fetch --unshallow`", commit, err, out)
	}
	src, err := peerSources()
	if err != nil {
		return "", false, err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s %s %s/%s tags=%s\n", commit, runtime.Version(), runtime.GOOS, runtime.GOARCH, tags)
	names := make([]string, 0, len(src))
	for name := range src {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(h, "%s %d\n", name, len(src[name]))
		h.Write(src[name])
	}
	key := hex.EncodeToString(h.Sum(nil))[:16]

	dir := filepath.Join(os.TempDir(), "kiev-xversion-nocache")
	if cache, err := os.UserCacheDir(); err == nil {
		dir = filepath.Join(cache, "kiev-xversion", commit)
	}
	bin = filepath.Join(dir, "peer-"+key+exeSuffix())
	if _, err := os.Stat(bin); err == nil {
		return bin, true, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, err
	}

	tmp, err := os.MkdirTemp("", "kiev-xversion-"+commit[:7]+"-")
	if err != nil {
		return "", false, err
	}
	defer os.RemoveAll(tmp)
	tree := filepath.Join(tmp, "src")
	if out, err := git(top, "worktree", "add", "--detach", tree, commit); err != nil {
		return "", false, fmt.Errorf("git worktree add %s: %v\n%s", commit, err, out)
	}
	defer func() {
		if out, rerr := git(top, "worktree", "remove", "--force", tree); rerr != nil && err == nil {
			err = fmt.Errorf("git worktree remove %s: %v\n%s", tree, rerr, out)
		}
	}()
	peerDir := filepath.Join(tree, "internal", "xversion", "peer")
	if err := os.MkdirAll(peerDir, 0o755); err != nil {
		return "", false, err
	}
	for name, b := range src {
		if err := os.WriteFile(filepath.Join(peerDir, name), b, 0o644); err != nil {
			return "", false, err
		}
	}
	part := filepath.Join(dir, fmt.Sprintf(".peer-%s-%d", key, os.Getpid()))
	if err := goBuild(tree, "./internal/xversion/peer", part, tags); err != nil {
		os.Remove(part)
		return "", false, fmt.Errorf("building the peer at %s (it may use API that commit lacks): %w", commit, err)
	}
	if err := os.Rename(part, bin); err != nil {
		return "", false, err
	}
	pruneCache(dir, bin)
	return bin, false, nil
}

// pruneCache removes from dir the peers of other sources not used for a
// day: the peer's source changes, and each build is some megabytes.
// Newer ones are left, as a test of another checkout may be using them.
func pruneCache(dir, keep string) {
	old, _ := filepath.Glob(filepath.Join(dir, "peer-*"))
	for _, p := range old {
		if fi, err := os.Stat(p); err == nil && p != keep && time.Since(fi.ModTime()) > 24*time.Hour {
			os.Remove(p)
		}
	}
}

// peerSources reads the peer program's Go files.
func peerSources() (map[string][]byte, error) {
	files, err := filepath.Glob(filepath.Join("peer", "*.go"))
	if err != nil {
		return nil, err
	}
	src := make(map[string][]byte)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		src[filepath.Base(f)] = b
	}
	if len(src) == 0 {
		return nil, errors.New("no Go files in ./peer")
	}
	return src, nil
}

// repoRoot is the top of the git checkout holding this package.
func repoRoot() (string, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return "", fmt.Errorf("the cross-version test builds earlier commits from the repository's history and needs git: %w", err)
	}
	out, err := git(".", "rev-parse", "--show-toplevel")
	if err != nil {
		return "", fmt.Errorf("the cross-version test needs a git clone of kiev (with its history), not an export: git rev-parse: %v %s", err, out)
	}
	return strings.TrimSpace(out), nil
}

// git runs git in dir, within a minute, and returns its output.
func git(dir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// goBuild builds pkg in dir into out with the build tags, within five
// minutes, from the Go module cache alone (GOPROXY=off): the test needs
// no network.
func goBuild(dir, pkg, out, tags string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// go test puts its toolchain's bin first in the PATH of the test.
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", tags, "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOPROXY=off", "GOFLAGS=-mod=readonly")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s in %s: %v\n%s", pkg, dir, err, stderr.String())
	}
	return nil
}

func exeSuffix() string {
	if runtime.GOOS == "windows" {
		return ".exe"
	}
	return ""
}

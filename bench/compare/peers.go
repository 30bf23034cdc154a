package main

// The peers that live in bench/peers, a module of their own so that their
// dependencies stay out of this one: the coordinator builds that module's
// program when -systems names a peer, and runs it as a second pair of
// server and client processes, beside compare's own, with the same
// protocol (bench/internal/loadgen). Where it cannot be built, the peers
// are skipped with a message that says how to get their sources.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// The peers, served and driven by bench/peers.
const (
	sysRPCX     = "rpcx"
	sysARPC     = "arpc"
	sysKitex    = "kitex"
	sysKitexMux = "kitex-mux"
)

var peerSystems = []string{sysRPCX, sysARPC, sysKitex, sysKitexMux}

func isPeer(system string) bool { return slices.Contains(peerSystems, system) }

// peersMod is the go.mod that bench/peers/sources.sh writes beside the
// peers' own, with replace lines that point the module at sources fetched
// by hand (and peers.sum beside it).
const peersMod = "peers.mod"

// findPeersDir returns the directory of the peers' module: dir if given,
// else bench/peers seen from bench/ (go run ./compare) or from
// bench/compare (go test).
func findPeersDir(dir string) (string, error) {
	if dir != "" {
		return filepath.Abs(dir)
	}
	for _, d := range []string{"peers", filepath.Join("..", "peers")} {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Abs(d)
		}
	}
	return "", errors.New("no bench/peers here: run compare from bench/, or say where the peers' module is with -peers-dir")
}

// buildPeers builds the peers' program from the module in dir into out and
// returns its path. The module resolves rpcx, arpc and kitex from the
// module proxy, or from the sources that sources.sh points it at.
func buildPeers(dir, out string) (string, error) {
	exe := filepath.Join(out, "peers")
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	args := []string{"build"}
	if _, err := os.Stat(filepath.Join(dir, peersMod)); err == nil {
		args = append(args, "-modfile="+peersMod)
	}
	cmd := exec.Command(goTool, append(args, "-o", exe, ".")...)
	cmd.Dir = dir
	// The repository's go.work does not list bench/peers: the module is
	// built alone.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("GOWORK=off go %s . in %s: %v\n%s", strings.Join(args, " "), dir, err, lastLines(stderr.String(), 6))
	}
	return exe, nil
}

// preparePeers builds the peers' program if cfg names a peer. If it cannot
// be built, it drops the peers from cfg.systems and says why on stderr.
func preparePeers(cfg *config, stderr io.Writer) (string, error) {
	peers := slices.DeleteFunc(slices.Clone(cfg.systems), func(s string) bool { return !isPeer(s) })
	if len(peers) == 0 {
		return "", nil
	}
	dir, err := findPeersDir(cfg.peersDir)
	exe := ""
	if err == nil {
		exe, err = buildPeers(dir, cfg.tmp)
	}
	if err == nil {
		return exe, nil
	}
	fmt.Fprintf(stderr, "compare: skipping %s: the peers' program does not build here.\n%v\n"+
		"Their modules come from the module proxy. Where the proxy refuses them, fetch their sources\n"+
		"(github.com/smallnest/rpcx, lesismal/arpc and cloudwego/kitex, as git clones) and run\n"+
		"bench/peers/sources.sh DIR, which points bench/peers at them (bench/README.md, \"Peers\").\n",
		strings.Join(peers, ", "), err)
	cfg.systems = slices.DeleteFunc(cfg.systems, isPeer)
	if len(cfg.systems) == 0 {
		return "", errors.New("no system left to run")
	}
	return "", nil
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

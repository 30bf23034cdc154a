package config

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// DefaultDirInterval is how often a Dir reads its directory when
// DirOptions.Interval is zero.
const DefaultDirInterval = time.Second

// maxDirFile bounds the size of one file of a Dir: a value, not a data
// set.
const maxDirFile = 1 << 20

// DirOptions configures a Dir source. Only Path is required.
type DirOptions struct {
	// Path is the directory. A relative path is made absolute by NewDir,
	// against the working directory of that moment. The directory need
	// not exist yet: until it does, Load fails with ErrNotFound.
	Path string

	// Interval is how often Next reads the directory to find changes.
	// Zero means DefaultDirInterval (1 s).
	Interval time.Duration
}

// Dir is a Source reading a local directory: each regular file is a key,
// named as the file, and its content, less one trailing newline, is the
// value. It needs no server: use it in development, in tests, and where
// the configuration is mounted as files, as a Kubernetes ConfigMap is.
// The package doc has the details. Make one with NewDir.
type Dir struct {
	path     string
	interval time.Duration

	done      chan struct{} // closed by Close
	closeOnce sync.Once

	// Owned by the goroutine calling Load and Next.
	last   Snapshot
	resync bool // return the next read, changed or not
}

var _ Source = (*Dir)(nil)

// NewDir returns a Dir reading opts.Path. It fails with an error wrapping
// ErrOptions if the path is empty or names something other than a
// directory.
func NewDir(opts DirOptions) (*Dir, error) {
	if strings.TrimSpace(opts.Path) == "" {
		return nil, fmt.Errorf("%w: DirOptions.Path is empty; name the directory holding the configuration files", ErrOptions)
	}
	if opts.Interval < 0 {
		return nil, fmt.Errorf("%w: negative DirOptions.Interval %v", ErrOptions, opts.Interval)
	}
	path, err := filepath.Abs(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("%w: DirOptions.Path %q: %v", ErrOptions, opts.Path, err)
	}
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("%w: DirOptions.Path %s is a file; name the directory holding the configuration files, one file per key", ErrOptions, path)
	}
	return &Dir{
		path:     path,
		interval: cmp.Or(opts.Interval, DefaultDirInterval),
		done:     make(chan struct{}),
		resync:   true,
	}, nil
}

// Load reads the directory.
func (d *Dir) Load(ctx context.Context) (Snapshot, error) {
	snap, err := d.read(ctx)
	if err != nil {
		d.resync = true
		return Snapshot{}, err
	}
	d.last, d.resync = snap, false
	return snap, nil
}

// Next reads the directory every DirOptions.Interval until its content
// differs from the one last returned; see Source.
func (d *Dir) Next(ctx context.Context) (Snapshot, error) {
	if d.resync {
		return d.Load(ctx)
	}
	t := time.NewTicker(d.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return Snapshot{}, ctx.Err()
		case <-d.done:
			return Snapshot{}, ErrClosed
		}
		snap, err := d.read(ctx)
		if err != nil {
			d.resync = true
			return Snapshot{}, err
		}
		if snap.Version() != d.last.Version() {
			d.last = snap
			return snap, nil
		}
	}
}

// String returns "dir" and the directory's path.
func (d *Dir) String() string { return "dir " + d.path }

// Close makes Load and Next return ErrClosed.
func (d *Dir) Close() error {
	d.closeOnce.Do(func() { close(d.done) })
	return nil
}

// read reads every file of the directory. Should a file go between
// listing and reading (the directory is being replaced), it reads again.
func (d *Dir) read(ctx context.Context) (Snapshot, error) {
	for attempt := 0; ; attempt++ {
		select {
		case <-d.done:
			return Snapshot{}, ErrClosed
		default:
		}
		if err := ctx.Err(); err != nil {
			return Snapshot{}, err
		}
		snap, err := d.readOnce()
		if errors.Is(err, errDirMoved) && attempt < 3 {
			continue
		}
		return snap, err
	}
}

var errDirMoved = fmt.Errorf("%w: the directory changed while being read, over and over", ErrUnavailable)

func (d *Dir) readOnce() (Snapshot, error) {
	// Read from the directory the path resolves to now, so that a
	// directory replaced by swapping a symbolic link is read whole. A
	// Kubernetes volume swaps its "..data" link; its files are links
	// through it.
	root, err := filepath.EvalSymlinks(d.path)
	if err == nil {
		if fi, lerr := os.Lstat(filepath.Join(root, "..data")); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			if data, derr := filepath.EvalSymlinks(filepath.Join(root, "..data")); derr == nil {
				root = data
			}
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return Snapshot{}, fmt.Errorf("%w: directory %s does not exist; create it, with one file per key", ErrNotFound, d.path)
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return Snapshot{}, errDirMoved
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("%w: reading directory %s: %v", ErrUnavailable, d.path, err)
	}
	values := make(map[string]string, len(entries))
	h := sha256.New()
	for _, e := range entries { // sorted by name
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		file := filepath.Join(root, name)
		fi, err := os.Stat(file) // follows links
		if errors.Is(err, fs.ErrNotExist) {
			continue // a dangling link, or removed since ReadDir
		}
		if err != nil {
			return Snapshot{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		if fi.Size() > maxDirFile {
			return Snapshot{}, fmt.Errorf("%w: file %s holds %d bytes; a value may hold at most %d", ErrMalformed, file, fi.Size(), maxDirFile)
		}
		data, err := os.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			return Snapshot{}, errDirMoved
		}
		if err != nil {
			return Snapshot{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		if !utf8.Valid(data) {
			return Snapshot{}, fmt.Errorf("%w: file %s is not UTF-8 text; keep binary files out of the configuration directory, or encode them (base64)", ErrMalformed, file)
		}
		v := string(data)
		v = strings.TrimSuffix(v, "\n")
		v = strings.TrimSuffix(v, "\r")
		values[name] = v
		hashString(h, name)
		hashString(h, v)
	}
	return Snapshot{values: values, version: hex.EncodeToString(h.Sum(nil)[:8])}, nil
}

// hashString writes s to h with its length, so that no two sequences of
// strings hash alike by concatenation.
func hashString(h io.Writer, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

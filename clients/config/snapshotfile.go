package config

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// snapshotFormat is the format version of the snapshot files this package
// writes.
const snapshotFormat = 1

// snapshotFile is a snapshot file's content. Readers ignore fields they
// do not know and accept any "v" of 1 or more, so a later kiev may add
// fields.
type snapshotFile struct {
	V       int               `json:"v"`
	Source  string            `json:"source"`  // Source.String() of where the values came from
	Version string            `json:"version"` // Snapshot.Version()
	Saved   time.Time         `json:"saved"`   // when the values were read from the source
	Values  map[string]string `json:"values"`
}

// decodeSnapshotFile parses a snapshot file's content.
func decodeSnapshotFile(data []byte) (snapshotFile, error) {
	var f snapshotFile
	if err := json.Unmarshal(data, &f); err != nil {
		return snapshotFile{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	switch {
	case f.V < 1:
		return snapshotFile{}, fmt.Errorf(`%w: no format version "v"; not a snapshot file this package wrote`, ErrMalformed)
	case f.Values == nil:
		return snapshotFile{}, fmt.Errorf(`%w: no "values"`, ErrMalformed)
	}
	return f, nil
}

// readSnapshotFile reads the snapshot file at path.
func readSnapshotFile(path string) (snapshotFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return snapshotFile{}, err
	}
	f, err := decodeSnapshotFile(data)
	if err != nil {
		return snapshotFile{}, fmt.Errorf("snapshot file %s: %w", path, err)
	}
	return f, nil
}

// writeSnapshotFile replaces the snapshot file at path atomically: it
// writes a temporary file in the same directory, syncs it and renames it
// over path, so a reader (or a crash) sees the old file or the new one,
// never a part. The file is readable by its owner only, since
// configurations often hold credentials.
func writeSnapshotFile(path, source string, s Snapshot, saved time.Time) (err error) {
	data, err := json.MarshalIndent(snapshotFile{
		V:       snapshotFormat,
		Source:  source,
		Version: s.Version(),
		Saved:   saved.UTC(),
		Values:  s.Map(),
	}, "", "\t")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*") // mode 0600
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// checkSnapshotPath validates Options.Snapshot.
func checkSnapshotPath(path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%w: Options.Snapshot %q is relative; give an absolute path, such as /var/lib/myservice/config.json, so that a restart in another working directory finds the file", ErrOptions, path)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%w: Options.Snapshot %s is a directory; name a file in it", ErrOptions, path)
	}
	// The nearest existing ancestor must be a directory; missing ones
	// are created at the first write.
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%w: Options.Snapshot %s lies under %s, which is not a directory", ErrOptions, path, d)
			}
			break
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	return nil
}

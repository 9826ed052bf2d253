// Package atomicfile writes small files so that a reader sees the old
// content or the new, never a part: a temp file beside the target, synced,
// renamed into place, and the directory synced.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data, with mode set explicitly (any umask
// notwithstanding). On error the old file, if any, is untouched.
func Write(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync() // the rename itself is durable only once the directory is
		d.Close()
	}
	return nil
}

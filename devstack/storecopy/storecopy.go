// Package storecopy copies a store's files (a NATS JetStream store, a Redis directory) as
// they are at one moment: what an OS crash at that moment would leave, every write made and
// none lost but what came later. Tests of recovery roll a store back with such a copy.
package storecopy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Copy copies the files under src to dst, which it creates. The store may keep writing
// while it is read: a file removed or renamed since it was listed (a store's temporary
// file) is left out, as at that instant it is not there.
func Copy(src, dst string) error {
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && path != src {
			return nil
		}
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return copyFile(path, to)
	})
	if err != nil {
		return fmt.Errorf("storecopy: %s: %w", src, err)
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", from, err)
	}
	return out.Close()
}

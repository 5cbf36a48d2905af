package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// maxSecret bounds a secret file's size: a cookie or a password, never a document.
const maxSecret = 64 << 10

type dirSecrets struct {
	dir string
	mu  sync.Mutex
	// cache holds each secret with the file's size and time when it was read: a file
	// changed since (a rotated secret) is read again.
	cache map[string]cachedSecret
}

type cachedSecret struct {
	val   string
	size  int64
	mtime time.Time
}

func newDirSecrets(dir string) Secrets {
	return &dirSecrets{dir: dir, cache: map[string]cachedSecret{}}
}

// Lookup's errors name the secret and the directory, never the content.
func (d *dirSecrets) Lookup(name string) (string, error) {
	if err := checkSecretName(name); err != nil {
		return "", fmt.Errorf("policy: %w", err)
	}
	p := filepath.Join(d.dir, name)
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w %q in %s", errNoSecret, name, d.dir)
	}
	if err != nil {
		return "", fmt.Errorf("policy: secret %q: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("policy: secret %q in %s is not a file", name, d.dir)
	}
	if fi.Size() > maxSecret {
		return "", fmt.Errorf("policy: secret %q is %d bytes, over %d", name, fi.Size(), maxSecret)
	}
	d.mu.Lock()
	c, ok := d.cache[name]
	d.mu.Unlock()
	if ok && c.size == fi.Size() && c.mtime.Equal(fi.ModTime()) {
		return c.val, nil
	}
	b, err := os.ReadFile(p)
	if err != nil {
		// os.ReadFile's error holds the path only: no content.
		return "", fmt.Errorf("policy: secret %q: %w", name, err)
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	d.mu.Lock()
	d.cache[name] = cachedSecret{val: v, size: fi.Size(), mtime: fi.ModTime()}
	d.mu.Unlock()
	return v, nil
}

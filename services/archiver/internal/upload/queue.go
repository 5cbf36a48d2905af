package upload

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Queue uploads the sealed files of a directory: at start, after every seal (Notify) and
// once more when the archiver stops (Pass with the stop's deadline). A file whose upload
// failed its bounded tries stays, with its record, and is tried again at the next of
// these, never in a loop of its own.
type Queue struct {
	u    *Uploader
	dir  string
	wake chan struct{}
	mu   sync.Mutex // one pass at a time: Run's and the stop's
	// Done is called after each file's upload, with its size.
	Done func(path string, size int64, r Result, err error)
}

// NewQueue returns a queue for the files of dir.
func NewQueue(u *Uploader, dir string) *Queue {
	return &Queue{u: u, dir: dir, wake: make(chan struct{}, 1)}
}

// Notify asks for a pass; it never blocks.
func (q *Queue) Notify() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Run passes over the directory at start and after each Notify until ctx ends.
func (q *Queue) Run(ctx context.Context) error {
	q.Notify()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-q.wake:
			q.Pass(ctx)
		}
	}
}

// Pass uploads every sealed file of the directory and returns how many failed.
func (q *Queue) Pass(ctx context.Context) (failed int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	files, err := Sealed(q.dir)
	if err != nil {
		q.u.log.Error("list sealed files to upload", "dir", q.dir, "err", err)
		return 1
	}
	for _, p := range files {
		if ctx.Err() != nil {
			return failed + 1
		}
		fi, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		var size int64
		if fi != nil {
			size = fi.Size()
		}
		r, err := q.u.Upload(ctx, p)
		if err != nil && ctx.Err() != nil {
			// Stopping: the record keeps the parts sent, the stop's pass or the next start
			// continues.
			q.u.log.Info("upload interrupted", "file", p, "err", err)
			return failed + 1
		}
		if err != nil {
			failed++
			q.u.log.Error("upload failed; the file stays and is tried again at the next seal or start", "file", p, "err", err)
		} else {
			q.u.log.Info("uploaded", "file", filepath.Base(p), "key", r.Key, "resumed", r.Resumed,
				"parts_sent", r.Sent, "parts_held", r.Kept, "deleted", r.Deleted)
		}
		if q.Done != nil {
			q.Done(p, size, r, err)
		}
	}
	return failed
}

// Sealed lists the files of dir that are whole and never written again, in upload order:
// each WARC file (*.warc.gz) before its index (*.cdxj), then WACZ packages. A file being
// written (.open), a temporary file (.tmp), an upload record (.upload), a file kept after
// its upload (marked .uploaded) are not among them, nor an index whose WARC file is still
// open (sealing writes the index first).
func Sealed(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, e := range ents {
		if e.Type().IsRegular() {
			names[e.Name()] = true
		}
	}
	var out []string
	for n := range names {
		if names[n+DoneSuffix] {
			continue
		}
		switch {
		case strings.HasSuffix(n, ".warc.gz"), strings.HasSuffix(n, ".wacz"):
			out = append(out, n)
		case strings.HasSuffix(n, ".cdxj"):
			if !names[strings.TrimSuffix(n, ".cdxj")+".warc.gz.open"] {
				out = append(out, n)
			}
		}
	}
	rank := func(n string) (string, int) {
		switch {
		case strings.HasSuffix(n, ".warc.gz"):
			return strings.TrimSuffix(n, ".warc.gz"), 0
		case strings.HasSuffix(n, ".cdxj"):
			return strings.TrimSuffix(n, ".cdxj"), 1
		}
		return n, 2
	}
	sort.Slice(out, func(i, j int) bool {
		bi, ri := rank(out[i])
		bj, rj := rank(out[j])
		if (ri == 2) != (rj == 2) {
			return rj == 2
		}
		if bi != bj {
			return bi < bj
		}
		return ri < rj
	})
	for i, n := range out {
		out[i] = filepath.Join(dir, n)
	}
	return out, nil
}

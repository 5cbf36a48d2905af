// Package upload copies sealed archive files (WARC, their CDXJ indexes, WACZ) to
// S3-compatible object storage with resumable multipart uploads, and deletes a local file
// only once the store holds it whole.
//
// Each file is uploaded in parts of PartSize. The upload id and every part the store
// acknowledged are recorded in <file>.upload (written to a temporary name, fsynced,
// renamed) before the next part is sent, so a process stopped mid-upload — or a store that
// went away — continues where it was: the store's own list of the upload's parts
// (ListParts) says which parts it holds, and a part it holds whose ETag is the MD5 of the
// local octets is not sent again. After CompleteMultipartUpload, HeadObject must report the
// file's size and the multipart ETag computed from the local parts' MD5s; only then is the
// record removed and, unless KeepLocal, the file deleted.
package upload

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/trawl/trawl/shared/ctxsleep"
)

// stateSuffix names the record of a file's unfinished upload.
const stateSuffix = ".upload"

// DoneSuffix names the marker of a file kept locally (KeepLocal) after the store confirmed
// it.
const DoneSuffix = ".uploaded"

// minPart is S3's smallest part but the last.
const minPart = 5 << 20

// Config is where and how files go.
type Config struct {
	Endpoint  string // host[:port]
	Secure    bool   // https
	Region    string
	Bucket    string
	Prefix    string // object key prefix ("crawls/2026/"); the key is Prefix + file name
	AccessKey string
	SecretKey string
	PartSize  int64 // at least 5 MiB
	Attempts  int   // tries of each request before the file's upload fails (bounded)
	Backoff   time.Duration
	KeepLocal bool // keep the local file after the store confirmed it
}

// Uploader uploads files.
type Uploader struct {
	c   Config
	s3  *minio.Core
	log *slog.Logger
}

// New returns an Uploader. It does not contact the store.
func New(c Config, log *slog.Logger) (*Uploader, error) {
	if c.PartSize < minPart {
		return nil, fmt.Errorf("upload: part size %d is under S3's minimum of 5 MiB", c.PartSize)
	}
	if c.Attempts < 1 {
		c.Attempts = 1
	}
	core, err := minio.NewCore(c.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(c.AccessKey, c.SecretKey, ""),
		Secure: c.Secure,
		Region: c.Region,
		// Retries are this package's, bounded by Attempts and logged, not the client's.
		MaxRetries: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("upload: S3 client for %s: %w", c.Endpoint, err)
	}
	return &Uploader{c: c, s3: core, log: log}, nil
}

// Key is the object key of the local file at path.
func (u *Uploader) Key(path string) string { return u.c.Prefix + filepath.Base(path) }

// state is what <file>.upload records.
type state struct {
	Key      string `json:"key"`
	UploadID string `json:"upload_id"`
	Size     int64  `json:"size"`
	PartSize int64  `json:"part_size"`
	// Parts are the ETags the store returned, by part number - 1.
	Parts []string `json:"parts"`
}

// Result says what Upload did.
type Result struct {
	Key     string
	Resumed bool // an upload recorded by an earlier attempt was continued
	Sent    int  // parts sent by this call
	Kept    int  // parts the store already held
	Deleted bool // the local file was deleted
}

// Upload uploads the file at path, continuing an upload recorded beside it, confirms it
// with HeadObject and then deletes it (unless KeepLocal). A sealed file never changes, so a
// record whose size differs from the file's is stale and the upload begins again.
func (u *Uploader) Upload(ctx context.Context, path string) (Result, error) {
	res := Result{Key: u.Key(path)}
	fi, err := os.Stat(path)
	if err != nil {
		return res, fmt.Errorf("upload: %w", err)
	}
	size := fi.Size()
	st, err := readState(path)
	if err != nil {
		return res, err
	}
	if st != nil && (st.Key != res.Key || st.Size != size || st.PartSize <= 0) {
		u.log.Warn("upload record does not match the file; starting again", "file", path)
		st = nil
	}
	var held map[int]minio.ObjectPart
	if st != nil {
		held, err = u.listParts(ctx, st)
		var er minio.ErrorResponse
		if errors.As(err, &er) && er.Code == "NoSuchUpload" {
			// Completed by an attempt that stopped before removing its record, or aborted.
			if ok, herr := u.confirm(ctx, path, st); herr == nil && ok {
				return u.finish(path, res)
			}
			u.log.Warn("recorded upload no longer exists; starting again", "file", path, "upload_id", st.UploadID)
			st, held = nil, nil
		} else if err != nil {
			return res, err
		} else {
			res.Resumed = true
		}
	}
	if st == nil {
		st = &state{Key: res.Key, Size: size, PartSize: u.c.PartSize}
		err := u.retry(ctx, "create multipart upload", func() error {
			id, err := u.s3.NewMultipartUpload(ctx, u.c.Bucket, st.Key, minio.PutObjectOptions{})
			st.UploadID = id
			return err
		})
		if err != nil {
			return res, err
		}
		if err := writeState(path, st); err != nil {
			return res, err
		}
	}

	f, err := os.Open(path)
	if err != nil {
		return res, fmt.Errorf("upload: %w", err)
	}
	defer f.Close()
	n := numParts(size, st.PartSize)
	st.Parts = append(st.Parts, make([]string, max(0, n-len(st.Parts)))...)[:n]
	buf := make([]byte, st.PartSize)
	for i := range n {
		off := int64(i) * st.PartSize
		part := buf[:min(st.PartSize, size-off)]
		if _, err := f.ReadAt(part, off); err != nil && !errors.Is(err, io.EOF) {
			return res, fmt.Errorf("upload: read %s: %w", path, err)
		}
		sum := md5.Sum(part)
		want := hex.EncodeToString(sum[:])
		if p, ok := held[i+1]; ok && trimETag(p.ETag) == want && p.Size == int64(len(part)) {
			st.Parts[i] = trimETag(p.ETag)
			res.Kept++
			continue
		}
		var got minio.ObjectPart
		err := u.retry(ctx, fmt.Sprintf("part %d of %d", i+1, n), func() error {
			var err error
			got, err = u.s3.PutObjectPart(ctx, u.c.Bucket, st.Key, st.UploadID, i+1,
				bytes.NewReader(part), int64(len(part)), minio.PutObjectPartOptions{})
			return err
		})
		if err != nil {
			return res, err
		}
		if trimETag(got.ETag) != want {
			return res, fmt.Errorf("upload: part %d of %s: the store's ETag %s is not the MD5 of the octets sent (%s)", i+1, path, got.ETag, want)
		}
		st.Parts[i] = want
		res.Sent++
		if err := writeState(path, st); err != nil {
			return res, err
		}
	}
	parts := make([]minio.CompletePart, n)
	for i, e := range st.Parts {
		parts[i] = minio.CompletePart{PartNumber: i + 1, ETag: e}
	}
	err = u.retry(ctx, "complete multipart upload", func() error {
		_, err := u.s3.CompleteMultipartUpload(ctx, u.c.Bucket, st.Key, st.UploadID, parts, minio.PutObjectOptions{})
		var er minio.ErrorResponse
		if errors.As(err, &er) && er.Code == "NoSuchUpload" {
			// A completion whose answer was lost: the object is there; confirm judges it.
			return nil
		}
		return err
	})
	if err != nil {
		return res, err
	}
	ok, err := u.confirm(ctx, path, st)
	if err != nil {
		return res, err
	}
	if !ok {
		return res, fmt.Errorf("upload: %s: the store's object %s is not the file uploaded; the file is kept", path, st.Key)
	}
	return u.finish(path, res)
}

// confirm reports whether the store's object is the file: its size and its multipart ETag
// (the MD5 of the parts' MD5s, "-" and the number of parts) as computed from the local
// parts' ETags.
func (u *Uploader) confirm(ctx context.Context, path string, st *state) (bool, error) {
	if len(st.Parts) != numParts(st.Size, st.PartSize) || st.Size == 0 && len(st.Parts) == 0 {
		return false, nil
	}
	var info minio.ObjectInfo
	err := u.retry(ctx, "head object", func() error {
		var err error
		info, err = u.s3.StatObject(ctx, u.c.Bucket, st.Key, minio.StatObjectOptions{})
		var er minio.ErrorResponse
		if errors.As(err, &er) && (er.Code == "NoSuchKey" || er.StatusCode == 404) {
			info, err = minio.ObjectInfo{}, nil
		}
		return err
	})
	if err != nil {
		return false, err
	}
	if info.Key == "" {
		return false, nil
	}
	h := md5.New()
	for _, e := range st.Parts {
		b, err := hex.DecodeString(e)
		if err != nil {
			return false, nil
		}
		h.Write(b)
	}
	want := fmt.Sprintf("%s-%d", hex.EncodeToString(h.Sum(nil)), len(st.Parts))
	if info.Size != st.Size || trimETag(info.ETag) != want {
		u.log.Warn("stored object differs from the file", "file", path, "key", st.Key,
			"size", info.Size, "want_size", st.Size, "etag", info.ETag, "want_etag", want)
		return false, nil
	}
	return true, nil
}

func (u *Uploader) finish(path string, res Result) (Result, error) {
	// A sealed file's CDXJ index stays in any case: it is about 1% of its WARC, and the
	// crawl reports, `archive forget` and the digest index's seeding read it locally.
	keep := u.c.KeepLocal || strings.HasSuffix(path, ".cdxj")
	if keep {
		// The marker keeps a kept file from being uploaded again on every pass.
		if err := os.WriteFile(path+DoneSuffix, []byte(res.Key+"\n"), 0o644); err != nil {
			return res, fmt.Errorf("upload: %w", err)
		}
	}
	if err := os.Remove(path + stateSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
		return res, fmt.Errorf("upload: %w", err)
	}
	if !keep {
		if err := os.Remove(path); err != nil {
			return res, fmt.Errorf("upload: uploaded, but the local file stays: %w", err)
		}
		res.Deleted = true
	}
	return res, nil
}

func (u *Uploader) listParts(ctx context.Context, st *state) (map[int]minio.ObjectPart, error) {
	held := map[int]minio.ObjectPart{}
	marker := 0
	for {
		var r minio.ListObjectPartsResult
		err := u.retry(ctx, "list parts", func() error {
			var err error
			r, err = u.s3.ListObjectParts(ctx, u.c.Bucket, st.Key, st.UploadID, marker, 1000)
			var er minio.ErrorResponse
			if errors.As(err, &er) && er.Code == "NoSuchUpload" {
				return permanent{err}
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, p := range r.ObjectParts {
			held[p.PartNumber] = p
		}
		if !r.IsTruncated || r.NextPartNumberMarker <= marker {
			return held, nil
		}
		marker = r.NextPartNumberMarker
	}
}

// permanent is an error not worth another try.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// retry runs op up to Attempts times, waiting Backoff, then twice that, between tries.
func (u *Uploader) retry(ctx context.Context, what string, op func() error) error {
	wait := u.c.Backoff
	var err error
	for attempt := 1; ; attempt++ {
		if err = op(); err == nil {
			return nil
		}
		var p permanent
		if errors.As(err, &p) {
			return p.error
		}
		if attempt >= u.c.Attempts || ctx.Err() != nil {
			return fmt.Errorf("upload: %s: %d tries: %w", what, attempt, err)
		}
		u.log.Warn("object store request failed; trying again", "op", what, "attempt", attempt, "wait", wait, "err", err)
		if !ctxsleep.Sleep(ctx, wait) {
			return fmt.Errorf("upload: %s: %w (last error: %w)", what, ctx.Err(), err)
		}
		wait = min(2*wait, time.Minute)
	}
}

func numParts(size, part int64) int {
	if size == 0 {
		return 1
	}
	return int((size + part - 1) / part)
}

func trimETag(e string) string { return strings.Trim(e, `"`) }

func readState(path string) (*state, error) {
	b, err := os.ReadFile(path + stateSuffix)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("upload: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		// A record is renamed into place whole; one that does not parse was not written
		// by this package. Begin again rather than trust it.
		return nil, nil //nolint:nilerr
	}
	return &st, nil
}

func writeState(path string, st *state) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	tmp := path + stateSuffix + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("upload: record: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path+stateSuffix)
	}
	if err != nil {
		return fmt.Errorf("upload: record: %w", err)
	}
	return nil
}

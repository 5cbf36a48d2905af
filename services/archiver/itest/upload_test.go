//go:build s3

package itest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/trawl/trawl/devstack/warccheck"
	"github.com/trawl/trawl/devstack/weedproc"
	"github.com/trawl/trawl/services/archiver/internal/config"
	"github.com/trawl/trawl/services/archiver/internal/upload"
	"github.com/trawl/trawl/shared/cdxj"
)

const (
	s3Access = "trawltestaccess"
	s3Secret = "trawltestsecretkey0123456789"
	s3Bucket = "trawl-archive"
)

// store is a SeaweedFS server (weed mini) and a client of it for the test's own reads.
type store struct {
	srv *weedproc.Server
	s3  *minio.Client
}

// startStore builds SeaweedFS once (cached), starts it on free ports with the bucket and
// waits until the bucket answers.
func startStore(t *testing.T) *store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	bin, err := weedproc.Binary(ctx, os.Stderr)
	if err != nil {
		t.Fatalf("SeaweedFS: %v", err)
	}
	srv, err := weedproc.New(bin, weedproc.Options{Dir: filepath.Join(t.TempDir(), "weed"), AccessKey: s3Access, SecretKey: s3Secret, Bucket: s3Bucket})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	c, err := minio.New(srv.Endpoint(), &minio.Options{Creds: credentials.NewStaticV4(s3Access, s3Secret, ""), Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	st := &store{srv: srv, s3: c}
	st.start(t)
	return st
}

func (st *store) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := st.srv.Start(ctx, func(ctx context.Context) error {
		ok, err := st.s3.BucketExists(ctx, s3Bucket)
		if err == nil && !ok {
			err = errors.New("bucket not there yet")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (st *store) get(t *testing.T, key string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o, err := st.s3.GetObject(ctx, s3Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return b
}

func testLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// TestUploadResumesAfterStoreKilled uploads a file in parts to SeaweedFS and SIGKILLs the
// server once the store has acknowledged some parts. The upload fails after its bounded
// tries and the file stays; with the server started again (same data directory), the next
// upload continues the recorded one — the parts ListParts reports are not sent again —
// completes it, confirms the object's size and multipart ETag, and only then deletes the
// file. The object read back is the file, octet for octet.
func TestUploadResumesAfterStoreKilled(t *testing.T) {
	st := startStore(t)
	dir := t.TempDir()
	const partSize, parts = 5 << 20, 16
	data := make([]byte, parts*partSize-12345)
	rand.Read(data)
	path := filepath.Join(dir, "TRAWL-20261128120000000-00001-itest.warc.gz")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	u, err := upload.New(upload.Config{Endpoint: st.srv.Endpoint(), Region: "us-east-1", Bucket: s3Bucket, Prefix: "crawls/one/",
		AccessKey: s3Access, SecretKey: s3Secret, PartSize: partSize, Attempts: 3, Backoff: 50 * time.Millisecond}, testLog())
	if err != nil {
		t.Fatal(err)
	}

	// Kill the server once the record beside the file holds two acknowledged parts.
	killed, uploadDone := make(chan int, 1), make(chan struct{})
	go func() {
		for {
			select {
			case <-uploadDone:
				killed <- 0
				return
			default:
			}
			if n := recordedParts(path); n >= 2 {
				if err := st.srv.Kill(); err != nil {
					t.Error(err)
				}
				killed <- n
				return
			}
			time.Sleep(2 * time.Millisecond) // polling a file another goroutine rewrites
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err = u.Upload(ctx, path)
	close(uploadDone)
	atKill := <-killed
	if err == nil {
		t.Fatalf("the upload succeeded although the store was killed after %d parts", atKill)
	}
	t.Logf("store killed after %d recorded parts; upload: %v", atKill, err)
	if _, serr := os.Stat(path); serr != nil {
		t.Fatalf("the local file is gone although the store never confirmed it: %v", serr)
	}
	held := recordedParts(path)
	if held < 2 || held >= parts {
		t.Fatalf("%d parts recorded after the kill; want some but not all of %d", held, parts)
	}

	st.start(t)
	r, err := u.Upload(ctx, path)
	if err != nil {
		t.Fatalf("upload after the restart: %v", err)
	}
	t.Logf("resumed: %+v", r)
	if !r.Resumed || r.Kept < 2 || r.Kept+r.Sent != parts {
		t.Errorf("result %+v: want the recorded upload resumed, the %d parts the store held kept, the rest sent", r, held)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) || !r.Deleted {
		t.Errorf("the local file after a confirmed upload: %v (deleted %v); want it gone", err, r.Deleted)
	}
	if _, err := os.Stat(path + ".upload"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the upload record stays after completion: %v", err)
	}
	got := st.get(t, "crawls/one/"+filepath.Base(path))
	if sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("the object (%d octets) is not the file (%d octets)", len(got), len(data))
	}
}

// recordedParts is how many parts the record beside path holds.
func recordedParts(path string) int {
	b, err := os.ReadFile(path + ".upload")
	if err != nil {
		return 0
	}
	var st struct{ Parts []string }
	if json.Unmarshal(b, &st) != nil {
		return 0
	}
	n := 0
	for _, p := range st.Parts {
		if p != "" {
			n++
		}
	}
	return n
}

// TestArchiverUploadsSealedFiles runs the archiver with object storage on: every file it
// seals, and its index, is uploaded under the prefix and then deleted locally (or, kept,
// marked uploaded so that no later pass sends it again); the objects read back as an
// archive (warccheck) holding every page published.
func TestArchiverUploadsSealedFiles(t *testing.T) {
	st := startStore(t)
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep local %v", keep), func(t *testing.T) { archiverUploads(t, st, keep) })
	}
}

func archiverUploads(t *testing.T, st *store, keep bool) {
	prefix := fmt.Sprintf("crawl-%v/", keep)
	secrets := t.TempDir()
	for name, v := range map[string]string{config.S3AccessKeySecret: s3Access + "\n", config.S3SecretKeySecret: s3Secret} {
		if err := os.WriteFile(filepath.Join(secrets, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := newStack(t, map[string]string{
		"TRAWL_ARCHIVE_MAX_SIZE": "64KiB", "TRAWL_ARCHIVE_REVISITS": "false", "TRAWL_ARCHIVE_BATCH": "1",
		"TRAWL_ARCHIVE_S3_ENDPOINT": st.srv.Endpoint(), "TRAWL_ARCHIVE_S3_TLS": "false",
		"TRAWL_ARCHIVE_S3_BUCKET": s3Bucket, "TRAWL_ARCHIVE_S3_PREFIX": prefix,
		"TRAWL_ARCHIVE_S3_KEEP_LOCAL": strconv.FormatBool(keep),
		"TRAWL_SECRETS_DIR":           secrets,
	})
	stop := s.start()
	const pages = 8
	var urls []string
	for i := range pages {
		body := make([]byte, 20<<10)
		rand.Read(body)
		u := "http://a.example/u/" + string(rune('a'+i))
		urls = append(urls, u)
		s.publish(exchange(u, 200, "Content-Type: application/octet-stream\r\n", body, false), "u"+string(rune('a'+i)))
	}
	s.waitArchived()
	stop() // seals the last file; the stop's pass uploads it

	left, err := upload.Sealed(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("sealed files left after the stop's upload: %v", left)
	}
	kept, _ := filepath.Glob(filepath.Join(s.dir, "*.warc.gz"))
	marked, _ := filepath.Glob(filepath.Join(s.dir, "*"+upload.DoneSuffix))
	indexes, _ := filepath.Glob(filepath.Join(s.dir, "*.cdxj"))
	if keep && (len(kept) < 2 || len(marked) != 2*len(kept)) || !keep && (len(kept) > 0 || len(indexes) < 2 || len(marked) != len(indexes)) {
		t.Errorf("keep local %v: %d WARC files, %d indexes and %d upload markers left", keep, len(kept), len(indexes), len(marked))
	}
	// The reports read the local indexes whether or not the WARC files stay.
	indexed := map[string]bool{}
	for _, name := range indexes {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		err = cdxj.Each(context.Background(), f, func(l cdxj.Line) error { indexed[l.URL] = true; return nil }, nil)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range urls {
		if !indexed[u] {
			t.Errorf("keep local %v: %s is in no local index", keep, u)
		}
	}
	down := t.TempDir()
	n := 0
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for o := range st.s3.ListObjects(ctx, s3Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		n++
		if err := os.WriteFile(filepath.Join(down, strings.TrimPrefix(o.Key, prefix)), st.get(t, o.Key), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a, err := warccheck.Check(down)
	if err != nil {
		t.Fatalf("the uploaded archive does not read back:\n%v", err)
	}
	if len(a.Files) < 2 || n != 2*len(a.Files) {
		t.Errorf("%d objects for %d WARC files: want several files, each with its index", n, len(a.Files))
	}
	got := map[string]bool{}
	for _, c := range a.Captures() {
		got[c.Get("WARC-Target-URI")] = true
	}
	for _, u := range urls {
		if !got[u] {
			t.Errorf("%s is not in the uploaded archive", u)
		}
	}
}

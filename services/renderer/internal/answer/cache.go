package answer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/contentcoding"
	"github.com/trawl/trawl/shared/crawlmsg"
)

// Cache is the subresource cache shared by every renderer: a JetStream object store
// (topology.RenderCacheBucket) whose objects are the bodies of responses already fetched
// (decoded: the content the page was given, not the octets as received),
// named by their URL's hash, with the status and headers in the object's metadata. The
// store's TTL (TRAWL_RENDER_CACHE_TTL) ages entries out and its byte limit
// (TRAWL_RENDER_CACHE_BYTES) bounds it: when full, new entries are refused and pages
// fetch what they need until old ones expire. It lives in NATS rather than Redis so that
// bundles of megabytes never take the frontier's memory.
type Cache struct {
	store jetstream.ObjectStore
	log   *slog.Logger
}

// NewCache returns a cache over store.
func NewCache(store jetstream.ObjectStore, log *slog.Logger) *Cache {
	return &Cache{store: store, log: log}
}

func cacheName(rawURL string) string {
	h := sha256.Sum256([]byte(rawURL))
	return hex.EncodeToString(h[:])
}

// Get returns the cached response for rawURL, as an exchange marked Cached (no octets:
// it made no request now).
func (c *Cache) Get(ctx context.Context, rawURL string) (Result, bool) {
	obj, err := c.store.Get(ctx, cacheName(rawURL))
	if err != nil {
		if !errors.Is(err, jetstream.ErrObjectNotFound) {
			c.log.Debug("subresource cache: get", "url", rawURL, "err", err)
		}
		return Result{}, false
	}
	defer obj.Close()
	info, err := obj.Info()
	if err != nil || info.Metadata["url"] != rawURL {
		return Result{}, false
	}
	status, _ := strconv.Atoi(info.Metadata["status"])
	var h http.Header
	if status == 0 || json.Unmarshal([]byte(info.Metadata["header"]), &h) != nil {
		return Result{}, false
	}
	if codings, err := contentcoding.Codings(contentcoding.Header(h)); err != nil || len(codings) > 0 {
		// An entry of an earlier release, which kept a coded body under its coding and
		// gave it to pages undecoded: fetched again, decoded, it replaces this one.
		return Result{}, false
	}
	body, err := io.ReadAll(obj)
	if err != nil {
		return Result{}, false
	}
	fetched, _ := strconv.ParseInt(info.Metadata["fetched_at"], 10, 64)
	ex := &crawlmsg.Exchange{URL: rawURL, Method: http.MethodGet, Status: status, ContentType: info.Metadata["content_type"],
		FetchedAt: fetched, Cached: true}
	return Result{Status: status, Header: h, Body: body, Exchange: ex}, true
}

// Put stores res as rawURL's response; a failure (the store full) only loses the entry.
func (c *Cache) Put(ctx context.Context, rawURL string, res Result) {
	h, err := json.Marshal(res.Header)
	if err != nil {
		return
	}
	meta := jetstream.ObjectMeta{Name: cacheName(rawURL), Metadata: map[string]string{
		"url": rawURL, "status": strconv.Itoa(res.Status), "header": string(h),
		"content_type": res.Exchange.ContentType, "fetched_at": strconv.FormatInt(res.Exchange.FetchedAt, 10),
	}}
	if _, err := c.store.Put(ctx, meta, bytes.NewReader(res.Body)); err != nil {
		c.log.Debug("subresource cache: put refused", "url", rawURL, "err", err)
	}
}

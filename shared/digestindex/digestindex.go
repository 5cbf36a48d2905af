// Package digestindex is the archive's payload digest index: for each SHA-1 payload digest
// archived in full, the capture an identical payload refers to (its URI, date and, when
// known, record id). The archiver looks every 200 up in it and writes a revisit record
// (identical-payload-digest) when the payload is already there, whatever the URL; trawlctl
// seeds it from CDXJ indexes and drops the entries of deleted files. It lives in Redis
// under a name of its own, so several crawls can share one index.
package digestindex

import (
	"context"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/redisx"
)

// Buckets is how many hashes the index spreads over: each stays small enough for Redis's
// compact listpack encoding (128 entries) up to ~8 million payloads.
const Buckets = 1 << 16

// Index is a digest index named Name: its buckets are "<name>:archive:payloads:{<b>}", b
// the 4 hex digits of the digest's first 2 octets, each bucket its own hash tag so that on
// Redis Cluster they spread over every slot (plain pipelined HGET, HSETNX; no script
// spans two buckets). The field is the digest's next 10 octets; the value is
// "<unix ms> <record id hex or -> <uri>": about 70 octets of Redis memory plus the URI's
// length per payload while the buckets stay listpacks.
type Index struct {
	rdb    redis.UniversalClient
	prefix string // "<name>:archive:payloads:"
}

// New is the index named name ("" is redisx.DefaultPrefix).
func New(rdb redis.UniversalClient, name string) *Index {
	return &Index{rdb: rdb, prefix: BucketPrefix(name)}
}

// BucketPrefix is what every bucket key of the index named name begins with.
func BucketPrefix(name string) string {
	if name == "" {
		name = redisx.DefaultPrefix
	}
	return name + ":archive:payloads:"
}

// Original is the capture that identical payloads refer to.
type Original struct {
	URI      string
	Date     time.Time
	RecordID string // "<urn:uuid:…>", "" when not known (an entry seeded from a CDXJ line)
}

// ErrNotSHA1 marks a digest the index cannot hold: only SHA-1 digests in base32, the form
// the archiver writes, can match a payload the archiver digests.
var ErrNotSHA1 = errors.New("digestindex: not a sha1 base32 digest")

var b32 = base32.StdEncoding

// slot is the bucket key and field of digest ("sha1:<base32>", or bare base32 as pywb's
// CDXJ sometimes has it).
func (x *Index) slot(digest string) (key, field string, err error) {
	d := strings.ToUpper(strings.TrimPrefix(digest, "sha1:"))
	raw, err := b32.DecodeString(d)
	if err != nil || len(raw) != 20 {
		return "", "", fmt.Errorf("%w: %q", ErrNotSHA1, digest)
	}
	return x.prefix + "{" + hex.EncodeToString(raw[:2]) + "}", string(raw[2:12]), nil
}

func encode(o Original) string {
	// The record id as its 32 hex digits: the archiver's ids are urn:uuid.
	id := strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(o.RecordID, "<urn:uuid:"), ">"), "-", "")
	if len(id) != 32 {
		id = "-"
	}
	return strconv.FormatInt(o.Date.UnixMilli(), 10) + " " + id + " " + o.URI
}

func decode(v string) (Original, bool) {
	f := strings.SplitN(v, " ", 3)
	if len(f) != 3 || f[2] == "" {
		return Original{}, false
	}
	ms, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return Original{}, false
	}
	o := Original{URI: f[2], Date: time.UnixMilli(ms).UTC()}
	if h := f[1]; len(h) == 32 {
		o.RecordID = "<urn:uuid:" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32] + ">"
	}
	return o, true
}

// Lookup returns the original of each digest (nil where none, or where the digest is no
// SHA-1), in one round trip.
func (x *Index) Lookup(ctx context.Context, digests []string) ([]*Original, error) {
	out := make([]*Original, len(digests))
	if len(digests) == 0 {
		return out, nil
	}
	pipe := x.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(digests))
	for i, d := range digests {
		k, f, err := x.slot(d)
		if err != nil {
			continue
		}
		cmds[i] = pipe.HGet(ctx, k, f)
	}
	if pipe.Len() == 0 {
		return out, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("digestindex: lookup: %w", err)
	}
	for i, c := range cmds {
		if c == nil {
			continue
		}
		v, err := c.Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("digestindex: lookup: %w", err)
		}
		if o, ok := decode(v); ok {
			out[i] = &o
		} // unreadable: as if never archived
	}
	return out, nil
}

// Add records originals, in one round trip. An entry already present is kept (HSETNX):
// the first capture of a payload stays the one its revisits refer to. It returns how many
// were added; digests that are no SHA-1 are skipped.
func (x *Index) Add(ctx context.Context, digests []string, origs []Original) (int, error) {
	pipe := x.rdb.Pipeline()
	var cmds []*redis.BoolCmd
	for i, d := range digests {
		k, f, err := x.slot(d)
		if err != nil {
			continue
		}
		cmds = append(cmds, pipe.HSetNX(ctx, k, f, encode(origs[i])))
	}
	if len(cmds) == 0 {
		return 0, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("digestindex: add: %w", err)
	}
	n := 0
	for _, c := range cmds {
		if c.Val() {
			n++
		}
	}
	return n, nil
}

// forget deletes a field only while it still holds the value read, so an entry replaced
// in between is left alone.
// (EVAL, not EVALSHA: a pipeline cannot load a script the server does not hold.)
const forget = `if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end return 0`

// Forget drops the entries whose original is one of origs (same digest, URI and date to
// the second, the precision of a CDXJ timestamp): the captures of a WARC file about to be
// deleted, so that later identical payloads are archived in full again instead of
// referring to nothing. Two round trips; it returns how many entries it dropped.
func (x *Index) Forget(ctx context.Context, digests []string, origs []Original) (int, error) {
	type hit struct{ key, field string }
	pipe := x.rdb.Pipeline()
	var hits []hit
	var gets []*redis.StringCmd
	var want []Original
	for i, d := range digests {
		k, f, err := x.slot(d)
		if err != nil {
			continue
		}
		hits = append(hits, hit{k, f})
		gets = append(gets, pipe.HGet(ctx, k, f))
		want = append(want, origs[i])
	}
	if len(hits) == 0 {
		return 0, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("digestindex: forget: %w", err)
	}
	var dels []*redis.Cmd
	for i, g := range gets {
		v, err := g.Result()
		if err != nil {
			continue
		}
		o, ok := decode(v)
		if !ok || o.URI != want[i].URI || o.Date.Unix() != want[i].Date.Unix() {
			continue
		}
		dels = append(dels, pipe.Eval(ctx, forget, []string{hits[i].key}, hits[i].field, v))
	}
	if len(dels) == 0 {
		return 0, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("digestindex: forget: %w", err)
	}
	n := 0
	for _, c := range dels {
		if v, _ := c.Int(); v > 0 {
			n++
		}
	}
	return n, nil
}

// Stats is the key of a crawl's archive counters (a hash): fields StatRevisits and
// StatSavedBytes, per crawl (its Redis prefix) whichever index it uses.
func Stats(prefix string) string {
	if prefix == "" {
		prefix = redisx.DefaultPrefix
	}
	return prefix + ":archive:stats"
}

// Fields of the Stats hash.
const (
	StatRevisits   = "dedup_revisits"    // 200s written as identical-payload-digest revisits
	StatSavedBytes = "dedup_saved_bytes" // their payload octets, not stored again
)

// LoadName reads TRAWL_ARCHIVE_DEDUP_INDEX, the name of the index a crawl uses ("": the
// crawl's TRAWL_REDIS_PREFIX, see Name).
func LoadName(r *envconfig.Reader) string { return r.String("ARCHIVE_DEDUP_INDEX", "") }

// Name is the index a crawl with Redis prefix prefix uses when TRAWL_ARCHIVE_DEDUP_INDEX
// is set to name.
func Name(name, prefix string) string {
	if name != "" {
		return name
	}
	return prefix
}

// CheckName validates TRAWL_ARCHIVE_DEDUP_INDEX. A brace would put every bucket under
// one hash tag (one Redis Cluster slot).
func CheckName(name string) error {
	if strings.ContainsAny(name, "{} \t\r\n") || len(name) > 128 {
		return fmt.Errorf("TRAWL_ARCHIVE_DEDUP_INDEX=%q: want up to 128 characters, no braces or white space", name)
	}
	return nil
}

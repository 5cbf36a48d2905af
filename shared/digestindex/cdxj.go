package digestindex

import (
	"context"
	"io"

	"github.com/trawl/trawl/shared/cdxj"
)

// LoadStats counts what Seed or Forget did with an index's lines.
type LoadStats struct {
	Captures int // lines of 200 responses with a SHA-1 digest: what the index holds
	Changed  int // entries added (Seed) or dropped (Forget)
	Skipped  int // revisits, other statuses, other digest algorithms
	Bad      int // lines that are no CDXJ
}

// loadBatch is how many captures one round trip adds or drops.
const loadBatch = 512

// Seed adds the 200 responses of a CDXJ index (the archiver's own, pywb's, Browsertrix's)
// to the index, so that a crawl sharing it writes revisits of payloads archived before.
// An entry already present is kept.
func (x *Index) Seed(ctx context.Context, r io.Reader) (LoadStats, error) {
	return x.load(ctx, r, x.Add)
}

// ForgetCDXJ drops the entries that refer to the captures of a CDXJ index, the index of a
// WARC file about to be deleted: later identical payloads are then archived in full
// rather than as revisits of a record that no longer exists. Revisits already written
// keep pointing at it.
func (x *Index) ForgetCDXJ(ctx context.Context, r io.Reader) (LoadStats, error) {
	return x.load(ctx, r, x.Forget)
}

func (x *Index) load(ctx context.Context, r io.Reader, apply func(context.Context, []string, []Original) (int, error)) (LoadStats, error) {
	var st LoadStats
	var digests []string
	var origs []Original
	flush := func() error {
		n, err := apply(ctx, digests, origs)
		st.Changed += n
		digests, origs = digests[:0], origs[:0]
		return err
	}
	err := cdxj.Each(ctx, r, func(l cdxj.Line) error {
		if l.Status != 200 || l.Mime == "warc/revisit" || l.URL == "" {
			st.Skipped++
			return nil
		}
		if _, _, err := x.slot(l.Digest); err != nil {
			st.Skipped++
			return nil
		}
		st.Captures++
		digests = append(digests, l.Digest)
		origs = append(origs, Original{URI: l.URL, Date: l.Date})
		if len(digests) < loadBatch {
			return nil
		}
		return flush()
	}, func(int, error) { st.Bad++ })
	if err == nil && len(digests) > 0 {
		err = flush()
	}
	return st, err
}

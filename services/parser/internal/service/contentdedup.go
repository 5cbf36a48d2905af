package service

import (
	"context"
	"fmt"

	"github.com/trawl/trawl/services/parser/internal/contentdup"
)

// contentIndex finds duplicate documents; *contentdup.Index keeps it in Redis.
type contentIndex interface {
	Check(ctx context.Context, pages []contentdup.Page) (contentdup.Result, error)
}

// markDuplicates checks every document of a batch against the index in one call, in batch
// order (so the earlier of two equal pages in one batch is the original), and records the
// verdicts on the outcomes. It returns how many bucket insertions were refused as full.
// On an error nothing is recorded: the batch is retried whole.
func (p *processor) markDuplicates(ctx context.Context, idx contentIndex, outs []*outcome) (int, error) {
	pages := make([]contentdup.Page, 0, len(outs))
	at := make([]int, 0, len(outs))
	for i, o := range outs {
		if o == nil {
			continue
		}
		if pg, ok := p.dupPage(o); ok {
			pages = append(pages, pg)
			at = append(at, i)
		}
	}
	if len(pages) == 0 {
		return 0, nil
	}
	res, err := idx.Check(ctx, pages)
	if err != nil {
		return 0, err
	}
	if len(res.Verdicts) != len(pages) {
		return 0, fmt.Errorf("parser: %d duplicate verdicts for %d pages", len(res.Verdicts), len(pages))
	}
	for j, v := range res.Verdicts {
		outs[at[j]].apply(v, pages[j].Near)
	}
	return res.FullBuckets, nil
}

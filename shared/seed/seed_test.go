package seed

import (
	"errors"
	"fmt"
	"testing"

	"github.com/trawl/trawl/shared/urlnorm"
)

func TestBatches(t *testing.T) {
	urls := make([]string, 0, 2500)
	for i := range 2500 {
		urls = append(urls, fmt.Sprintf("HTTP://Example.com:80/p/%d#x", i))
	}
	bs, err := Batches(urls, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 3 || len(bs[0].URLs) != BatchSize || len(bs[2].URLs) != 500 {
		t.Fatalf("got %d batches", len(bs))
	}
	if got := bs[0].URLs[7].URL; got != "http://example.com/p/7" {
		t.Fatalf("seed not normalised: %q", got)
	}
	if bs[0].URLs[0].Via != "seed" || bs[0].URLs[0].Depth != 0 {
		t.Fatalf("seed entry %+v", bs[0].URLs[0])
	}
}

func TestBatchesRejectsBadSeed(t *testing.T) {
	_, err := Batches([]string{"http://ok.example/", "mailto:x@example.com"}, 0)
	if !errors.Is(err, urlnorm.ErrScheme) {
		t.Fatalf("err = %v, want ErrScheme", err)
	}
}

// Package scrape reads samples from a Trawl process's /metrics, the one way the tests of
// every module and the devstack harness ask a running service what it counted. The
// exposition is parsed by Prometheus's own text parser (prometheus/common/expfmt), so a
// sample is found by its name and labels, not by the spelling of its line.
package scrape

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Selector names the samples to read: a metric and the labels they must carry.
type Selector struct {
	Name   string
	Labels map[string]string
}

// Parse reads a selector written as Prometheus writes a sample's series:
// `name` or `name{label="value",...}`. Label values may not hold a quote or a comma.
func Parse(sel string) (Selector, error) {
	name, rest, found := strings.Cut(sel, "{")
	s := Selector{Name: strings.TrimSpace(name)}
	if s.Name == "" {
		return Selector{}, fmt.Errorf("scrape: selector %q: no metric name", sel)
	}
	if !found {
		return s, nil
	}
	body, ok := strings.CutSuffix(strings.TrimSpace(rest), "}")
	if !ok {
		return Selector{}, fmt.Errorf("scrape: selector %q: no closing }", sel)
	}
	s.Labels = map[string]string{}
	for pair := range strings.SplitSeq(body, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		v = strings.TrimSpace(v)
		if !ok || len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
			return Selector{}, fmt.Errorf("scrape: selector %q: label %q is not name=\"value\"", sel, pair)
		}
		s.Labels[strings.TrimSpace(k)] = v[1 : len(v)-1]
	}
	return s, nil
}

// String writes s back as a selector, its labels in no set order.
func (s Selector) String() string {
	if len(s.Labels) == 0 {
		return s.Name
	}
	var b strings.Builder
	b.WriteString(s.Name + "{")
	sep := ""
	for k, v := range s.Labels {
		fmt.Fprintf(&b, `%s%s=%q`, sep, k, v)
		sep = ","
	}
	b.WriteString("}")
	return b.String()
}

// Families fetches and parses the /metrics of the process serving on addr (host:port).
func Families(ctx context.Context, addr string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape: %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape: %s/metrics: %s", addr, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape: %s/metrics: %w", addr, err)
	}
	return fams, nil
}

// Sum is the sum of the samples sel selects from fams: those of its metric whose labels
// include sel's (every shard's, every result's when sel names none). A histogram's or a
// summary's `_count` and `_sum` are selected by those names. found is false when no
// sample matched: a labelled counter is not exported before its first increment.
func Sum(fams map[string]*dto.MetricFamily, sel Selector) (value float64, found bool) {
	name, part := sel.Name, ""
	fam := fams[name]
	if fam == nil {
		for _, suffix := range []string{"_count", "_sum"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && fams[base] != nil {
				fam, part = fams[base], suffix
			}
		}
	}
	if fam == nil {
		return 0, false
	}
	for _, m := range fam.GetMetric() {
		if !hasLabels(m, sel.Labels) {
			continue
		}
		v, ok := sample(m, part)
		if !ok {
			continue
		}
		value += v
		found = true
	}
	return value, found
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

func sample(m *dto.Metric, part string) (float64, bool) {
	switch {
	case m.Counter != nil && part == "":
		return m.Counter.GetValue(), true
	case m.Gauge != nil && part == "":
		return m.Gauge.GetValue(), true
	case m.Untyped != nil && part == "":
		return m.Untyped.GetValue(), true
	case m.Histogram != nil && part == "_count":
		return float64(m.Histogram.GetSampleCount()), true
	case m.Histogram != nil && part == "_sum":
		return m.Histogram.GetSampleSum(), true
	case m.Summary != nil && part == "_count":
		return float64(m.Summary.GetSampleCount()), true
	case m.Summary != nil && part == "_sum":
		return m.Summary.GetSampleSum(), true
	}
	return 0, false
}

// Read scrapes addr once and sums the samples sel selects (see Sum).
func Read(ctx context.Context, addr, sel string) (value float64, found bool, err error) {
	s, err := Parse(sel)
	if err != nil {
		return 0, false, err
	}
	fams, err := Families(ctx, addr)
	if err != nil {
		return 0, false, err
	}
	value, found = Sum(fams, s)
	return value, found, nil
}

// readTimeout bounds one scrape of a test: a process that does not answer fails the test
// with its address, not at the binary's deadline.
const readTimeout = 10 * time.Second

// Value is Read for a test: the selected samples' sum, 0 when none is exported yet; a
// failed scrape or a malformed selector fails the test.
func Value(t testing.TB, addr, sel string) float64 {
	t.Helper()
	v, _ := readT(t, addr, sel)
	return v
}

// Exported is Value for a sample that must already be exported: its absence fails the
// test, so that a renamed metric is not read as a zero.
func Exported(t testing.TB, addr, sel string) float64 {
	t.Helper()
	v, found := readT(t, addr, sel)
	if !found {
		t.Fatalf("scrape: %s/metrics exports no %s", addr, sel)
	}
	return v
}

func readT(t testing.TB, addr, sel string) (float64, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	v, found, err := Read(ctx, addr, sel)
	if err != nil {
		t.Fatal(err)
	}
	return v, found
}

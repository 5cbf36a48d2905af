// Package metricsdoc holds docs/metrics.md to the series the code declares: each
// service's test declares its metrics through obs.Metrics and asks Diff for what the
// document lacks, has in excess, or says otherwise.
package metricsdoc

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trawl/trawl/shared/obs"
)

// Diff compares the rows of the metrics document at path whose names start with prefix
// ("trawl_fetcher_") with decls, the series declared under that prefix. Each difference
// is one line, saying what to change in the document (with the row to paste).
func Diff(path, prefix string, decls []obs.Decl) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("metricsdoc: %w", err)
	}
	defer f.Close()
	rows := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, ok := rowName(line)
		if !ok || !strings.HasPrefix(name, prefix) {
			continue
		}
		rows[name] = line
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("metricsdoc: %w", err)
	}
	var out []string
	declared := map[string]bool{}
	for _, d := range decls {
		if !strings.HasPrefix(d.Name, prefix) {
			continue
		}
		declared[d.Name] = true
		if err := CheckName(d); err != nil {
			out = append(out, err.Error())
		}
		want := d.Row()
		switch have, ok := rows[d.Name]; {
		case !ok:
			out = append(out, fmt.Sprintf("%s: %s is served but not documented; add:\n%s", path, d.Name, want))
		case have != want:
			out = append(out, fmt.Sprintf("%s: %s is documented otherwise than declared; have:\n%s\nwant:\n%s", path, d.Name, have, want))
		}
	}
	for name := range rows {
		if !declared[name] {
			out = append(out, fmt.Sprintf("%s: %s is documented but no longer served; remove its row", path, name))
		}
	}
	return out, nil
}

// rowName is the metric a table row describes: "| `trawl_x_total` | …".
func rowName(line string) (string, bool) {
	rest, ok := strings.CutPrefix(line, "| `trawl_")
	if !ok {
		return "", false
	}
	name, _, ok := strings.Cut(rest, "`")
	return "trawl_" + name, ok
}

// CheckName holds a series to the naming rule trawl_<service>_<what>_<unit>: a counter
// ends in _total, a gauge does not, a histogram ends in its unit (_seconds, _bytes) or is
// a _size.
func CheckName(d obs.Decl) error {
	ok := true
	switch d.Type {
	case "counter":
		ok = strings.HasSuffix(d.Name, "_total")
	case "gauge":
		ok = !strings.HasSuffix(d.Name, "_total")
	case "histogram":
		ok = strings.HasSuffix(d.Name, "_seconds") || strings.HasSuffix(d.Name, "_bytes") || strings.HasSuffix(d.Name, "_size")
	}
	if !ok {
		return fmt.Errorf("%s: a %s's name breaks the rule (counters end in _total, gauges do not, histograms end in _seconds, _bytes or _size)", d.Name, d.Type)
	}
	return nil
}

// Test is a service's metrics test: declare declares the service's series under
// subsystem, and the document at path must list exactly those whose names start with
// "trawl_<subsystem>_", each as declared and named by the rule.
func Test(t testing.TB, path, subsystem string, declare func(*obs.Metrics)) {
	t.Helper()
	om := obs.NewMetrics(prometheus.NewRegistry(), subsystem)
	declare(om)
	if len(om.Declared()) == 0 {
		t.Fatal("no series declared")
	}
	diffs, err := Diff(path, "trawl_"+subsystem+"_", om.Declared())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Error(d)
	}
}

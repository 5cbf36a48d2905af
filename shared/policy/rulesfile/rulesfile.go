// Package rulesfile reads rules files: the rules an operator keeps in version control and applies with
// `trawlctl policy apply -f rules.yaml`. A file is a YAML list of rules, each a mapping
// with `scope:` and the fields under their JSON names (durations as "1.5s", crawl_delay as
// "exact" or a cap):
//
//   - scope: domain:example.com
//     min_delay: 2s
//     connections: 2
//   - scope: https://example.com/private/
//     block: true
//     note: owner asked, ticket 4711
//
// Each rule's Source is "<file name>:<line>" (the base name, so the same file applied
// from another directory is the same source). It is a package of its own so that the
// services, which read rules only from the store, do not carry a YAML parser.
package rulesfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/trawl/trawl/shared/policy"
)

// Parse reads a rules file into one change per rule. Errors give the file and line.
func Parse(name string, data []byte) ([]policy.Change, error) {
	base := filepath.Base(name)
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("policy: %s: %w", base, err)
	}
	if doc.Kind == 0 {
		return nil, nil // an empty file: no rules
	}
	list := doc.Content[0]
	if list.Kind == yaml.ScalarNode && list.Tag == "!!null" {
		return nil, nil
	}
	if list.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("policy: %s:%d: want a list of rules (\"- scope: ...\")", base, list.Line)
	}
	var (
		out  []policy.Change
		errs []error
		line = map[policy.Scope]int{}
	)
	for _, n := range list.Content {
		src := fmt.Sprintf("%s:%d", base, n.Line)
		r, err := decodeRuleNode(n)
		if err != nil {
			errs = append(errs, fmt.Errorf("policy: %s: %w", src, err))
			continue
		}
		if l, dup := line[r.Scope]; dup {
			errs = append(errs, fmt.Errorf("policy: %s: %s is already set at line %d (one rule per scope)", src, r.Scope, l))
			continue
		}
		line[r.Scope] = n.Line
		if _, err := policy.Compile([]policy.Stored{{Rule: r}}, 0); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", src, err))
			continue
		}
		out = append(out, policy.Change{Rule: r, Source: src})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// decodeRuleNode reads one rule: its fields go through the same JSON decoding as the
// store's, so the file and the store know the same names and forms.
func decodeRuleNode(n *yaml.Node) (policy.Rule, error) {
	if n.Kind != yaml.MappingNode {
		return policy.Rule{}, errors.New("a rule is a mapping with scope: and its fields")
	}
	var m map[string]any
	if err := n.Decode(&m); err != nil {
		return policy.Rule{}, err
	}
	raw, _ := m["scope"].(string)
	if raw == "" {
		return policy.Rule{}, errors.New("a rule without scope:")
	}
	delete(m, "scope")
	sc, err := policy.ParseScope(raw)
	if err != nil {
		return policy.Rule{}, err
	}
	js, err := json.Marshal(m)
	if err != nil {
		return policy.Rule{}, fmt.Errorf("%s: %w", sc, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var r policy.Rule
	if err := dec.Decode(&r); err != nil {
		return policy.Rule{}, fmt.Errorf("%s: %s", sc, strings.TrimPrefix(err.Error(), "json: "))
	}
	r.Scope = sc
	return r, nil
}

// SourceFile is the file name of a rule's source ("rules.yaml" of "rules.yaml:12"), ""
// for a rule set by hand.
func SourceFile(source string) string {
	if i := strings.LastIndexByte(source, ':'); i >= 0 {
		return source[:i]
	}
	return source
}

// FileChanges are the changes that make cur agree with a rules file: every rule of the
// file, and the removal of each rule that came from the same file name and is no longer
// in it. Rules set by hand (trawlctl policy set) or from another file are kept, unless
// prune: then every rule not in the file is removed.
func FileChanges(cur *policy.Set, name string, file []policy.Change, prune bool) []policy.Change {
	base := filepath.Base(name)
	in := make(map[policy.Scope]bool, len(file))
	out := append([]policy.Change(nil), file...)
	for _, c := range file {
		in[c.Rule.Scope] = true
	}
	for _, st := range cur.Rules() {
		if in[st.Scope] {
			continue
		}
		if prune || SourceFile(st.Origin.Source) == base {
			out = append(out, policy.Change{Remove: true, Rule: policy.Rule{Scope: st.Scope}})
		}
	}
	return out
}

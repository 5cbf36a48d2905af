package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLuaSpellsNoHostField: the scripts that read or write a host's state hash (the
// frontier's and the politeness claims') take its field names from Go
// (politeness.HostNames, from frontierkeys.Host*), so a field renamed in Go cannot leave a
// script reading the old one.
func TestLuaSpellsNoHostField(t *testing.T) {
	forbidInFiles(t, ".lua", regexp.MustCompile(`(hk\([^)]*\)|hkey|K_HOST),\s*'`), "",
		"spells a host-hash field; use its HF name (HF.NEXT …; politeness.HostNames)")
}

// TestFrontierLuaReadsNoPosition: the frontier's scripts read the common KEYS and ARGV
// through the locals Go declares from its layout tables (frontier.go: shardKeys, callArgs,
// confArgs), and their own arguments from ARGV[A] on, so a position is written once.
func TestFrontierLuaReadsNoPosition(t *testing.T) {
	dir := filepath.Join(repoRoot, "services", "scheduler", "internal", "frontier", "lua")
	files, err := filepath.Glob(filepath.Join(dir, "*.lua"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no frontier scripts in %s (%v)", dir, err)
	}
	literal := regexp.MustCompile(`(ARGV|KEYS)\[\s*\d+\s*\]`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, loc := range literal.FindAllIndex(b, -1) {
			line := 1 + strings.Count(string(b[:loc[0]]), "\n")
			t.Errorf("%s:%d: reads %s by position; use the layout's local (or ARGV[A + n] for the script's own)", f, line, b[loc[0]:loc[1]])
		}
	}
}

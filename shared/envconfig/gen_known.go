//go:build ignore

// gen_known writes shared/envconfig's known_gen.go, the names envconfig.Known
// knows, from the settings reference: `go generate ./shared/envconfig` runs it as
// `go run gen_known.go <repository root> <output file>`.
package main

import (
	"fmt"
	"os"

	"github.com/trawl/trawl/shared/envconfig/envdoc"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: go run gen_known.go <repository root> <output file>")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "gen_known:", err)
		os.Exit(1)
	}
}

func run(root, out string) error {
	doc, err := envdoc.Read(root)
	if err != nil {
		return err
	}
	src, err := doc.KnownSource()
	if err != nil {
		return fmt.Errorf("format: %w", err)
	}
	if err := os.WriteFile(out, src, 0o644); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// Command trawl-fuzz runs every fuzz target of the tree it is started in (found by
// devstack/fuzztargets), one after another, each for -fuzztime: `make fuzz`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/trawl/trawl/devstack/fuzztargets"
)

func main() {
	fuzztime := flag.String("fuzztime", "30s", "how long each target runs (go test -fuzztime)")
	list := flag.Bool("list", false, "list the targets and exit")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	targets, err := fuzztargets.Find(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "trawl-fuzz:", err)
		os.Exit(2)
	}
	if len(targets) == 0 {
		fmt.Fprintln(os.Stderr, "trawl-fuzz: no fuzz target found under", must(os.Getwd()))
		os.Exit(2)
	}
	for i, tg := range targets {
		if *list {
			fmt.Printf("%s %s\n", tg.Dir, tg.Name)
			continue
		}
		fmt.Fprintf(os.Stderr, "trawl-fuzz: [%d/%d] %s %s for %s\n", i+1, len(targets), tg.Dir, tg.Name, *fuzztime)
		cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-fuzz", "^"+tg.Name+"$", "-fuzztime", *fuzztime, tg.Dir)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "trawl-fuzz: %s %s: %v\n", tg.Dir, tg.Name, err)
			os.Exit(1)
		}
	}
}

func must(s string, err error) string {
	if err != nil {
		return "."
	}
	return s
}

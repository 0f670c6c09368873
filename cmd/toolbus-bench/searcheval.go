package main

import (
	"encoding/json"
	"flag"
	"fmt"

	"github.com/toolbus/toolbus/internal/dev/searcheval"
	"github.com/toolbus/toolbus/pkg/search"
)

// runSearchEval measures discovery on a tool-retrieval corpus (tools.jsonl
// and queries.jsonl) and prints one JSON line with recall, MRR, nDCG and
// timings. With --usage it first measures without learning, then replays
// a query file as usage and reports what learning changed; with
// --add-tools the catalog also holds another corpus's tools, so that one
// corpus's queries can be replayed and the other's evaluated.
func runSearchEval(args []string) error {
	fs := flag.NewFlagSet("toolbus-bench search-eval", flag.ContinueOnError)
	corpus := fs.String("corpus", "", "directory with tools.jsonl and queries.jsonl")
	addTools := fs.String("add-tools", "", "also index the tools of the corpus in this directory (its tools.jsonl), as one catalog; its queries are not evaluated")
	usage := fs.String("usage", "", "replay this file's queries (queries.jsonl format) as agents' usage before evaluating; one agent per category")
	evalPart := fs.String("eval-part", "", "evaluate only part of the corpus's queries, split by a hash of their IDs: a or b (a half), k/n (the k-th of n folds) or not-k/n (the other folds)")
	usagePart := fs.String("usage-part", "", "replay only part of the usage file's queries: a, b, k/n or not-k/n")
	folds := fs.Int("folds", 0, "cross-validate: split the corpus's queries into this many folds and evaluate each after replaying the usage file's queries outside it (with --usage; prints the figures pooled over the folds)")
	page := fs.Int("usage-page", 10, "page size of the replayed searches")
	if err := parse(fs, args); err != nil {
		return err
	}
	usageLine := func(why string) error {
		fmt.Fprintf(fs.Output(), "toolbus-bench search-eval: %s\nusage: toolbus-bench search-eval --corpus DIR [--add-tools DIR] [--eval-part PART] [--usage FILE [--usage-part PART | --folds N] [--usage-page N]]\n", why)
		return exitError(2)
	}
	if *corpus == "" {
		return usageLine("--corpus is required")
	}
	ep, err := searcheval.ParsePart(*evalPart)
	if err != nil {
		return usageLine("--eval-part: " + err.Error())
	}
	up, err := searcheval.ParsePart(*usagePart)
	if err != nil {
		return usageLine("--usage-part: " + err.Error())
	}
	if *usage == "" && (up != searcheval.PartAll || flagSet(fs, "usage-page")) {
		return usageLine("--usage-part and --usage-page go with --usage")
	}
	if *folds != 0 && (*usage == "" || ep != searcheval.PartAll || up != searcheval.PartAll || *folds < 2) {
		return usageLine("--folds N (at least 2) goes with --usage, and without --eval-part or --usage-part")
	}
	if *page < 1 || *page > search.MaxPageSize {
		return usageLine(fmt.Sprintf("--usage-page %d is out of range 1..%d", *page, search.MaxPageSize))
	}
	var also []string
	if *addTools != "" {
		also = append(also, *addTools)
	}
	c, err := searcheval.Load(*corpus, also...)
	if err != nil {
		return err
	}
	c.Select(ep)
	var report any
	switch {
	case *folds != 0:
		report, err = c.EvaluateFolds(search.DefaultConfig(), *folds, searcheval.UsageOptions{File: *usage, Page: *page})
	case *usage == "":
		report, err = c.Evaluate(search.DefaultConfig())
	default:
		report, err = c.EvaluateWithUsage(search.DefaultConfig(), searcheval.UsageOptions{File: *usage, Part: up, Page: *page})
	}
	if err != nil {
		return err
	}
	out, err := json.Marshal(report)
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}

// flagSet tells whether the command line set the flag.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

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
	evalPart := fs.String("eval-part", "", "evaluate only half of the corpus's queries: a or b (split by a hash of their IDs)")
	usagePart := fs.String("usage-part", "", "replay only half of the usage file's queries: a or b")
	page := fs.Int("usage-page", 10, "page size of the replayed searches")
	if err := parse(fs, args); err != nil {
		return err
	}
	usageLine := func(why string) error {
		fmt.Fprintf(fs.Output(), "toolbus-bench search-eval: %s\nusage: toolbus-bench search-eval --corpus DIR [--add-tools DIR] [--eval-part a|b] [--usage FILE [--usage-part a|b] [--usage-page N]]\n", why)
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
	var report searcheval.Report
	if *usage == "" {
		report, err = c.Evaluate(search.DefaultConfig())
	} else {
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

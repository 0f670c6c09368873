package main

import (
	"encoding/json"
	"flag"
	"fmt"

	"github.com/toolbus/toolbus/internal/searcheval"
)

// runSearchEval measures discovery on a tool-retrieval corpus (tools.jsonl
// and queries.jsonl) and prints one JSON line with recall, MRR, nDCG and timings.
func runSearchEval(args []string) error {
	fs := flag.NewFlagSet("toolbus-bench search-eval", flag.ContinueOnError)
	corpus := fs.String("corpus", "", "directory with tools.jsonl and queries.jsonl")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *corpus == "" {
		fmt.Fprintln(fs.Output(), "usage: toolbus-bench search-eval --corpus DIR")
		return exitError(2)
	}
	report, err := searcheval.Run(*corpus)
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

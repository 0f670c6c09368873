package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/toolbus/toolbus/internal/searcheval"
)

// runSearchEval measures discovery on a tool-retrieval corpus (tools.jsonl
// and queries.jsonl) and prints one JSON line with recall, MRR, nDCG and timings.
func runSearchEval(_ context.Context, args []string) error {
	fs := newFlags("search-eval")
	corpus := fs.String("corpus", "", "directory with tools.jsonl and queries.jsonl")
	if _, err := parseInterleaved(fs, args); err != nil {
		return exitError(2)
	}
	if *corpus == "" {
		fmt.Fprintln(os.Stderr, "usage: toolbus search-eval --corpus DIR")
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

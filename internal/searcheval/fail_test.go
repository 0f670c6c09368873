package searcheval

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/toolbus/toolbus/pkg/search"
)

func TestFailures(t *testing.T) {
	root := os.Getenv("TUNE_CORPORA")
	name := os.Getenv("TUNE_CORPUS")
	if root == "" || name == "" {
		t.Skip()
	}
	c, err := Load(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	ix, _ := search.Build(search.DefaultConfig(), c.Tools)
	n := 0
	for i, q := range c.Queries {
		if i%7 != 0 {
			continue
		}
		res, _ := ix.Search(search.Query{Text: q.Text, PageSize: 50})
		var ranked []string
		for _, h := range res.Hits {
			ranked = append(ranked, h.Tool.String())
		}
		g := c.groups(ranked)
		rel := c.groupsOf(q.Relevant)
		if c.lenient == false {
			g = c.corpusNames(ranked)
			rel = q.Relevant
		}
		pos := -1
		for i, x := range g {
			if slices.Contains(rel, x) {
				pos = i
				break
			}
		}
		if pos >= 0 && pos < 5 {
			continue
		}
		n++
		if n > 40 {
			break
		}
		fmt.Printf("Q: %s\n  rel=%v pos=%d tokens=%v\n  top=%v\n", q.Text, rel, pos, search.Tokenize(q.Text), g[:min(5, len(g))])
	}
}

package searcheval

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/toolbus/toolbus/pkg/search"
)

type variant struct {
	name  string
	setup func(*search.Config)
	undo  func()
	tools func(c *Corpus) *Corpus
}

func TestTune(t *testing.T) {
	root := os.Getenv("TUNE_CORPORA")
	if root == "" {
		t.Skip()
	}
	corpora := map[string]*Corpus{}
	for _, name := range []string{"bfcl-dev", "metatool"} {
		c, err := Load(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		corpora[name] = c
	}
	for _, v := range tuneVariants() {
		cfg := search.DefaultConfig()
		if v.setup != nil {
			v.setup(&cfg)
		}
		line := fmt.Sprintf("%-28s", v.name)
		for _, name := range []string{"bfcl-dev", "metatool"} {
			c := corpora[name]
			if v.tools != nil {
				c = v.tools(c)
			}
			r, err := c.Evaluate(cfg)
			if err != nil {
				t.Fatal(err)
			}
			line += fmt.Sprintf(" | %s R@1 %.3f R@5 %.3f R@10 %.3f MRR %.3f", name[:4], r.RecallAt1, r.RecallAt5, r.RecallAt10, r.MRRAt10)
		}
		fmt.Println(line)
		if v.undo != nil {
			v.undo()
		}
	}
}

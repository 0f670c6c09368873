package searcheval

import (
	"fmt"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

func mapTools(fn func(d *messages.ToolDefinition)) func(c *Corpus) *Corpus {
	return func(c *Corpus) *Corpus {
		cc := *c
		cc.Tools = append([]messages.ToolDefinition(nil), c.Tools...)
		for i := range cc.Tools {
			fn(&cc.Tools[i])
		}
		return &cc
	}
}

func tuneVariants() []variant {
	vs := []variant{{name: "default"}}
	for _, dw := range []float64{1, 1.5} {
		for _, pw := range []float64{0.35, 0.5} {
			for _, k1 := range []float64{1.2, 1.5, 2} {
				for _, delta := range []float64{0, 0.5} {
					dw, pw, k1, delta := dw, pw, k1, delta
					vs = append(vs, variant{name: fmt.Sprintf("d%.1f p%.2f k%.1f D%.1f", dw, pw, k1, delta), setup: func(c *search.Config) {
						c.Fields[search.FieldDescription].Weight = dw
						c.Fields[search.FieldParamDescription].Weight = pw
						c.K1 = k1
						c.Delta = delta
					}})
				}
			}
		}
	}
	return vs
}

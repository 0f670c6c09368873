package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/toolbus/toolbus/pkg/messages"
)

// listFlag collects a repeated flag, each value possibly a comma-separated list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, one := range strings.Split(v, ",") {
		if one = strings.TrimSpace(one); one != "" {
			*l = append(*l, one)
		}
	}
	return nil
}

// runSearch is toolbus search: discovery from the command line, the tools
// the agent (--agent) may use that best match the query, with their scores.
func runSearch(ctx context.Context, g globals, args []string) error {
	fs := newFlags("search")
	var namespaces, tags listFlag
	fs.Var(&namespaces, "namespace", "only tools of this namespace (repeat, or separate with commas)")
	fs.Var(&tags, "tag", "only tools with at least one of these tags (repeat, or separate with commas)")
	limit := fs.Int("limit", 10, "results per page, at most 100")
	page := fs.Int("page", 0, "the page of results, from 0")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return flagsFailed(err)
	}
	query := strings.Join(pos, " ")
	if strings.TrimSpace(query) == "" {
		return usageError("toolbus search needs a query: say in a few words what the tool should do (toolbus tools lists them all)")
	}
	if *limit < 1 || *limit > 100 || *page < 0 {
		return usageError(fmt.Sprintf("--limit is 1 to 100 and --page 0 or more; got %d and %d", *limit, *page))
	}
	nc, c, err := g.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	reply, err := c.Discover(ctx, messages.DiscoverRequest{Query: query, Namespaces: namespaces, Tags: tags, Page: *page, PageSize: *limit})
	if err != nil {
		return err
	}
	if g.json {
		return printJSON(reply)
	}
	writeSearch(os.Stdout, query, reply)
	return nil
}

// writeSearch prints a page of discovery as a table, best first: the
// score (exact when the query named the tool), the name and the
// description's first line.
func writeSearch(w io.Writer, query string, reply *messages.DiscoverReply) {
	if len(reply.Hits) == 0 {
		fmt.Fprintf(w, "no tools match %q\n", printable(query))
		return
	}
	descriptions := make(map[string]string, len(reply.Tools))
	for _, t := range reply.Tools {
		descriptions[t.Name] = t.Description
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCORE\tTOOL\tDESCRIPTION")
	for _, h := range reply.Hits {
		score := fmt.Sprintf("%.2f", h.Score)
		if h.Exact {
			score = "exact"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", score, printable(h.Name), cell(descriptions[h.Name], descriptionWidth))
	}
	_ = tw.Flush()
	if reply.More {
		fmt.Fprintf(w, "next page: --page %d\n", reply.Page+1)
	}
}

// descriptionWidth is how many characters of a description a table shows.
const descriptionWidth = 60

// cell is text as one cell of a table: its first line, with control
// characters as ?, cut to width characters with … when longer.
func cell(text string, width int) string {
	text = printable(strings.TrimSpace(firstLine(text)))
	if utf8.RuneCountInString(text) <= width {
		return text
	}
	runes := []rune(text)
	return strings.TrimRight(string(runes[:width-1]), " ") + "…"
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/toolbus/toolbus/pkg/messages"
)

// runAudit is toolbus audit: a page of the audit log, newest record first.
func runAudit(ctx context.Context, g globals, args []string) error {
	fs := newFlags("audit")
	var req messages.AuditListRequest
	var since, until timeFlag
	fs.StringVar(&req.Decision, "decision", "", "only the records of this decision: "+strings.Join(messages.AuditDecisions, ", "))
	fs.StringVar(&req.Agent, "agent", "", "only the records of this agent")
	fs.StringVar(&req.Tool, "tool", "", "only the records of this tool")
	fs.Var(&since, "since", "only the records stored since this time: RFC 3339, or a duration before now (1h)")
	fs.Var(&until, "until", "only the records stored before this time: RFC 3339, or a duration before now")
	fs.IntVar(&req.Limit, "limit", 0, fmt.Sprintf("records in the page (default %d, at most %d)", messages.DefaultAuditListLimit, messages.MaxAuditListLimit))
	fs.StringVar(&req.Cursor, "cursor", "", "continue where the previous page ended (the cursor it printed)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return flagsFailed(err)
	}
	if len(pos) > 0 {
		fmt.Fprintln(os.Stderr, "usage: toolbus audit [--decision D] [--agent A] [--tool T] [--since T] [--until T] [--limit N] [--cursor C]")
		return exitError(2)
	}
	req.Since, req.Until = since.t, until.t
	nc, c, err := g.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	reply, err := c.Operator().ListAudit(ctx, req)
	if err != nil {
		return forOperators(err)
	}
	if g.json {
		return printJSON(reply)
	}
	writeAuditList(os.Stdout, reply)
	return nil
}

// writeAuditList prints a page of the audit log as a table, and the
// cursor of the next page.
func writeAuditList(w io.Writer, reply *messages.AuditListReply) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tDECISION\tTOOL\tAGENT\tCALL\tBY\tRULE\tREASON")
	for _, r := range reply.Records {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			r.Time.Local().Format("2006-01-02 15:04:05.000"), printable(r.Decision), dash(printable(r.Tool)), dash(printable(r.Agent)),
			dash(printable(r.CallID)), dash(printable(r.By)), dash(printable(r.RuleID)), dash(printable(r.Reason)))
	}
	_ = tw.Flush()
	if len(reply.Records) == 0 {
		fmt.Fprintln(w, "no records")
	}
	if reply.NextCursor != "" {
		fmt.Fprintf(w, "next page: --cursor %s\n", reply.NextCursor)
	}
}

// runWorkers is toolbus workers: the live workers and their slots.
func runWorkers(ctx context.Context, g globals, args []string) error {
	fs := newFlags("workers")
	ns := fs.String("namespace", "", "only the workers of this namespace")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return flagsFailed(err)
	}
	if len(pos) > 0 {
		fmt.Fprintln(os.Stderr, "usage: toolbus workers [--namespace N]")
		return exitError(2)
	}
	nc, c, err := g.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	reply, err := c.Operator().ListWorkers(ctx, *ns)
	if err != nil {
		return forOperators(err)
	}
	if g.json {
		return printJSON(reply)
	}
	writeWorkersList(os.Stdout, reply, time.Now())
	return nil
}

// writeWorkersList prints the live workers as a table, one line per
// worker and namespace, with the sources each cannot serve now.
func writeWorkersList(w io.Writer, reply *messages.WorkersListReply, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tWORKER\tBUSY\tSLOTS\tVERSION\tHEARTBEAT\tDOWN")
	for _, hb := range reply.Workers {
		down := make([]string, 0, len(hb.Down))
		for _, d := range hb.Down {
			down = append(down, printable(d.Source)+" ("+printable(d.Reason)+")")
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s ago\t%s\n",
			printable(hb.Namespace), printable(hb.WorkerID), hb.Busy, hb.Slots, dash(printable(hb.Version)),
			max(now.Sub(hb.Time), 0).Round(time.Second), dash(strings.Join(down, ", ")))
	}
	_ = tw.Flush()
	if len(reply.Workers) == 0 {
		fmt.Fprintln(w, "no live workers")
	}
	if reply.Truncated {
		fmt.Fprintf(w, "more workers are alive: these are the first %d\n", messages.MaxWorkersListed)
	}
}

// forOperators says, of a request refused with forbidden, that it is
// for operators' users.
func forOperators(err error) error {
	if errors.Is(err, messages.ErrForbidden) {
		return fmt.Errorf("%w (connect as an operator's user, with --user or --creds; docs/security.md)", err)
	}
	return err
}

// printable is s on one line, with control characters (a terminal's
// escape sequences, tabs that would break the table) shown as '?': what
// agents, tools and workers wrote is printed as text, never interpreted.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return '?'
		}
		return r
	}, s)
}

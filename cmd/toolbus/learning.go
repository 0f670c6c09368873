package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
)

const learningUsage = "usage: toolbus learning [status [TOOL]] | off --reason R | on | reset TOOL | reset --all"

// runLearning is toolbus learning: what discovery learned from use, and
// the operators' hold on it.
func runLearning(ctx context.Context, g globals, args []string) error {
	fs := newFlags("learning")
	reason := fs.String("reason", "", "off: why learning is switched off (required)")
	all := fs.Bool("all", false, "reset: delete the evidence for every tool")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return flagsFailed(err)
	}
	action := "status"
	if len(pos) > 0 {
		action, pos = pos[0], pos[1:]
	}
	switch {
	case action == "status" && len(pos) <= 1,
		(action == "on" || action == "off") && len(pos) == 0,
		action == "reset" && (len(pos) == 1) != *all:
	default:
		switch action {
		case "disable", "enable", "stop", "start":
			fmt.Fprintf(os.Stderr, "toolbus learning: unknown action %q: learning is switched with off and on\n", action)
		case "status", "on", "off", "reset":
			fmt.Fprintf(os.Stderr, "toolbus learning %s: wrong arguments\n", action)
		default:
			fmt.Fprintf(os.Stderr, "toolbus learning: unknown action %q (status, off, on or reset)\n", action)
		}
		fmt.Fprintln(os.Stderr, learningUsage)
		return exitError(exitUsage)
	}
	if *all && action != "reset" || *reason != "" && action != "off" {
		return usageError("--all goes with reset, --reason with off")
	}
	if action == "off" && strings.TrimSpace(*reason) == "" {
		return usageError("toolbus learning off needs --reason R: say why discovery stops learning from use")
	}
	nc, c, err := g.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	switch action {
	case "status":
		tool := ""
		if len(pos) == 1 {
			tool = pos[0]
		}
		st, err := c.Operator().LearningStatus(ctx, tool)
		if err != nil {
			return commandLineRefused(err)
		}
		if g.json {
			return printJSON(st)
		}
		writeLearning(os.Stdout, st)
		return nil
	case "on", "off":
		st, err := c.Operator().SetLearning(ctx, action == "on", *reason)
		if err != nil {
			return err
		}
		if g.json {
			return printJSON(st)
		}
		writeLearning(os.Stdout, st)
		return nil
	}
	tool := ""
	if len(pos) == 1 {
		tool = pos[0]
	}
	reply, err := c.Operator().ResetLearning(ctx, tool)
	if err != nil {
		return commandLineRefused(err)
	}
	if g.json {
		return printJSON(reply)
	}
	what := "every tool"
	if tool != "" {
		what = tool
	}
	fmt.Printf("deleted %d records of evidence for %s\n", reply.Deleted, printable(what))
	return nil
}

// writeLearning prints the state of learning, and what was learned of a
// tool, for a terminal.
func writeLearning(w io.Writer, st *messages.LearningStatus) {
	switch {
	case !st.Enabled:
		// Without identities, a client that names no agent switches it off
		// as no one.
		by := ""
		if st.By != "" {
			by = ", by " + printable(st.By)
		}
		fmt.Fprintf(w, "learning from use: off since %s%s: %s\n", st.ChangedAt.Local().Format(time.DateTime), by, printable(st.Reason))
	case !st.Recording:
		fmt.Fprintln(w, "learning from use: on, but this coordinator records nothing (--no-learning)")
	default:
		fmt.Fprintln(w, "learning from use: on")
	}
	fmt.Fprintf(w, "evidence: %d records for %d tools, each kept %s after its last use; a turn's searches %s\n",
		st.Records, st.Tools, time.Duration(st.RetentionMS)*time.Millisecond, time.Duration(st.TurnWindowMS)*time.Millisecond)
	if t := st.Tool; t != nil {
		fmt.Fprintf(w, "%s: evidence of %d agents (%d users), %.1f turns", printable(t.Tool), t.Agents, t.Users, t.Turns)
		if !t.LastAt.IsZero() {
			fmt.Fprintf(w, ", last %s", t.LastAt.Local().Format(time.DateTime))
		}
		fmt.Fprintln(w)
		if len(t.Learned) == 0 {
			fmt.Fprintln(w, "learned: nothing")
			return
		}
		terms := make([]string, len(t.Learned))
		for i, lt := range t.Learned {
			terms[i] = fmt.Sprintf("%s×%d", printable(lt.Term), lt.Count)
		}
		fmt.Fprintf(w, "learned: %s\n", strings.Join(terms, " "))
	}
}

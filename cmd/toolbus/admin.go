package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
)

const approvalsUsage = "usage: toolbus approvals list [--state S] | approve ID [--remember call|turn|agent_tool] [--reason R] [--by NAME] | deny ID [--reason R] [--by NAME] | answer ID --approve|--deny [--remember call|turn|agent_tool] [--reason R] [--by NAME]"

func runApprovals(ctx context.Context, g globals, args []string) error {
	fs := newFlags("approvals")
	state := fs.String("state", "pending", "list: pending, approved, denied, expired or all")
	reason := fs.String("reason", "", "approve/deny/answer: why")
	by := fs.String("by", os.Getenv("USER"), "approve/deny/answer: who decides")
	remember := fs.String("remember", messages.RememberCall, "approve, answer --approve: call, turn or agent_tool")
	approve := fs.Bool("approve", false, "answer: the user approves")
	deny := fs.Bool("deny", false, "answer: the user denies")
	pos, err := parseInterleaved(fs, args)
	if err != nil || len(pos) == 0 {
		fmt.Fprintln(os.Stderr, approvalsUsage)
		return exitError(2)
	}
	if pos[0] == "answer" && (len(pos) != 2 || *approve == *deny) {
		fmt.Fprintln(os.Stderr, "usage: toolbus approvals answer ID --approve|--deny [--remember call|turn|agent_tool] [--reason R] [--by NAME]")
		return exitError(2)
	}
	if pos[0] != "answer" && (*approve || *deny) {
		return usageError("--approve and --deny go with approvals answer; operators decide with approvals approve|deny ID")
	}
	nc, c, err := g.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	switch pos[0] {
	case "list":
		reply, err := c.ListApprovals(ctx, messages.ListApprovalsRequest{State: *state})
		if err != nil {
			return err
		}
		if g.json {
			return printJSON(reply)
		}
		for _, a := range reply.Approvals {
			fmt.Printf("%s  %-24s agent=%s turn=%s mode=%s state=%s expires=%s\n    %s %s\n",
				a.ApprovalID, a.Tool, a.Agent, a.Turn, a.Mode, a.State, a.ExpiresAt.Local().Format(time.DateTime), printable(a.Reason), printable(string(a.Arguments)))
		}
		if len(reply.Approvals) == 0 && *state == "all" {
			fmt.Println("no approvals")
		} else if len(reply.Approvals) == 0 {
			fmt.Printf("no %s approvals\n", *state)
		}
		return nil
	case "approve", "deny":
		if len(pos) != 2 {
			return exitError(2)
		}
		decision := messages.DecisionApprove
		if pos[0] == "deny" {
			decision = messages.DecisionDeny
		}
		reply, err := c.Decide(ctx, messages.DecideRequest{ApprovalID: pos[1], Decision: decision, Reason: *reason, By: *by, Remember: *remember})
		if err != nil {
			return err
		}
		if g.json {
			return printJSON(reply)
		}
		fmt.Printf("%s %s by %s; the call is %s\n", reply.Approval.ApprovalID, reply.Approval.State, reply.Approval.DecidedBy, reply.State)
		return nil
	case "answer":
		decision := messages.DecisionApprove
		if *deny {
			decision = messages.DecisionDeny
		}
		reply, err := c.Answer(ctx, messages.DecideRequest{ApprovalID: pos[1], Decision: decision, Reason: *reason, By: *by, Remember: *remember})
		if err != nil {
			return err
		}
		if g.json {
			return printJSON(reply)
		}
		fmt.Printf("%s %s by %s; the call is %s\n", reply.Approval.ApprovalID, reply.Approval.State, reply.Approval.DecidedBy, reply.State)
		return nil
	}
	fmt.Fprintf(os.Stderr, "toolbus approvals: unknown action %q\n", pos[0])
	return exitError(2)
}

func runToolSwitch(ctx context.Context, g globals, enable bool, args []string) error {
	fs := newFlags("tools")
	reason := fs.String("reason", "", "why (required to disable)")
	pos, err := parseInterleaved(fs, args)
	if err != nil || len(pos) != 1 {
		fmt.Fprintln(os.Stderr, "usage: toolbus tools enable|disable TOOL-OR-NAMESPACE [--reason R]")
		return exitError(2)
	}
	nc, c, err := g.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := c.SetToolEnabled(ctx, pos[0], enable, *reason); err != nil {
		return err
	}
	state := "disabled"
	if enable {
		state = "enabled"
	}
	if g.json {
		return printJSON(struct {
			Name  string `json:"name"`
			State string `json:"state"`
		}{pos[0], state})
	}
	fmt.Printf("%s %s\n", pos[0], state)
	return nil
}

func runToolsRemove(ctx context.Context, g globals, args []string) error {
	fs := newFlags("tools remove")
	reason := fs.String("reason", "", "why")
	pos, err := parseInterleaved(fs, args)
	if err != nil || len(pos) != 1 {
		fmt.Fprintln(os.Stderr, "usage: toolbus tools remove TOOL-OR-NAMESPACE [--reason R]")
		return exitError(2)
	}
	nc, c, err := g.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	reply, err := c.RemoveTools(ctx, pos[0], *reason)
	if err != nil {
		return err
	}
	if g.json {
		return printJSON(reply)
	}
	for _, name := range reply.Removed {
		fmt.Printf("%s removed\n", name)
	}
	return nil
}

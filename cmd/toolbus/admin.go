package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
)

func runApprovals(ctx context.Context, g globals, args []string) error {
	fs := newFlags("approvals")
	state := fs.String("state", "pending", "list: pending, approved, denied, expired or all")
	reason := fs.String("reason", "", "approve/deny: why")
	by := fs.String("by", os.Getenv("USER"), "approve/deny: who decides")
	remember := fs.String("remember", messages.RememberCall, "approve: call, turn or agent_tool")
	pos, err := parseInterleaved(fs, args)
	if err != nil || len(pos) == 0 {
		fmt.Fprintln(os.Stderr, "usage: toolbus approvals list [--state S] | approve ID [--remember call|turn|agent_tool] [--reason R] | deny ID [--reason R]")
		return exitError(2)
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

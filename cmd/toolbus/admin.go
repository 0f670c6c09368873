package main

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
)

const approvalsUsage = "usage: toolbus approvals list [--state S] | approve ID [--remember call|turn|agent_tool] [--reason R] [--by NAME] | deny ID [--reason R] [--by NAME] | answer ID --approve|--deny [--remember call|turn|agent_tool] [--reason R] [--by NAME]"

func runApprovals(ctx context.Context, g globals, args []string) error {
	fs := newFlags("approvals")
	state := fs.String("state", "pending", "list: pending, approved, denied, expired, withdrawn or all")
	reason := fs.String("reason", "", "approve/deny/answer: why")
	by := fs.String("by", "", "approve/deny/answer: who decides (default: the NATS user of --user, else the system's name for the user running toolbus)")
	remember := fs.String("remember", messages.RememberCall, "approve, answer --approve: call, turn or agent_tool")
	approve := fs.Bool("approve", false, "answer: the user approves")
	deny := fs.Bool("deny", false, "answer: the user denies")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return flagsFailed(err)
	}
	if len(pos) == 0 {
		fmt.Fprintln(os.Stderr, approvalsUsage)
		return exitError(2)
	}
	if pos[0] == "answer" && (len(pos) != 2 || *approve == *deny) {
		switch {
		case len(pos) != 2:
			fmt.Fprintln(os.Stderr, "toolbus approvals answer: name one approval ID")
		case *approve:
			fmt.Fprintln(os.Stderr, "toolbus approvals answer: --approve or --deny, not both")
		default:
			fmt.Fprintln(os.Stderr, "toolbus approvals answer: say the user's answer with --approve or --deny")
		}
		fmt.Fprintln(os.Stderr, "usage: toolbus approvals answer ID --approve|--deny [--remember call|turn|agent_tool] [--reason R] [--by NAME]")
		return exitError(2)
	}
	if pos[0] != "answer" && (*approve || *deny) {
		return usageError("--approve and --deny go with approvals answer; operators decide with approvals approve|deny ID")
	}
	if (pos[0] == "approve" || pos[0] == "deny") && len(pos) != 2 {
		fmt.Fprintf(os.Stderr, "toolbus approvals %s: name one approval ID (toolbus approvals list shows them)\n", pos[0])
		fmt.Fprintln(os.Stderr, approvalsUsage)
		return exitError(2)
	}
	switch *remember {
	case messages.RememberCall, messages.RememberTurn, messages.RememberAgentTool:
	default:
		return usageError(fmt.Sprintf("--remember is call, turn or agent_tool, not %q", *remember))
	}
	decider := *by
	if pos[0] != "list" && !flagSet(fs, "by") {
		if decider, err = defaultDecider(g, pos[0] == "answer", systemUserName); err != nil {
			return err
		}
	}
	if pos[0] == "approve" || pos[0] == "deny" {
		// A decision is the decider's, never an agent's: --agent does not
		// stand in for --by.
		g.agent = ""
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
			state := a.State
			if a.Voided {
				state += " (voided by a change of policy: it cannot be approved; deny it to end its call)"
			}
			fmt.Printf("%s  %-24s agent=%s turn=%s mode=%s state=%s expires=%s\n    %s %s\n",
				a.ApprovalID, a.Tool, a.Agent, a.Turn, a.Mode, state, a.ExpiresAt.Local().Format(time.DateTime), printable(a.Reason), printable(string(a.Arguments)))
		}
		if len(reply.Approvals) == 0 && *state == "all" {
			fmt.Println("no approvals")
		} else if len(reply.Approvals) == 0 {
			fmt.Printf("no %s approvals\n", *state)
		}
		return nil
	case "approve", "deny", "answer":
		req := messages.DecideRequest{ApprovalID: pos[1], Decision: messages.DecisionApprove, Reason: *reason, By: decider, Remember: *remember}
		if pos[0] == "deny" || pos[0] == "answer" && *deny {
			req.Decision = messages.DecisionDeny
		}
		decide := c.Operator().Decide
		if pos[0] == "answer" {
			decide = c.Answer
		}
		reply, err := decide(ctx, req)
		if err != nil {
			return commandLineRefused(err)
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

// defaultDecider is who a decision is by when --by is not given: the NATS
// user the command connects as (--user; with --creds alone, "" leaves it
// to the coordinator, which knows the authenticated caller), else the
// system's name for the user running the command, else, for an answer,
// the agent --agent names ("", which the client fills in). Without any,
// the command line must say who decides.
func defaultDecider(g globals, answer bool, systemUser func() (string, error)) (string, error) {
	switch {
	case g.user != "":
		return g.user, nil
	case g.creds != "":
		return "", nil
	}
	name, err := systemUser()
	if err == nil && name != "" {
		return name, nil
	}
	if answer && g.agent != "" {
		return "", nil
	}
	why := "the system has no name for the user running toolbus"
	if err != nil {
		why += " (" + err.Error() + ")"
	}
	return "", usageError("who decides? pass --by NAME: no NATS user was given (--user, --creds) and " + why)
}

// systemUserName is the name of the user running the command: the
// system's user database's, else $USER.
func systemUserName() (string, error) {
	u, err := user.Current()
	if err == nil && u.Username != "" {
		return u.Username, nil
	}
	if name := os.Getenv("USER"); name != "" {
		return name, nil
	}
	if err == nil {
		err = fmt.Errorf("user ID %s has no name", u.Uid)
	}
	return "", err
}

// commandLineRefused makes the coordinator's refusal of a value that
// came from the command line (bad_request, invalid_name: a --remember
// that does not fit the call, a --by that is no name) a mistake in the
// command line, exit status 2; any other error is left as it is.
func commandLineRefused(err error) error {
	switch messages.CodeOf(err) {
	case messages.CodeBadRequest, messages.CodeInvalidName:
		return misuse{err}
	}
	return err
}

func runToolSwitch(ctx context.Context, g globals, enable bool, args []string) error {
	fs := newFlags("tools enable|disable")
	reason := fs.String("reason", "", "why (required to disable)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return flagsFailed(err)
	}
	if len(pos) != 1 {
		fmt.Fprintln(os.Stderr, "usage: toolbus tools enable|disable TOOL-OR-NAMESPACE [--reason R]")
		return exitError(2)
	}
	if !enable && strings.TrimSpace(*reason) == "" {
		return usageError("toolbus tools disable needs --reason R: say why " + pos[0] + " is switched off (its callers are told)")
	}
	nc, c, err := g.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := c.Operator().SetToolEnabled(ctx, pos[0], enable, *reason); err != nil {
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
	if !enable && messages.ValidateNamespace(pos[0]) == nil {
		// A namespace is switched off before its tools come too, so a
		// misspelt one is no error: say what was switched off.
		if reply, err := c.ListTools(ctx, messages.ListToolsRequest{Namespace: pos[0]}); err == nil && len(reply.Tools) == 0 {
			fmt.Fprintf(os.Stderr, "note: no tool of namespace %s is in the catalog; its tools are disabled when a worker publishes them (toolbus tools enable %s undoes it)\n", pos[0], pos[0])
		}
	}
	return nil
}

func runToolsRemove(ctx context.Context, g globals, args []string) error {
	fs := newFlags("tools remove")
	reason := fs.String("reason", "", "why")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return flagsFailed(err)
	}
	if len(pos) != 1 {
		fmt.Fprintln(os.Stderr, "usage: toolbus tools remove TOOL-OR-NAMESPACE [--reason R]")
		return exitError(2)
	}
	nc, c, err := g.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	reply, err := c.Operator().RemoveTools(ctx, pos[0], *reason)
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

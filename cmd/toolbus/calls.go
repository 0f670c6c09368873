package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

func runTools(ctx context.Context, g globals, args []string) error {
	fs := newFlags("tools")
	ns := fs.String("namespace", "", "only this namespace")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return flagsFailed(err)
	}
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("toolbus tools takes no argument but --namespace N (or: tools enable|disable|remove NAME); got %q", pos[0]))
	}
	nc, c, err := g.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	reply, err := c.ListTools(ctx, messages.ListToolsRequest{Namespace: *ns})
	if err != nil {
		return err
	}
	if g.json {
		return printJSON(reply)
	}
	writeTools(os.Stdout, reply.Tools)
	return nil
}

// writeTools prints the catalog as a table: each tool's name, its
// description's first line cut to descriptionWidth, and its state (and
// the name its source gives it, when another); a tool whose state says
// nothing has "-".
func writeTools(w io.Writer, tools []messages.ToolEntry) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tDESCRIPTION\tSTATE")
	for _, t := range tools {
		var state []string
		switch {
		case t.Disabled:
			state = append(state, "disabled: "+t.Reason)
		case !t.Available:
			state = append(state, "unavailable: "+t.Unavailable)
		}
		if t.OriginalName != "" {
			state = append(state, "source's name: "+t.OriginalName)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", printable(t.Name), dash(cell(t.Description, descriptionWidth)), dash(printable(strings.Join(state, "; "))))
	}
	_ = tw.Flush()
	if len(tools) == 0 {
		fmt.Fprintln(w, "no tools")
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func runCall(ctx context.Context, g globals, args []string) error {
	fs := newFlags("call")
	watch := fs.Bool("watch", false, "show progress while the call runs; Ctrl-C cancels it")
	timeout := fs.Duration("timeout", 0, "deadline of the call (default: the tool's own); the wait for the result lasts as long as the call")
	turn := fs.String("turn", "", "agent turn the call belongs to")
	key := fs.String("idempotency-key", "", "submitting the same key again returns the same call")
	detach := fs.Bool("detach", false, "print the call ID and return without waiting")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return flagsFailed(err)
	}
	if len(pos) < 1 || len(pos) > 2 {
		fmt.Fprintln(os.Stderr, "usage: toolbus call [--watch | --detach] [--timeout D] [--turn T] [--idempotency-key K] TOOL [JSON-ARGS]")
		return exitError(2)
	}
	var rawArgs messages.JSON
	if len(pos) == 2 {
		if !json.Valid([]byte(pos[1])) {
			return usageError(fmt.Sprintf("arguments are not valid JSON: %s", pos[1]))
		}
		rawArgs = messages.JSON(pos[1])
	}
	nc, c, err := g.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	if !*watch && !*detach {
		var callID string
		res, err := callAndWait(ctx, c, pos[0], rawArgs, *turn, *key, *timeout, &callID)
		if err != nil && ctx.Err() != nil && callID != "" {
			// Interrupted (Ctrl-C, SIGTERM): only the wait ends, as for
			// calls watch; --watch is the form that cancels.
			fmt.Fprintf(os.Stderr, "stopped waiting for call %s, which goes on (toolbus calls watch %s follows it, toolbus calls cancel %s cancels it)\n", callID, callID, callID)
			return interrupted(g, callID)
		}
		if err != nil {
			return err
		}
		return printResult(g, res)
	}
	req := messages.SubmitRequest{Tool: pos[0], Arguments: rawArgs, Turn: *turn, IdempotencyKey: *key, TimeoutMS: timeout.Milliseconds()}
	reply, err := c.Submit(ctx, req)
	if err != nil {
		return err
	}
	if *detach {
		if reply.State == messages.StateAwaitingApproval {
			line := approvalLine(reply.CallID, reply.Approval)
			if cut, ok := strings.CutSuffix(line, "; waiting for the decision"); ok {
				line = cut + "; toolbus calls watch " + reply.CallID + " follows it"
			} else if cut, ok := strings.CutSuffix(line, "; waiting for the answer"); ok {
				line = cut + "; toolbus calls watch " + reply.CallID + " follows it"
			}
			fmt.Fprintln(os.Stderr, line)
		}
		if g.json {
			return printJSON(reply)
		}
		fmt.Println(reply.CallID)
		return nil
	}
	res := reply.Result
	if res == nil {
		if g.json {
			// Standard output is for the events; the other ways of
			// following say the call's ID themselves.
			fmt.Fprintf(os.Stderr, "call %s\n", reply.CallID)
		}
		var printed bool
		if res, printed, err = followCall(ctx, g, c, reply.CallID, true); err != nil {
			return err
		}
		if printed {
			return resultStatus(res)
		}
	}
	return printResult(g, res)
}

// callAndWait makes the call and waits for its result for as long as the
// call takes: no request timeout cuts the wait, which ends with the call's
// deadline (timeout if set, else the tool's own) or an interrupt. The
// call's ID is printed on standard error before it is submitted; a call
// held for an approval is announced at once (who decides, and how), then
// awaited.
func callAndWait(ctx context.Context, c *client.Client, tool string, args messages.JSON, turn, key string, timeout time.Duration, named *string) (*messages.CallResult, error) {
	req := messages.SubmitRequest{Tool: tool, Arguments: args, Turn: turn, IdempotencyKey: key, TimeoutMS: timeout.Milliseconds()}
	res, err := c.CallObserved(ctx, req, &client.CallObserver{
		Named: func(callID string) {
			*named = callID
			fmt.Fprintf(os.Stderr, "call %s\n", callID)
		},
		Held: func(*messages.SubmitReply) bool { return true },
	})
	var held *client.ApprovalRequiredError
	if errors.As(err, &held) {
		fmt.Fprintln(os.Stderr, approvalLine(held.CallID, held.Approval))
		res, err := c.Wait(ctx, held.CallID)
		if err == nil {
			// The decision, as --watch says it: who decided.
			if info, gerr := c.Get(ctx, held.CallID); gerr == nil && info.Approval != nil && info.Approval.State != messages.ApprovalPending {
				fmt.Fprintln(os.Stderr, decisionLine(info.Approval))
			}
		}
		return res, err
	}
	return res, err
}

// approvalLine says that a call waits for an approval: which, why, who
// decides and the command that decides it.
func approvalLine(callID string, a *messages.Approval) string {
	if a == nil {
		return fmt.Sprintf("call %s waits for an approval (toolbus approvals list shows it)", callID)
	}
	var says []string
	for _, text := range []string{a.Reason, a.Message} {
		if text != "" {
			says = append(says, printable(text))
		}
	}
	why := ""
	if len(says) > 0 {
		why = " (" + strings.Join(says, ": ") + ")"
	}
	if a.Mode == messages.ApprovalPrompt {
		return fmt.Sprintf("call %s waits for approval %s%s: the agent's user decides, in the conversation or with: toolbus approvals answer %s --approve|--deny; waiting for the answer",
			callID, a.ApprovalID, why, a.ApprovalID)
	}
	return fmt.Sprintf("call %s waits for approval %s%s: an operator decides with: toolbus approvals approve %s (or deny %s); waiting for the decision",
		callID, a.ApprovalID, why, a.ApprovalID, a.ApprovalID)
}

// decisionLine says what became of an approval once settled.
func decisionLine(a *messages.Approval) string {
	line := "approval " + a.ApprovalID + " " + a.State
	if a.DecidedBy != "" {
		line += " by " + printable(a.DecidedBy)
	}
	if a.DecisionReason != "" {
		line += ": " + printable(a.DecisionReason)
	}
	return line
}

// watchCall draws the call's progress until its result. The first Ctrl-C
// cancels the call and keeps watching for the cancelled result.
func watchCall(ctx context.Context, c *client.Client, callID string, cancelOnInterrupt bool) (*messages.CallResult, error) {
	fmt.Fprintf(os.Stderr, "call %s\n", callID)
	// The progress bar's line is left open: the cancel's note starts a new one.
	watchCtx, stop := watchContext(ctx, c, callID, cancelOnInterrupt, os.Stderr, "\ncancelling…")
	defer stop()
	bar := progressbar.NewOptions64(-1,
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription("queued"),
		progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionThrottle(50*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	defer bar.Exit()
	const scale = 1000
	for ev, err := range c.Watch(watchCtx, callID) {
		if err != nil {
			return nil, err
		}
		switch ev.Kind {
		case messages.EventStarted:
			bar.Describe(fmt.Sprintf("running on %s (attempt %d)", ev.Worker, ev.Attempt))
		case messages.EventProgress:
			p := ev.Progress
			if f := p.Fraction(); f >= 0 {
				if bar.GetMax64() != scale {
					bar.ChangeMax64(scale)
				}
				_ = bar.Set64(int64(f * scale))
			} else {
				_ = bar.Add(1)
			}
			if p.Message != "" {
				bar.Describe(p.Message)
			}
		case messages.EventLog:
			fmt.Fprintf(os.Stderr, "\n[%s] %s\n", ev.Log.Level, ev.Log.Message)
		case messages.EventApproval:
			_ = bar.Clear()
			fmt.Fprintln(os.Stderr, eventLine(ev))
			if ev.Approval != nil && ev.Approval.State == messages.ApprovalPending {
				bar.Describe("awaiting approval " + ev.Approval.ApprovalID)
			} else {
				bar.Describe("queued")
			}
		case messages.EventCancel:
			bar.Describe("cancelling")
		case messages.EventResult:
			_ = bar.Finish()
			return ev.Result, nil
		}
	}
	return nil, errors.New("watch ended without a result")
}

func printResult(g globals, res *messages.CallResult) error {
	if g.json {
		if err := printJSON(res); err != nil {
			return err
		}
	} else {
		writeContent(os.Stdout, res)
	}
	return resultStatus(res)
}

// resultStatus is the exit status of a command that printed a call's
// result: 1 when the result is an error.
func resultStatus(res *messages.CallResult) error {
	if res.IsError {
		return exitError(exitCallFailed)
	}
	return nil
}

func writeContent(w io.Writer, res *messages.CallResult) {
	if res.IsError {
		fmt.Fprintf(w, "%s", res.Status)
		if res.Error != nil {
			fmt.Fprintf(w, " (%s)", res.Error.Code)
		}
		fmt.Fprintln(w, ":")
	}
	for _, b := range res.Content {
		switch b.Type {
		case messages.ContentText:
			fmt.Fprintln(w, b.Text)
		case messages.ContentJSON:
			var v any
			if len(b.JSON) == 0 {
				fmt.Fprintln(w, "null") // a json block holding null
			} else if json.Unmarshal(b.JSON, &v) == nil {
				out, _ := json.MarshalIndent(v, "", "  ")
				fmt.Fprintln(w, string(out))
			} else {
				fmt.Fprintln(w, string(b.JSON))
			}
		default:
			fmt.Fprintf(w, "[%s %s, %d bytes %s]\n", b.Type, b.MIMEType, len(b.Data), b.URI)
		}
	}
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func runCalls(ctx context.Context, g globals, args []string) error {
	if len(args) > 0 && args[0] == "list" {
		return runCallsList(ctx, g, args[1:])
	}
	fs := newFlags("calls")
	reason := fs.String("reason", "", "reason given for a cancel")
	traced := fs.Bool("trace", false, "get: with the call's trace ID (operators get it unasked)")
	full := fs.Bool("full", false, "get: a result cut to its tool's size limit is read whole (calls.full_result) and shown in its place")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return flagsFailed(err)
	}
	if len(pos) != 2 {
		fmt.Fprintln(os.Stderr, "usage: toolbus calls get [--trace] [--full]|watch|cancel [--reason R] CALL-ID, or toolbus calls list [flags]")
		return exitError(2)
	}
	nc, c, err := g.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	id := pos[1]
	switch pos[0] {
	case "get":
		get := c.Get
		if *traced {
			get = c.GetTraced
		}
		info, err := get(ctx, id)
		if err != nil {
			return err
		}
		if r := info.Result; *full && r != nil && r.Truncated && r.FullResult != nil {
			if info.Result, err = c.FullResult(ctx, r.FullResult); err != nil {
				return fmt.Errorf("the whole result of call %s: %w", id, err)
			}
		}
		if g.json {
			return printJSON(info)
		}
		printCallInfo(info)
		return nil
	case "watch":
		res, printed, err := followCall(ctx, g, c, id, false)
		if err != nil && ctx.Err() != nil {
			// Interrupted (Ctrl-C, SIGTERM): only the watch ends.
			fmt.Fprintf(os.Stderr, "stopped watching call %s, which goes on (toolbus calls watch %s follows it again)\n", id, id)
			return interrupted(g, id)
		}
		if err != nil {
			return err
		}
		if printed {
			return resultStatus(res)
		}
		return printResult(g, res)
	case "cancel":
		reply, err := c.Cancel(ctx, id, *reason)
		if err != nil {
			return err
		}
		if g.json {
			return printJSON(reply)
		}
		fmt.Printf("%s: %s\n", id, reply.Outcome)
		return nil
	}
	fmt.Fprintf(os.Stderr, "toolbus calls: unknown action %q (list, get, watch or cancel)\n", pos[0])
	return exitError(2)
}

// stateFlags collects the repeated --state flag.
type stateFlags []messages.CallState

func (s *stateFlags) String() string { return fmt.Sprint(*s) }

func (s *stateFlags) Set(v string) error {
	for _, one := range strings.Split(v, ",") {
		*s = append(*s, messages.CallState(strings.TrimSpace(one)))
	}
	return nil
}

// timeFlag is a time given as RFC 3339 or as a duration before now ("1h").
type timeFlag struct{ t time.Time }

func (f *timeFlag) String() string {
	if f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339)
}

func (f *timeFlag) Set(v string) error {
	if d, err := time.ParseDuration(v); err == nil {
		f.t = time.Now().Add(-d)
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return fmt.Errorf("%q is neither a duration before now (90m) nor an RFC 3339 time", v)
	}
	f.t = t
	return nil
}

// runCallsList is toolbus calls list: a page of the execution log.
func runCallsList(ctx context.Context, g globals, args []string) error {
	fs := newFlags("calls list")
	var req messages.CallsListRequest
	var states stateFlags
	var since, until timeFlag
	fs.StringVar(&req.Agent, "agent", "", "only the calls of this agent")
	fs.StringVar(&req.Turn, "turn", "", "only the calls of this agent turn")
	fs.StringVar(&req.Tool, "tool", "", "only the calls of this tool")
	fs.StringVar(&req.Namespace, "namespace", "", "only the calls of this namespace's tools")
	fs.Var(&states, "state", "only the calls in this state (repeat, or separate with commas)")
	fs.Var(&since, "since", "only the calls queued since this time: RFC 3339, or a duration before now (1h)")
	fs.Var(&until, "until", "only the calls queued before this time: RFC 3339, or a duration before now")
	fs.IntVar(&req.Limit, "limit", 0, fmt.Sprintf("calls in the page (default %d, at most %d)", messages.DefaultCallsListLimit, messages.MaxCallsListLimit))
	fs.StringVar(&req.Cursor, "cursor", "", "continue where the previous page ended (the cursor it printed)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return flagsFailed(err)
	}
	if len(pos) > 0 {
		fmt.Fprintln(os.Stderr, "usage: toolbus calls list [--agent A] [--turn T] [--tool X] [--namespace N] [--state S]... [--since T] [--until T] [--limit N] [--cursor C]")
		return exitError(2)
	}
	req.States, req.Since, req.Until = states, since.t, until.t
	nc, c, err := g.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	reply, err := c.ListCalls(ctx, req)
	if err != nil {
		return err
	}
	if g.json {
		return printJSON(reply)
	}
	writeCallsList(os.Stdout, reply)
	return nil
}

// writeCallsList prints a page of the execution log as a table, and the
// cursor of the next page.
func writeCallsList(w io.Writer, reply *messages.CallsListReply) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUED\tCALL\tTOOL\tAGENT\tTURN\tSTATE\tWAIT\tRUN\tATTEMPTS\tWORKER")
	for _, e := range reply.Calls {
		state := string(e.State)
		if e.Error != nil {
			state += " (" + string(e.Error.Code) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n",
			e.QueuedAt.Local().Format("2006-01-02 15:04:05.000"), printable(e.CallID), printable(e.Tool), dash(printable(e.Agent)), dash(printable(e.Turn)), printable(state),
			millis(e.QueueWaitMS), millis(e.RunMS), e.Attempts, dash(printable(e.Worker)))
	}
	_ = tw.Flush()
	if len(reply.Calls) == 0 {
		fmt.Fprintln(w, "no calls")
	}
	if reply.NextCursor != "" {
		fmt.Fprintf(w, "next page: --cursor %s\n", reply.NextCursor)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// millis prints a duration in milliseconds, or "-" when it is not known.
// millis prints a duration in milliseconds, or "-" when it is not known.
func millis(ms *int64) string {
	if ms == nil {
		return "-"
	}
	return (time.Duration(*ms) * time.Millisecond).String()
}

func printCallInfo(info *messages.CallInfo) {
	fmt.Printf("call     %s\ntool     %s\nstate    %s\n", info.CallID, info.Tool, info.State)
	if info.Turn != "" {
		fmt.Printf("turn     %s\n", info.Turn)
	}
	if info.Attempt > 0 {
		fmt.Printf("attempt  %d on %s\n", info.Attempt, info.Worker)
	}
	if info.TraceID != "" {
		fmt.Printf("trace    %s\n", info.TraceID)
	}
	if p := info.Progress; p != nil {
		fmt.Printf("progress %g/%g %s\n", p.Progress, p.Total, p.Message)
	}
	if info.Result != nil {
		fmt.Println("result:")
		writeContent(os.Stdout, info.Result)
	}
}

func runTurns(ctx context.Context, g globals, args []string) error {
	pos, err := parseInterleaved(newFlags("turns get"), args)
	if err != nil {
		return flagsFailed(err)
	}
	if len(pos) != 2 || pos[0] != "get" {
		fmt.Fprintln(os.Stderr, "usage: toolbus turns get TURN-ID")
		return exitError(2)
	}
	nc, c, err := g.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	turn, err := c.Turn(ctx, pos[1])
	if err != nil {
		return err
	}
	if g.json {
		return printJSON(turn)
	}
	if st := turn.State; st != nil {
		fmt.Printf("agent      %s\n", st.Agent)
		if st.Intake != nil {
			fmt.Printf("intake     bundles %s; tools %s\n", strings.Join(st.Intake.Bundles, ", "), strings.Join(st.Intake.Tools, ", "))
		}
		fmt.Printf("discovered %s\n", strings.Join(st.Discovered, ", "))
		fmt.Printf("activated  %s\n", strings.Join(st.Activated, ", "))
	}
	for _, call := range turn.Calls {
		fmt.Printf("%s  %-28s %s\n", call.CallID, call.Tool, call.State)
	}
	return nil
}

// interrupted ends a wait for a call that goes on: exit 130, and with
// --json the error where the result would have been.
func interrupted(g globals, callID string) error {
	if g.json {
		fmt.Printf(`{"error":{"code":"interrupted","message":"stopped waiting for call %s, which goes on"},"exit_code":%d}`+"\n", callID, exitInterrupted)
	}
	return exitError(exitInterrupted)
}

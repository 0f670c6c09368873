package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// logRecorder keeps a process's log lines, and lets a test wait for one.
type logRecorder struct {
	t       *testing.T
	mu      sync.Mutex
	lines   []string
	changed chan struct{}
}

func newLogRecorder(t *testing.T) *logRecorder {
	return &logRecorder{t: t, changed: make(chan struct{})}
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }

// Handle keeps the record as text: level, message and attributes, each
// value quoted as %q quotes it.
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", rec.Level, rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%q", a.Key, a.Value.String())
		return true
	})
	r.mu.Lock()
	r.lines = append(r.lines, b.String())
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	return nil
}

// waitFor waits until a line holds every one of parts, and returns it.
func (r *logRecorder) waitFor(parts ...string) string {
	r.t.Helper()
	deadline := time.After(testenv.Patience)
	seen := 0
	for {
		r.mu.Lock()
		lines, changed := r.lines, r.changed
		r.mu.Unlock()
		for _, line := range lines[seen:] {
			if containsAll(line, parts) {
				return line
			}
		}
		seen = len(lines)
		select {
		case <-changed:
		case <-deadline:
			r.t.Fatalf("no log line holds %q; the lines:\n%s", parts, strings.Join(lines, "\n"))
		}
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func petTools(names ...string) []worker.Tool {
	var tools []worker.Tool
	for _, name := range names {
		tools = append(tools, worker.Func(name, "Pets: "+name+".", func(ctx context.Context, in struct{}) (string, error) { return name, nil }))
	}
	return tools
}

// TestPolicyRulesThatMatchNoToolAreWarned: a policy whose rule names a
// tool that does not exist (pet:createPet for pets-createPet) loads, and
// the call it was meant to hold runs; the coordinator warns of the rule at
// load, naming the tool likely meant, says when a tool registered later
// makes the rule match, and warns again of the typo in a reloaded file.
func TestPolicyRulesThatMatchNoToolAreWarned(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	logs := newLogRecorder(t)
	policyFile := t.TempDir() + "/policy.yaml"
	writeFile(t, policyFile, "default: allow\nrules:\n  - id: hold-create\n    tool: \"pet:createPet\"\n    effect: ask\n")
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) {
		cfg.PolicyFile = policyFile
		cfg.WorkspaceReloadInterval = 50 * time.Millisecond
		cfg.Logger = slog.New(logs)
	})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "pets", Tools: petTools("createPet", "listPets")})

	logs.waitFor("WARN", "policy rule matches no tool of the catalog", `policy.yaml:4: rules[0] (id \"hold-create\"): tool[0]: \"pet:createPet\" matches no tool of the catalog; did you mean pets-createPet?`)
	// Which is why it is warned of: the call it was meant to hold runs.
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	ctx := testenv.Context(t)
	if res, err := c.Call(ctx, "pets-createPet", nil); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("pets-createPet: %+v %v", res, err)
	}

	// A tool that the rule names registers: the problem is resolved.
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "pet", Tools: petTools("createPet")})
	logs.waitFor("INFO", "policy problem resolved by a change of the catalog", `\"pet:createPet\"`)

	// A reloaded file is checked at once.
	writeFile(t, policyFile, "default: allow\nrules:\n  - {id: hold-create, tool: [\"pet:createPet\", \"pets:createPett\"], effect: ask}\n")
	logs.waitFor("WARN", `tool[1]: \"pets:createPett\" matches no tool of the catalog; did you mean pets-createPet?`)
	if strings.Contains(logs.waitFor("WARN", "pets:createPett"), `tool[0]`) {
		t.Fatal("tool[0] now matches")
	}
}

// TestPolicyExplainIsForOperators: policy.explain says which rule of the
// policy in force decides a call and why, to an operator; an agent's user
// is refused, and the refusal audited.
func TestPolicyExplainIsForOperators(t *testing.T) {
	t.Parallel()
	_, as := identityDeploy(t)
	ctx := testenv.Context(t)
	operator := agentClient(t, as("operator"), "")
	reply, err := operator.Operator().ExplainPolicy(ctx, messages.PolicyExplainRequest{Tool: "demo:echo", Arguments: messages.JSON(`{"text":"hi"}`), Agent: "support-bot"})
	if err != nil {
		t.Fatal(err)
	}
	if reply.Tool != "demo-echo" || reply.Effect != "ask" || reply.Reason != "echo needs a nod" || reply.Rule == nil || reply.Rule.Index != 0 ||
		reply.Rule.Line != 3 || len(reply.Rules) != 1 || reply.Policy != "policy.yaml" || reply.Default != "allow" || !reply.Visible || reply.PolicyVersion == "" {
		t.Fatalf("explain demo-echo: %+v", reply)
	}
	reply, err = operator.Operator().ExplainPolicy(ctx, messages.PolicyExplainRequest{Tool: "demo-word_count", Agent: "support-bot"})
	if err != nil || reply.Effect != "allow" || reply.Rule != nil || len(reply.Rules) != 1 || reply.Rules[0].Matched ||
		reply.Rules[0].Why != "the tool demo-word_count matches none of tool: demo:echo" || !strings.Contains(reply.Reason, "no rule matched") {
		t.Fatalf("explain demo-word_count: %+v %v", reply, err)
	}
	if _, err := operator.Operator().ExplainPolicy(ctx, messages.PolicyExplainRequest{Tool: "demo-nothing"}); !errors.Is(err, messages.ErrToolNotFound) {
		t.Fatalf("explain a tool that does not exist: %v", err)
	}

	agent := agentClient(t, as("agent_a"), "support-bot")
	_, err = agent.Operator().ExplainPolicy(ctx, messages.PolicyExplainRequest{Tool: "demo-echo", Agent: "support-bot"})
	if !errors.Is(err, messages.ErrForbidden) || !strings.Contains(err.Error(), "policy.explain is for operators") {
		t.Fatalf("an agent's user explains: %v", err)
	}
	page, err := operator.Operator().ListAudit(ctx, messages.AuditListRequest{Decision: "forbidden"})
	if err != nil || len(page.Records) == 0 || !strings.HasPrefix(page.Records[0].Reason, messages.EndpointPolicyExplain) {
		t.Fatalf("the refusal is not audited: %+v %v", page, err)
	}
}

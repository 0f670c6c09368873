package integration

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// versionedClient sends raw NATS requests as a client written from an
// older protocol.md would: its own Toolbus-Version, in one encoding.
type versionedClient struct {
	t       *testing.T
	nc      *nats.Conn
	codec   messages.Codec
	version string
	// label is the version the replies are labelled with, when it is not
	// the request's.
	label string
}

// request sends body to endpoint and decodes the reply into out (an
// error reply into a messages.Error, which it returns). Every reply must
// be in the request's encoding and labelled with the version asked.
func (v versionedClient) request(endpoint string, body, out any) *messages.Error {
	v.t.Helper()
	data, err := v.codec.Marshal(body)
	if err != nil {
		v.t.Fatal(err)
	}
	msg := nats.NewMsg("toolbus.api." + endpoint)
	if v.codec == messages.JSONCodec {
		msg.Header.Set(messages.HeaderContentType, messages.ContentTypeJSON)
	}
	msg.Header.Set(messages.HeaderVersion, v.version)
	msg.Data = data
	reply, err := v.nc.RequestMsg(msg, testenv.Patience)
	if err != nil {
		v.t.Fatalf("%s %s (version %s): %v", v.codec, endpoint, v.version, err)
	}
	label := v.version
	if v.label != "" {
		label = v.label
	}
	if got := reply.Header.Get(messages.HeaderVersion); got != label {
		v.t.Errorf("%s %s: reply labelled Toolbus-Version %q, want %q", v.codec, endpoint, got, label)
	}
	wantCT := ""
	if v.codec == messages.JSONCodec {
		wantCT = messages.ContentTypeJSON
	}
	if got := reply.Header.Get(messages.HeaderContentType); got != wantCT {
		v.t.Errorf("%s %s: reply Content-Type %q", v.codec, endpoint, got)
	}
	if reply.Header.Get(micro.ErrorCodeHeader) != "" {
		var e messages.Error
		if err := v.codec.Unmarshal(reply.Data, &e); err != nil {
			v.t.Fatalf("%s %s: error reply %q does not decode: %v", v.codec, endpoint, reply.Data, err)
		}
		if e.Code == messages.CodeUnsupportedVersion {
			v.t.Fatalf("%s %s: version %s refused: %s", v.codec, endpoint, v.version, e.Message)
		}
		return &e
	}
	if err := v.codec.Unmarshal(reply.Data, out); err != nil {
		v.t.Fatalf("%s %s: reply %q does not decode: %v", v.codec, endpoint, reply.Data, err)
	}
	return nil
}

// must is request for a request that must succeed.
func (v versionedClient) must(endpoint string, body, out any) {
	v.t.Helper()
	if e := v.request(endpoint, body, out); e != nil {
		v.t.Fatalf("%s %s: %s: %s", v.codec, endpoint, e.Code, e.Message)
	}
}

// TestVersionTwoClientsAreAnswered: a client of protocol version 2, which
// sends Toolbus-Version: 2 in JSON or in MessagePack, is answered on every
// endpoint of the API as version 3's clients are, in its encoding and
// labelled version 2: it lists tools, calls one and waits, submits, reads,
// follows, lists, cancels, files calls in a turn, activates and discovers
// tools, is held for approval and answers it, sends a model iteration's
// calls and reads their results, and reads what operators read. A version
// 1 request is refused in its own encoding, naming the versions answered;
// the workers' consumer request, which version 2 never sent, answers
// version 3 only; and info answers any version.
func TestVersionTwoClientsAreAnswered(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	workspace := t.TempDir()
	writeFile(t, workspace+"/bundles/demo.yaml", `
id: demo
match:
  - name: "demo:*"
  - name: "demo:sleep"
    approval: {mode: prompt, title: "Wait?", message: "This sleeps a while"}
`)
	policyFile := t.TempDir() + "/policy.yaml"
	writeFile(t, policyFile, "default: allow\nrules:\n  - {tool: \"demo:sha256\", effect: ask, reason: hashing needs a nod}\n")
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) {
		cfg.WorkspaceDir = workspace
		cfg.PolicyFile = policyFile
	})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	nc := testenv.Connect(t, srv.URL())

	for _, codec := range []messages.Codec{messages.JSONCodec, messages.Msgpack} {
		v2 := versionedClient{t: t, nc: nc, codec: codec, version: "2"}
		const agent = "support"
		turn := "v2-json"
		if codec == messages.Msgpack {
			turn = "v2-msgpack"
		}

		// The coordinator sees the worker's tools once its catalog view
		// has followed the worker's registration.
		testenv.Eventually(t, "tools.list lists demo-word_count", func() bool {
			var list messages.ListToolsReply
			v2.must(messages.EndpointToolsList, messages.ListToolsRequest{Agent: agent, Turn: turn}, &list)
			return slices.ContainsFunc(list.Tools, func(e messages.ToolEntry) bool { return e.Name == "demo-word_count" })
		})

		var waited messages.SubmitReply
		v2.must(messages.EndpointCallsSubmit, messages.SubmitRequest{Tool: "demo-word_count", Arguments: messages.JSON(`{"text":"one two three"}`), Agent: agent, Turn: turn, Wait: true}, &waited)
		if waited.State != messages.StateCompleted || waited.Result == nil || !strings.Contains(string(waited.Result.StructuredContent), `"words":3`) {
			t.Fatalf("%s calls.submit with wait: %+v", codec, waited)
		}

		var queued messages.SubmitReply
		v2.must(messages.EndpointCallsSubmit, messages.SubmitRequest{Tool: "demo:echo", Arguments: messages.JSON(`{"text":"hi"}`), Agent: agent, Turn: turn}, &queued)
		var info messages.CallInfo
		v2.must(messages.EndpointCallsGet, messages.GetCallRequest{CallID: queued.CallID, WaitMS: 20_000}, &info)
		if info.Result == nil || info.Result.Content[0].Text != "hi" {
			t.Fatalf("%s calls.get: %+v", codec, info)
		}
		var events messages.CallEventsReply
		v2.must(messages.EndpointCallsEvents, messages.CallEventsRequest{CallID: queued.CallID}, &events)
		if !events.Finished || len(events.Events) == 0 || events.Events[0].Kind != messages.EventQueued {
			t.Fatalf("%s calls.events: %+v", codec, events)
		}
		var log messages.CallsListReply
		v2.must(messages.EndpointCallsList, messages.CallsListRequest{Turn: turn}, &log)
		if len(log.Calls) != 2 || log.Calls[0].CallID != queued.CallID {
			t.Fatalf("%s calls.list: %+v", codec, log.Calls)
		}
		var cancel messages.CancelReply
		v2.must(messages.EndpointCallsCancel, messages.CancelRequest{CallID: queued.CallID, Reason: "late", By: agent}, &cancel)
		if cancel.Outcome != "already_finished" {
			t.Fatalf("%s calls.cancel: %+v", codec, cancel)
		}
		var turnInfo messages.TurnInfo
		v2.must(messages.EndpointTurnsGet, messages.GetTurnRequest{Turn: turn}, &turnInfo)
		if len(turnInfo.Calls) != 2 {
			t.Fatalf("%s turns.get: %+v", codec, turnInfo)
		}
		var activated messages.ActivateReply
		v2.must(messages.EndpointToolsActivate, messages.ActivateRequest{Agent: agent, Turn: turn, Tools: []string{"demo:word_count"}}, &activated)
		if !slices.Contains(activated.Activated, "demo-word_count") {
			t.Fatalf("%s tools.activate: %+v", codec, activated)
		}
		// The discovery index follows the catalog too.
		testenv.Eventually(t, "tools.discover finds demo-word_count", func() bool {
			var found messages.DiscoverReply
			v2.must(messages.EndpointToolsDiscover, messages.DiscoverRequest{Query: "count the words of a text", Agent: agent, Turn: turn}, &found)
			return len(found.Hits) > 0 && found.Hits[0].Name == "demo-word_count"
		})

		// Held for the user's answer, which the agent passes on.
		var held messages.SubmitReply
		v2.must(messages.EndpointCallsSubmit, messages.SubmitRequest{Tool: "demo-sleep", Arguments: messages.JSON(`{"seconds":0.01}`), Agent: agent, Turn: turn}, &held)
		if held.State != messages.StateAwaitingApproval || held.Approval == nil {
			t.Fatalf("%s submit held for approval: %+v", codec, held)
		}
		var pending messages.ListApprovalsReply
		v2.must(messages.EndpointApprovalsList, messages.ListApprovalsRequest{Agent: agent}, &pending)
		if !slices.ContainsFunc(pending.Approvals, func(a messages.Approval) bool { return a.ApprovalID == held.Approval.ApprovalID }) {
			t.Fatalf("%s approvals.list: %+v", codec, pending)
		}
		var answered messages.DecideReply
		v2.must(messages.EndpointApprovalsAnswer, messages.DecideRequest{ApprovalID: held.Approval.ApprovalID, Decision: messages.DecisionApprove, By: "the user"}, &answered)
		if answered.Approval.State != messages.ApprovalApproved {
			t.Fatalf("%s approvals.answer: %+v", codec, answered)
		}
		// Held for an operator, who decides.
		var asked messages.SubmitReply
		v2.must(messages.EndpointCallsSubmit, messages.SubmitRequest{Tool: "demo-sha256", Arguments: messages.JSON(`{"text":"x"}`), Agent: agent, Turn: turn}, &asked)
		if asked.State != messages.StateAwaitingApproval || asked.Approval == nil {
			t.Fatalf("%s submit asked by policy: %+v", codec, asked)
		}
		var decided messages.DecideReply
		v2.must(messages.EndpointApprovalsDecide, messages.DecideRequest{ApprovalID: asked.Approval.ApprovalID, Decision: messages.DecisionDeny, By: "alice", Reason: "not today"}, &decided)
		if decided.Approval.State != messages.ApprovalDenied {
			t.Fatalf("%s approvals.decide: %+v", codec, decided)
		}

		// A model iteration's calls, and their results.
		var batch messages.SubmitBatchReply
		v2.must(messages.EndpointCallsSubmitBatch, messages.SubmitBatchRequest{Format: "anthropic", Agent: agent, Turn: turn, WaitMS: 20_000,
			ToolCalls: messages.JSON(`[{"type": "tool_use", "id": "toolu_1", "name": "demo-echo", "input": {"text": "batched"}}]`)}, &batch)
		if len(batch.Calls) != 1 || batch.Calls[0].CallID == "" || batch.Results == nil || !batch.Results.Complete {
			t.Fatalf("%s calls.submit_batch: %+v", codec, batch)
		}
		var results messages.ResultsReply
		v2.must(messages.EndpointCallsResults, messages.ResultsRequest{Format: "anthropic", Calls: batch.Calls}, &results)
		if !results.Complete || !strings.Contains(string(results.Messages[0]), "batched") {
			t.Fatalf("%s calls.results: %+v", codec, results)
		}
		// A result that was not cut has no pages to read: the refusal is
		// version 2's too.
		if e := v2.request(messages.EndpointCallsFullResult, messages.FullResultRequest{CallID: queued.CallID}, &messages.FullResultReply{}); e == nil || e.Code != messages.CodeBadRequest {
			t.Fatalf("%s calls.full_result: %+v", codec, e)
		}

		// What operators read and do.
		var audit messages.AuditListReply
		v2.must(messages.EndpointAuditList, messages.AuditListRequest{Tool: "demo-sha256"}, &audit)
		if len(audit.Records) == 0 {
			t.Fatalf("%s audit.list: no records", codec)
		}
		var workers messages.WorkersListReply
		v2.must(messages.EndpointWorkersList, messages.WorkersListRequest{Namespace: demo.Name}, &workers)
		if len(workers.Workers) != 1 {
			t.Fatalf("%s workers.list: %+v", codec, workers)
		}
		var stats messages.CallStatsReply
		v2.must(messages.EndpointStatsCalls, messages.CallStatsRequest{Namespace: demo.Name, Minutes: 5}, &stats)
		if len(stats.Minutes) != 5 || len(stats.Namespaces) != 1 || stats.Namespaces[0].Ended == 0 {
			t.Fatalf("%s stats.calls: %+v", codec, stats)
		}
		v2.must(messages.EndpointToolsDisable, messages.ToolSwitchRequest{Tool: "demo-echo", Reason: "checking", By: "alice"}, &struct{}{})
		v2.must(messages.EndpointToolsEnable, messages.ToolSwitchRequest{Tool: "demo-echo", By: "alice"}, &struct{}{})
		if e := v2.request(messages.EndpointToolsRemove, messages.ToolSwitchRequest{Tool: "demo-nothing", By: "alice"}, &struct{}{}); e == nil || e.Code != messages.CodeToolNotFound {
			t.Fatalf("%s tools.remove of no tool: %+v", codec, e)
		}

		// Version 1 is refused, in the request's encoding.
		v1 := versionedClient{t: t, nc: nc, codec: codec, version: "1"}
		msg := nats.NewMsg("toolbus.api." + messages.EndpointToolsList)
		if codec == messages.JSONCodec {
			msg.Header.Set(messages.HeaderContentType, messages.ContentTypeJSON)
		}
		msg.Header.Set(messages.HeaderVersion, v1.version)
		msg.Data, _ = codec.Marshal(messages.ListToolsRequest{})
		reply, err := nc.RequestMsg(msg, testenv.Patience)
		if err != nil {
			t.Fatal(err)
		}
		var refusal messages.Error
		if err := codec.Unmarshal(reply.Data, &refusal); err != nil || refusal.Code != messages.CodeUnsupportedVersion || !strings.Contains(refusal.Message, "answers versions 3 and 2") {
			t.Fatalf("%s version 1: %q (%v)", codec, reply.Data, err)
		}

		// Every version may ask what is spoken; the answer is in the
		// server's version when the request's is not one it answers.
		v1.label = messages.ProtocolVersion
		var spoken messages.InfoReply
		v1.must(messages.EndpointInfo, messages.InfoRequest{}, &spoken)
		if spoken.Version != messages.ProtocolVersion || !slices.Equal(spoken.Versions, []string{"3", "2"}) {
			t.Fatalf("%s info: %+v", codec, spoken)
		}
	}

	// A worker's consumer request answers version 3 only.
	msg := nats.NewMsg("toolbus.consumers." + demo.Name)
	msg.Header.Set(messages.HeaderContentType, messages.ContentTypeJSON)
	msg.Header.Set(messages.HeaderVersion, "2")
	msg.Data, _ = json.Marshal(messages.ConsumerRequest{MaxConcurrency: 8, AckWaitMS: 30_000, MaxAttempts: 3})
	reply, err := nc.RequestMsg(msg, testenv.Patience)
	if err != nil {
		t.Fatal(err)
	}
	var refusal messages.Error
	if err := json.Unmarshal(reply.Data, &refusal); err != nil || refusal.Code != messages.CodeUnsupportedVersion {
		t.Fatalf("consumer request of version 2: %q (%v)", reply.Data, err)
	}
}

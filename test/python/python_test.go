package python

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/natsflags"
	"github.com/toolbus/toolbus/pkg/messages"
)

// The deployed configuration's agent that the caller acts as, and its
// route (deploy/nats/identities.yaml).
const (
	agentUser  = "agent_a"
	agentName  = "support-bot"
	agentRoute = "agentAroute00000000001"
	workerUser = "worker_demo"
)

type deployment struct {
	url string
	as  func(user string) *nats.Conn
}

// deploy starts a server with the deployed users and a coordinator, and
// no worker: namespace demo is the Python worker's.
func deploy(t *testing.T, policy string) *deployment {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is needed to run the Python worker and caller (.ci/run installs it):", err)
	}
	t.Parallel()
	as, url := testenv.DeployedWithoutWorkers(t, policy)
	return &deployment{url: url, as: as}
}

// worker starts a Python worker of namespace demo, connected as the
// namespace's deployed user, and waits until it pulls. (python3 -B, here
// and for the caller, leaves no __pycache__ in testdata.)
func (d *deployment) worker(t *testing.T, id string, args ...string) *testenv.Process {
	t.Helper()
	args = append([]string{"-B", "testdata/worker.py", "--url", d.url,
		"--user", workerUser, "--password", testenv.DeployedPassword(workerUser),
		"--inbox-prefix", natsflags.InboxPrefix(workerUser), "--worker-id", id}, args...)
	p := testenv.Start(t, "python3", args...)
	p.WaitLine(t, "READY "+id)
	return p
}

// call runs the Python caller as the deployed agent and returns what it
// printed; the caller exits non-zero, saying why, when a check fails.
func (d *deployment) call(t *testing.T, args ...string) string {
	t.Helper()
	return d.callAs(t, agentUser, append([]string{"--agent", agentName, "--route", agentRoute}, args...)...)
}

// callAs runs the Python caller as one of the deployed users.
func (d *deployment) callAs(t *testing.T, user string, args ...string) string {
	t.Helper()
	args = append([]string{"-B", "testdata/caller.py", "--url", d.url,
		"--user", user, "--password", testenv.DeployedPassword(user),
		"--inbox-prefix", natsflags.InboxPrefix(user)}, args...)
	out, err := exec.CommandContext(testenv.Context(t), "python3", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("caller %v: %v\n%s", args[len(args)-1], err, out)
	}
	return string(out)
}

// field returns what follows label on the line of out that starts with it.
func field(t *testing.T, out, label string) string {
	t.Helper()
	for line := range strings.Lines(out) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), label+" "); ok {
			return rest
		}
	}
	t.Fatalf("no %s line in:\n%s", label, out)
	return ""
}

func (d *deployment) result(t *testing.T, callID string) messages.CallResult {
	t.Helper()
	var res messages.CallResult
	if err := json.Unmarshal([]byte(field(t, d.call(t, "result", callID), "RESULT")), &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// coordinatorJetStream is JetStream as the coordinator's user sees it,
// to check what the Python programs stored.
func (d *deployment) coordinatorJetStream(t *testing.T) (jetstream.JetStream, context.Context) {
	t.Helper()
	js, err := jetstream.New(d.as("coordinator"))
	if err != nil {
		t.Fatal(err)
	}
	return js, testenv.Context(t)
}

// A worker and a caller written from the protocol's documentation serve
// and call tools, with the permissions a deployed worker user has: its
// tools are listed available, a call with wait and a routed call get the
// worker's output, invalid arguments are refused against the schema it
// registered, a running call is followed and cancelled, and a worker
// that stops deletes its heartbeat.
func TestAPythonWorkerServesCallsUnderTheDeployedPermissions(t *testing.T) {
	d := deploy(t, "default: allow\n")
	w := d.worker(t, "py-one")
	d.call(t, "basic")
	d.call(t, "cancel-running")

	if err := w.Interrupt(t); err != nil {
		t.Fatalf("worker stop: %v\n%s", err, w.Output())
	}
	js, ctx := d.coordinatorJetStream(t)
	kv, err := js.KeyValue(ctx, "toolbus_catalog")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "workers.demo.py-one"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the stopped worker's heartbeat: %v, want it deleted", err)
	}
}

// A call cancelled while no worker runs is not run when a worker
// written from the documentation starts: it finds the call's result
// before running it.
func TestAPythonWorkerDoesNotRunACallCancelledWhileQueued(t *testing.T) {
	d := deploy(t, "default: allow\n")
	// The tools are in the catalog only once a worker registered them.
	first := d.worker(t, "py-first")
	if err := first.Interrupt(t); err != nil {
		t.Fatal(err)
	}
	callID := field(t, d.call(t, "submit", "demo-upper", `{"text": "never"}`), "CALL")
	if outcome := field(t, d.call(t, "cancel", callID), "OUTCOME"); outcome != "cancelled" {
		t.Fatalf("cancel of a queued call with no worker: %s, want cancelled", outcome)
	}
	w := d.worker(t, "py-later")
	// The worker's first line about the call says whether it ran it.
	if line := w.WaitLine(t, callID); !strings.HasPrefix(line, "SKIP ") {
		t.Fatalf("the cancelled call was not skipped: %s\n%s", line, w.Output())
	}
	res := d.result(t, callID)
	if res.Status != messages.StateCancelled || res.Error == nil || res.Error.Code != messages.ResultCancelled || res.Worker != "" {
		t.Errorf("result %+v, want the coordinator's cancelled result", res)
	}
	if strings.Contains(w.Output(), "RAN "+callID) {
		t.Errorf("the cancelled call ran:\n%s", w.Output())
	}
}

// A call whose worker is killed while its tool runs is delivered again,
// once the lease lapses, to another worker, which runs it as attempt 2
// (the delivery count of its acknowledgement subject).
func TestAPythonWorkersCallIsDeliveredAgainAfterItsWorkerDies(t *testing.T) {
	callID, res, a, b := killedMidRun(t, "demo-slow", `{"seconds": 1.5}`, false)
	if res.Status != messages.StateCompleted || res.Attempt != 2 || res.Worker != "py-b" {
		t.Fatalf("result %+v, want completed by py-b as attempt 2\nworker a:\n%s\nworker b:\n%s", res, a.Output(), b.Output())
	}
	if n := strings.Count(b.Output(), "RAN "+callID); n != 1 {
		t.Errorf("worker b ran the call %d times:\n%s", n, b.Output())
	}
}

// A call held for a person's approval reaches the worker as a record
// marked Toolbus-Awaiting, which the worker acknowledges without running
// it; once an operator approves, the call is queued again and runs.
func TestAPythonWorkerRunsAHeldCallOnlyOnceApproved(t *testing.T) {
	d := deploy(t, "default: allow\nrules:\n  - {id: nod, tool: \"demo:upper\", effect: ask, reason: upper needs a nod}\n")
	w := d.worker(t, "py-w")
	submitted := d.call(t, "submit", "demo-upper", `{"text": "held"}`)
	callID, approvalID := field(t, submitted, "CALL"), field(t, submitted, "APPROVAL")
	if line := w.WaitLine(t, callID); line != "SKIP "+callID+" awaiting approval" {
		t.Fatalf("the held call's record: %s, want it skipped as awaiting approval\n%s", line, w.Output())
	}
	if state := field(t, d.callAs(t, "operator", "--agent", "", "approve", approvalID), "STATE"); state != "approved" {
		t.Fatalf("approval state %s, want approved", state)
	}
	res := d.result(t, callID)
	if res.Status != messages.StateCompleted || res.Worker != "py-w" || len(res.Content) != 1 || res.Content[0].Text != "HELD" {
		t.Fatalf("result %+v, want HELD from py-w", res)
	}
	if n := strings.Count(w.Output(), "RAN "+callID); n != 1 {
		t.Errorf("the approved call ran %d times:\n%s", n, w.Output())
	}
}

// An at-most-once tool's start is stored before it runs: a call whose
// worker is killed while that tool runs is not run again by the next
// delivery's worker, which ends it failed with outcome_unknown, giving
// the attempt and start time of the attempt that started it.
func TestAPythonWorkerNeverRunsAnAtMostOnceCallTwice(t *testing.T) {
	callID, res, _, b := killedMidRun(t, "demo-once", `{"seconds": 30}`, false)
	if res.Status != messages.StateFailed || res.Error == nil || res.Error.Code != messages.ResultOutcomeUnknown || res.Worker != "py-b" {
		t.Fatalf("result %+v, want failed with outcome_unknown by py-b\nworker b:\n%s", res, b.Output())
	}
	if res.Attempt != 1 || res.StartedAt.IsZero() || !strings.Contains(res.Error.Message, "(attempt 1, on worker py-a)") {
		t.Errorf("result %+v, want the attempt and start of py-a's attempt 1", res)
	}
	if strings.Contains(b.Output(), "RAN "+callID) {
		t.Errorf("the at-most-once call ran again:\n%s", b.Output())
	}
}

// The consumer delivers a call once more than its namespace's attempts,
// only for the failure to be recorded. With max_attempts 1, a call whose
// worker is killed while its tool runs reaches the next worker as attempt
// 2, the extra delivery: a worker written from the documentation does not
// run it, and ends it failed with max_attempts, giving attempt 1 and the
// message the documentation gives.
func TestAPythonWorkerEndsACallPastItsAttemptsWithoutRunningIt(t *testing.T) {
	callID, res, a, b := killedMidRun(t, "demo-slow", `{"seconds": 10}`, true, "--max-attempts", "1")
	const message = "the call was delivered 1 times and no attempt finished: the workers that took it stopped, lost their lease, or do not serve the tool"
	if res.Status != messages.StateFailed || !res.IsError || res.Error == nil || res.Error.Code != messages.ResultAttempts || res.Worker != "py-b" {
		t.Fatalf("result %+v, want failed with max_attempts by py-b\nworker b:\n%s", res, b.Output())
	}
	if res.Attempt != 1 || !res.StartedAt.IsZero() || res.Error.Message != message || len(res.Content) != 1 || res.Content[0].Text != message {
		t.Errorf("result %+v (error %+v), want attempt 1, no started_at, and the message %q", res, *res.Error, message)
	}
	if line := b.WaitLine(t, callID); line != "SKIP "+callID+" attempts exhausted" {
		t.Errorf("worker b's first line about the call: %s, want it skipped as exhausted\n%s", line, b.Output())
	}
	if n := strings.Count(a.Output()+"\n"+b.Output(), "RAN "+callID); n != 1 {
		t.Errorf("the call's tool ran %d times, want once\nworker a:\n%s\nworker b:\n%s", n, a.Output(), b.Output())
	}
}

// A result larger than its tool's max_result_size is cut by a worker
// written from the documentation, which keeps the whole result in its
// namespace's results object store with the deployed worker user's
// permissions: the caller, the deployed agent, gets the cut result and
// reads the whole one back a page at a time through calls.full_result
// (the caller checks the pages, and that they join to the tool's output).
// The object is one that a NATS client's object store reads, its size and
// digest checked.
func TestAPythonWorkersLargeResultIsCutAndReadBackWhole(t *testing.T) {
	d := deploy(t, "default: allow\n")
	w := d.worker(t, "py-w")
	// 40,000 lines of 25 bytes, a megabyte: 8 chunks of 128 KiB, 3 pages.
	out := d.call(t, "full-result", "demo-repeat", `{"text": "a line of a long output.\n", "times": 40000}`)
	callID := field(t, out, "CALL")
	if pages, err := strconv.Atoi(field(t, out, "PAGES")); err != nil || pages < 2 {
		t.Errorf("the whole result came in %s pages, want several", field(t, out, "PAGES"))
	}
	w.WaitLine(t, "STORED "+callID)
	if n := strings.Count(w.Output(), "RAN "+callID); n != 1 {
		t.Errorf("the tool ran %d times:\n%s", n, w.Output())
	}

	res := d.result(t, callID)
	if !res.Truncated || res.FullResult == nil || res.FullResult.Bucket != "toolbus_results_demo" || res.FullResult.Name != callID {
		t.Fatalf("the call's result is not the cut one naming the whole: truncated %v, full_result %+v", res.Truncated, res.FullResult)
	}
	if size := messages.ContentSize(&res); size > 4096 {
		t.Errorf("the cut result's content is %d bytes, over the tool's max_result_size 4096", size)
	}

	// The object as a NATS object store describes it, and its chunks, read
	// as the coordinator may: by direct get.
	js, ctx := d.coordinatorJetStream(t)
	store, err := js.ObjectStore(ctx, "toolbus_results_demo")
	if err != nil {
		t.Fatal(err)
	}
	info, err := store.GetInfo(ctx, callID)
	if err != nil {
		t.Fatalf("the whole result's description in the object store: %v", err)
	}
	stream, err := js.Stream(ctx, "OBJ_toolbus_results_demo")
	if err != nil {
		t.Fatal(err)
	}
	var whole []byte
	for seq, chunks := uint64(1), uint32(0); chunks < info.Chunks; chunks++ {
		msg, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject("$O.toolbus_results_demo.C."+info.NUID))
		if err != nil {
			t.Fatalf("chunk %d of %d: %v", chunks+1, info.Chunks, err)
		}
		whole, seq = append(whole, msg.Data...), msg.Sequence+1
	}
	sum := sha256.Sum256(whole)
	if digest := "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:]); digest != info.Digest || uint64(len(whole)) != info.Size || int64(info.Size) != res.FullResult.Size {
		t.Errorf("the object's chunks: %d bytes, %s; its description: %d bytes, %s; full_result: %d bytes", len(whole), digest, info.Size, info.Digest, res.FullResult.Size)
	}
	if got, want := strconv.FormatUint(info.Size, 10)+" "+info.Digest, field(t, out, "WHOLE"); got != want {
		t.Errorf("the object store holds %s; the pages joined were %s", got, want)
	}
	var full messages.CallResult
	if err := json.Unmarshal(whole, &full); err != nil {
		t.Fatal(err)
	}
	if full.Truncated || len(full.Content) != 1 || full.Content[0].Text != strings.Repeat("a line of a long output.\n", 40000) {
		t.Errorf("the stored whole is not the tool's output: truncated %v, %d blocks", full.Truncated, len(full.Content))
	}
}

// killedMidRun calls tool with arguments on Python worker py-a, kills
// py-a once the tool runs, starts py-b, and returns the call's result.
// Both workers get workerArgs. The lease is short, so that the call is
// delivered again soon. An at-least-once tool's started event is
// published without waiting for the stream: with waitStarted, py-a is
// killed only once the caller has seen it stored (which takes a caller's
// start, so the tool must run long enough).
func killedMidRun(t *testing.T, tool, arguments string, waitStarted bool, workerArgs ...string) (callID string, res messages.CallResult, a, b *testenv.Process) {
	t.Helper()
	d := deploy(t, "default: allow\n")
	workerArgs = append([]string{"--ack-wait-ms", "1500"}, workerArgs...)
	a = d.worker(t, "py-a", workerArgs...)
	callID = field(t, d.call(t, "submit", tool, arguments), "CALL")
	a.WaitLine(t, "RAN "+callID+" attempt=1")
	if waitStarted {
		d.call(t, "started", callID)
	}
	a.Kill()
	b = d.worker(t, "py-b", workerArgs...)
	return callID, d.result(t, callID), a, b
}

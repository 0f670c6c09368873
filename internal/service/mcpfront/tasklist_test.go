package mcpfront_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TestTasksListedInANewSession: tasks outlive sessions, and tasks/list in
// a new session of an agent (a new turn) lists every task of the agent —
// those of its other sessions and the calls it made through the bus —,
// newest first, page by page with nextCursor; never another agent's. A
// cursor the front did not give is invalid params.
func TestTasksListedInANewSession(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	url := s.twoAgentsFront(t)
	ctx := testenv.Context(t)

	first := "AAAAAAAAAAAAAAAAAAAAAA.t-first-session"
	mine := map[string]bool{}
	var firstTasks []string
	for _, text := range []string{"one", "two"} {
		var created mcp.CreateTaskResult
		if e := rpc(t, url, first, "tools/call", map[string]any{"name": "demo-echo", "arguments": map[string]any{"text": text}, "task": map[string]any{}}, &created); e != nil {
			t.Fatalf("task-augmented call: %+v", e)
		}
		mine[created.Task.TaskId] = true
		firstTasks = append(firstTasks, created.Task.TaskId)
	}
	// More calls of the analyst, outside MCP, than one page holds.
	bus := testenv.Client(t, s.url, client.Options{Agent: "analyst"})
	for range messages.DefaultCallsListLimit + 5 {
		reply, err := bus.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"bus"}`), Turn: "t-bus"})
		if err != nil {
			t.Fatal(err)
		}
		mine[reply.CallID] = true
	}
	var theirs mcp.CreateTaskResult
	if e := rpcAs(t, url, "token-of-ops", "AAAAAAAAAAAAAAAAAAAAAA.t-ops-session", "tools/call", map[string]any{"name": "demo-echo", "arguments": map[string]any{"text": "ops"}, "task": map[string]any{}}, &theirs); e != nil {
		t.Fatalf("the other agent's task: %+v", e)
	}

	// listAll follows tasks/list's cursors in a session to the end.
	listAll := func(bearerToken, session string) (ids []string, pages int) {
		t.Helper()
		cursor := ""
		for {
			params := map[string]any{}
			if cursor != "" {
				params["cursor"] = cursor
			}
			var page mcp.ListTasksResult
			if e := rpcAs(t, url, bearerToken, session, "tasks/list", params, &page); e != nil {
				t.Fatalf("tasks/list: %+v", e)
			}
			pages++
			if len(page.Tasks) > messages.DefaultCallsListLimit {
				t.Errorf("a page of %d tasks", len(page.Tasks))
			}
			for _, task := range page.Tasks {
				ids = append(ids, task.TaskId)
				if task.CreatedAt == "" || task.LastUpdatedAt == "" || task.PollInterval == nil {
					t.Errorf("a listed task: %+v", task)
				}
			}
			if cursor = string(page.NextCursor); cursor == "" {
				return ids, pages
			}
		}
	}
	second := "BBBBBBBBBBBBBBBBBBBBBB.t-second-session"
	ids, pages := listAll(token, second)
	if got := slices.Sorted(slices.Values(ids)); !slices.Equal(got, slices.Sorted(maps.Keys(mine))) {
		t.Errorf("tasks/list in a new session lists %d tasks, want the agent's %d:\n got %v", len(ids), len(mine), got)
	}
	if pages < 2 {
		t.Errorf("%d tasks came in %d page", len(ids), pages)
	}
	if slices.Contains(ids, theirs.Task.TaskId) {
		t.Error("the other agent's task is listed")
	}
	// Newest first: the first session's tasks were made first, and the
	// new session reads them.
	if n := len(ids); n < 2 || ids[n-1] != firstTasks[0] || ids[n-2] != firstTasks[1] {
		t.Errorf("the first session's tasks %v are not the last listed: %v", firstTasks, ids)
	}
	for _, id := range firstTasks {
		var got mcp.GetTaskResult
		if e := rpc(t, url, second, "tasks/get", map[string]any{"taskId": id}, &got); e != nil || got.TaskId != id {
			t.Errorf("tasks/get of a listed task: %+v %+v", got, e)
		}
	}

	opsIDs, _ := listAll("token-of-ops", "CCCCCCCCCCCCCCCCCCCCCC.t-ops-new")
	if !slices.Equal(opsIDs, []string{theirs.Task.TaskId}) {
		t.Errorf("the other agent lists %v, want its one task %s", opsIDs, theirs.Task.TaskId)
	}

	if e := rpc(t, url, second, "tasks/list", map[string]any{"cursor": "not-a-cursor"}, nil); e == nil || e.Code != mcp.INVALID_PARAMS {
		t.Errorf("tasks/list with a cursor the front did not give: %+v", e)
	}
}

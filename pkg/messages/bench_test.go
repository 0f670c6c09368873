package messages

import (
	"testing"
	"time"
)

// The messages of one call as the call path decodes them: the submit, the
// request a worker pulls (in its queued event, with the decision of the
// policy that allowed it), and the result event.
var (
	benchTime    = time.Date(2026, 11, 29, 12, 0, 0, 123456789, time.UTC)
	benchArgs    = JSON(`{"path":"/home/user/project/notes.txt","content":"hello, world","force":false,"mode":"rw","lines":[1,2,30000],"ratio":0.25}`)
	benchSubmit  = SubmitRequest{Tool: "files-write", Arguments: benchArgs, Agent: "team3-agent-17", Turn: "turn-42", IdempotencyKey: "k-9f8e7d", TimeoutMS: 30000, Wait: true, WaitMS: 5000}
	benchRequest = CallRequest{CallID: "01JDQ8ZKX5T3V9W2Y4B6N8M0PC", Tool: "files-write", Namespace: "files", Method: "write", Arguments: benchArgs,
		Agent: "team3-agent-17", Turn: "turn-42", ArgumentsDigest: "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
		QueuedAt: benchTime, Deadline: benchTime.Add(30 * time.Second), MaxAttempts: 3, Notify: "_INBOX.abcdef.123"}
	benchQueued = CallEvent{CallID: benchRequest.CallID, Kind: EventQueued, Time: benchTime, Request: &benchRequest,
		Audit: &QueuedAudit{Decision: AuditAllowed, PolicyVersion: "sha256:9f86d081884c7d65", Reason: "the default"}}
	benchEvent = CallEvent{CallID: benchRequest.CallID, Kind: EventResult, Time: benchTime, Attempt: 1, Worker: "worker-7",
		Result: &CallResult{CallID: benchRequest.CallID, Tool: "files-write", Status: StateCompleted,
			Content:           []ContentBlock{TextBlock("wrote 12 bytes to /home/user/project/notes.txt")},
			StructuredContent: JSON(`{"bytes":12,"path":"/home/user/project/notes.txt"}`),
			Attempt:           1, Worker: "worker-7", QueuedAt: benchTime, StartedAt: benchTime.Add(time.Millisecond), FinishedAt: benchTime.Add(3 * time.Millisecond)}}
)

func benchDecode[T any](b *testing.B, v *T) {
	b.Helper()
	data, err := Msgpack.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var out T
		if err := Msgpack.Unmarshal(data, &out); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeSubmitRequest(b *testing.B)   { benchDecode(b, &benchSubmit) }
func BenchmarkDecodeCallRequest(b *testing.B)     { benchDecode(b, &benchRequest) }
func BenchmarkDecodeCallEventResult(b *testing.B) { benchDecode(b, &benchEvent) }
func BenchmarkDecodeCallEventQueued(b *testing.B) { benchDecode(b, &benchQueued) }

func benchEncode[T any](b *testing.B, v *T) {
	b.Helper()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Msgpack.Marshal(v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeSubmitRequest(b *testing.B)   { benchEncode(b, &benchSubmit) }
func BenchmarkEncodeCallRequest(b *testing.B)     { benchEncode(b, &benchRequest) }
func BenchmarkEncodeCallEventResult(b *testing.B) { benchEncode(b, &benchEvent) }
func BenchmarkEncodeCallEventQueued(b *testing.B) {
	benchEncode(b, &CallEvent{CallID: benchRequest.CallID, Kind: EventQueued, Time: benchTime, Request: &benchRequest})
}
func BenchmarkEncodeCallEventQueuedAudited(b *testing.B) { benchEncode(b, &benchQueued) }
